"""The HTTP server and client on a free loopback port: same answers as in-process, clear 4xx."""
import httpx
import pytest

from datastore.build import DatastoreConfig, build
from datastore.client import RetrievalClient
from datastore.retriever import Datastore, RetrievalError
from datastore.serve import main as serve_main
from datastore.serve import serve_in_thread
from tests.test_datastore import write_corpus


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    folder = tmp_path_factory.mktemp("served")
    corpus = write_corpus(folder / "corpus.jsonl")
    build(DatastoreConfig(name="served", corpus=str(corpus), retrievers=["bm25"]), root=folder / "ds", progress=False)
    store = Datastore.load(folder / "ds")
    with serve_in_thread(store) as url:
        client = RetrievalClient(url, retries=0)
        yield store, client, url
        client.close()


def test_client_matches_in_process(served):
    store, client, _ = served
    for query in ["Kestrel shipping company", "who was born in 1871", "Norvania capital"]:
        assert client.search(query, 3) == store.search(query, 3)
    assert client.search_batch(["Kestrel", "Bram Ollen"], 2) == store.search_batch(["Kestrel", "Bram Ollen"], 2)
    assert client.open("ada", 2) == store.open("ada", 2)
    assert client.find("ada", "born") == store.find("ada", "born")
    assert client.info()["docs"] == 5
    first = store.search("Kestrel shipping company", 3)[0].doc_id
    hidden = client.search("Kestrel shipping company", 3, exclude={first})
    assert first not in [hit.doc_id for hit in hidden]
    assert hidden == store.search("Kestrel shipping company", 3, exclude={first})


@pytest.mark.parametrize("call, status, message", [
    (lambda c: c.search("", 3), 400, "query is empty"),
    (lambda c: c.search("x" * 10_000, 3), 400, "10000 characters"),
    (lambda c: c.search("kestrel", -1), 400, "k must be an integer"),
    (lambda c: c.search("kestrel", 10**9), 400, "k must be an integer"),
    (lambda c: c.search_batch([], 3), 400, "1 to 256 queries"),
    (lambda c: c.open("nope"), 404, "unknown document id"),
    (lambda c: c.open("/etc/passwd"), 404, "unknown document id"),
    (lambda c: c.open("ada", 1000), 400, "out of range"),
])
def test_bad_requests_get_a_reason(served, call, status, message):
    _, client, _ = served
    with pytest.raises(RetrievalError, match=message) as info:
        call(client)
    assert info.value.status == status


def test_malformed_bodies_are_4xx(served):
    _, _, url = served
    assert httpx.post(f"{url}/search", content=b"{not json", headers={"content-type": "application/json"}).status_code == 422
    assert httpx.post(f"{url}/search", json={"k": 3}).status_code == 422  # no query
    assert httpx.post(f"{url}/search", json={"query": "a", "k": "many"}).status_code == 422
    assert httpx.post(f"{url}/open", json={"doc_id": 5}).status_code == 422
    assert httpx.get(f"{url}/nowhere").status_code == 404


def test_server_refuses_a_missing_datastore(runs, capsys):
    with pytest.raises(Exception, match="make datastore"):
        serve_main(["--name", "never-built", "--port", "0"])


def test_client_reports_a_server_that_is_down():
    client = RetrievalClient("http://127.0.0.1:9", retries=1, backoff=0.01, timeout=1)
    with pytest.raises(httpx.TransportError):
        client.search("anything", 1)
