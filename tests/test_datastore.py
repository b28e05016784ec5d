"""Index round-trip, manifest skip/rebuild, hybrid fusion, the retrieval interface and its bad inputs."""
import json

import pytest

from common.errors import UserError
from datastore.build import DatastoreConfig, build
from datastore.retriever import MAX_K, Datastore, RetrievalError, make_snippet, rrf_fuse

DOCS = [
    {"id": "kestrel-city", "title": "Kestrel (city)", "text": "Kestrel is a city in Norvania. It was founded in 1611. Its population is 80,000."},
    {"id": "kestrel-co", "title": "Kestrel (company)", "text": "Kestrel is a shipping company. It was founded by Ada Voss in 1903."},
    {"id": "ada", "title": "Ada Voss", "text": "Ada Voss was an engineer. She was born in Kestrel in 1871. " + "She liked bridges. " * 150},
    {"id": "norvania", "title": "Norvania", "text": "Norvania is a country. Its capital is Kestrel. Its currency is the crown."},
    {"id": "bram", "title": "Bram Ollen", "text": "Bram Ollen was a painter of harbours and ships."},
]


def write_corpus(path, docs=DOCS):
    path.write_text("".join(json.dumps(doc) + "\n" for doc in docs))
    return path


@pytest.fixture
def corpus(tmp_path):
    return write_corpus(tmp_path / "corpus.jsonl")


@pytest.fixture
def bm25_store(runs, corpus):
    build(DatastoreConfig(name="small", corpus=str(corpus), retrievers=["bm25"], chunk_words=100, chunk_overlap=20), progress=False)
    return Datastore.load("small")


def test_round_trip_bm25(bm25_store):
    hits = bm25_store.search("Kestrel shipping company founder", k=3)
    assert hits[0].doc_id == "kestrel-co"
    assert hits[0].title == "Kestrel (company)"
    assert "shipping" in hits[0].snippet
    assert len({hit.doc_id for hit in hits}) == len(hits)  # one hit per document, chunks merged
    assert bm25_store.manifest["counts"] == {"docs": 5, "passages": 10}  # Ada: 462 words -> 6 chunks


def test_excluded_documents_leave_the_hits_ranked_after_them(bm25_store):
    """search(..., exclude=): what data/trajectory_misses.py shows as a search that missed its page."""
    full = bm25_store.search("Kestrel founded", k=5)
    hidden = {full[0].doc_id, full[2].doc_id}
    rest = bm25_store.search("Kestrel founded", k=3, exclude=hidden)
    assert [h.doc_id for h in rest] == [h.doc_id for h in full if h.doc_id not in hidden][:3]
    assert bm25_store.search("Kestrel founded", k=5, exclude=()) == full


def test_open_pages_and_find(bm25_store):
    first = bm25_store.open("ada")
    assert first.startswith("[ada] Ada Voss (page 1 of ")
    pages = int(first.split("of ")[1].split(")")[0])
    assert pages > 1
    last = bm25_store.open("ada", pages)
    assert "bridges" in last
    assert bm25_store.find("ada", "BORN") == ["She was born in Kestrel in 1871."]
    assert bm25_store.find("bram", "zebra") == []
    # no dense index: sentences sharing the most words, at most two, in the page's order
    assert bm25_store.find("kestrel-city", "when founded") == ["It was founded in 1611."]
    assert bm25_store.find("kestrel-city", "who is in it") == []  # function words are no evidence
    assert bm25_store.find("ada", "she liked") == ["She liked bridges."] * 2  # 150 sentences match


@pytest.mark.parametrize("call, message", [
    (lambda s: s.search("", 3), "query is empty"),
    (lambda s: s.search("   ", 3), "query is empty"),
    (lambda s: s.search("x" * 10_000, 3), "10000 characters"),
    (lambda s: s.search("kestrel", 0), "k must be an integer"),
    (lambda s: s.search("kestrel", MAX_K + 1), "k must be an integer"),
    (lambda s: s.search("kestrel", 3, method="magic"), "unknown search method"),
    (lambda s: s.search("kestrel", 3, method="dense"), "no dense index"),
    (lambda s: s.open("w-999999"), "unknown document id"),
    (lambda s: s.open("../../etc/passwd"), "unknown document id"),
    (lambda s: s.open("ada", 99), "out of range"),
    (lambda s: s.open("ada", 0), "out of range"),
    (lambda s: s.find("ada", ""), "query is empty"),
])
def test_bad_arguments_raise_clear_errors(bm25_store, call, message):
    with pytest.raises(RetrievalError, match=message):
        call(bm25_store)


def test_words_not_in_vocabulary_return_no_hits(bm25_store):
    assert bm25_store.search("zzyzx qwvx", 5) == []


def test_manifest_skip_and_rebuild(runs, corpus, capsys):
    config = DatastoreConfig(name="m", corpus=str(corpus), retrievers=["bm25"])
    first = build(config, progress=False)
    assert build(config, progress=False) == first
    assert "skipped" in capsys.readouterr().out
    write_corpus(corpus, DOCS + [{"id": "new", "title": "New", "text": "A new document about owls."}])
    rebuilt = build(config, progress=False)
    assert rebuilt["counts"]["docs"] == 6
    assert Datastore.load("m").search("owls", 1)[0].doc_id == "new"
    changed = build(DatastoreConfig(name="m", corpus=str(corpus), retrievers=["bm25"], bm25_k1=1.2), progress=False)
    assert changed["config"]["bm25_k1"] == 1.2 and "skipped" not in capsys.readouterr().out.splitlines()[-1]


def test_failed_build_leaves_nothing_loadable(runs, corpus, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(corpus.read_text() + "{corrupt\n")
    with pytest.raises(UserError, match="line 6"):
        build(DatastoreConfig(name="bad", corpus=str(bad), retrievers=["bm25"]), progress=False)
    assert not (runs / "datastore" / "bad").exists()
    assert not (runs / "datastore" / "bad.partial").exists()
    # a build killed outright leaves only <name>.partial, which is never loaded
    (runs / "datastore" / "killed.partial").mkdir(parents=True)
    with pytest.raises(UserError, match="no complete datastore"):
        Datastore.load("killed")


def test_failed_rebuild_keeps_the_previous_datastore(runs, corpus, tmp_path):
    build(DatastoreConfig(name="keep", corpus=str(corpus), retrievers=["bm25"]), progress=False)
    corpus.write_text(corpus.read_text() + "{corrupt\n")
    with pytest.raises(UserError):
        build(DatastoreConfig(name="keep", corpus=str(corpus), retrievers=["bm25"]), progress=False)
    assert Datastore.load("keep").manifest["counts"]["docs"] == 5


def test_missing_datastore_names_the_fix(runs):
    with pytest.raises(UserError, match="make datastore"):
        Datastore.load("never-built")


def test_rrf_fusion_order():
    fused = rrf_fuse([[1, 2, 3], [3, 2, 4]])
    order = [item for item, _ in fused]
    # 3 (ranks 3 and 1) edges out 2 (ranks 2 and 2): 1/63 + 1/61 > 2/62; 1 is in one list only
    assert order == [3, 2, 1, 4]
    assert fused[0][1] == pytest.approx(1 / 63 + 1 / 61)
    assert [i for i, _ in rrf_fuse([[1, 2], [2, 1]])] == [1, 2]  # tie -> the earliest list decides
    assert [i for i, _ in rrf_fuse([[1, 2], [2, 1]], weights=[1.0, 2.0])] == [2, 1]


def test_snippet_keeps_the_naming_sentence_and_the_best_match():
    text = "Ada Voss was an engineer. She liked owls. She was born in Kestrel in 1871."
    assert make_snippet(text, "where was Ada Voss born") == "Ada Voss was an engineer. ... She was born in Kestrel in 1871."
    assert len(make_snippet("word " * 500, "word", max_chars=50)) <= 54


def test_dense_and_hybrid(runs, corpus):
    pytest.importorskip("sentence_transformers")
    build(DatastoreConfig(name="dense", corpus=str(corpus), retrievers=["bm25", "dense"]), progress=False)
    store = Datastore.load("dense")
    assert store.default_method == "hybrid"
    dense = store.search("a firm that moves cargo by sea", k=2, method="dense")
    assert dense[0].doc_id == "kestrel-co"
    hybrid = store.search("capital city and currency of Norvania", k=3, method="hybrid")
    assert hybrid[0].doc_id == "norvania"
    bm25_ids = [h.doc_id for h in store.search("Kestrel", 5, "bm25")]
    dense_ids = [h.doc_id for h in store.search("Kestrel", 5, "dense")]
    assert set(h.doc_id for h in store.search("Kestrel", 5, "hybrid")) <= set(bm25_ids) | set(dense_ids)


def test_find_and_snippets_rank_sentences_by_meaning(runs, tmp_path):
    pytest.importorskip("sentence_transformers")
    corpus = write_corpus(tmp_path / "corpus.jsonl", DOCS + [{"id": "blank", "title": "Blank", "text": " "}])
    build(DatastoreConfig(name="dense", corpus=str(corpus), retrievers=["bm25", "dense"]), progress=False)
    store = Datastore.load("dense")
    assert store.find("blank", "anything") == []
    assert "Its population is 80,000." in store.find("kestrel-city", "inhabitants")
    assert "She was born in Kestrel in 1871." in store.find("ada", "birthplace")
    assert store.find("kestrel-co", "founder") == store.find("kestrel-co", "founder")  # cached vectors agree
    # snippets: the sentence closest to what is asked (the query's words the first sentence lacks)
    def snippet(query, doc_id):
        return {hit.doc_id: hit.snippet for hit in store.search(query, 5, "bm25")}[doc_id]
    assert snippet("Kestrel inhabitants", "kestrel-city") == "Kestrel is a city in Norvania. ... Its population is 80,000."
    assert snippet("Norvania money", "norvania") == "Norvania is a country. ... Its currency is the crown."
    assert snippet("Norvania", "norvania") == "Norvania is a country. ... Its capital is Kestrel."  # nothing asked
    # a literal match outranks a closer meaning, and a find never floods the context
    assert store.find("ada", "bridges") == ["She liked bridges."] * 2
    assert len(store.find("norvania", "money")) == 2
