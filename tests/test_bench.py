"""The retrieval bench at tiny sizes: recall@k, fusion, the server under load, the CLI sections.

    .venv/bin/python -m pytest -q tests/test_bench.py            # fast ones
    .venv/bin/python -m pytest -q -m slow tests/test_bench.py    # the dense ones too

Every artifact goes to a tmp RUNS_DIR; the server runs on 127.0.0.1 only.
"""
import importlib.util
import json

import pytest

from common.paths import realdata_dir
from datastore import bench
from datastore.bench_load import percentiles, server_load
from datastore.bm25 import BM25Index
from datastore.build import DatastoreConfig, build
from datastore.retriever import Datastore

HOTPOT = realdata_dir() / "hotpotqa_dev500" / "questions.jsonl"
needs_realdata = pytest.mark.skipif(bench.missing_realdata() is not None,
                                    reason=f"{HOTPOT.parent.parent} absent: set REALDATA_DIR to the realdata folder")
needs_world = pytest.mark.skipif(importlib.util.find_spec("data.world") is None, reason="data/world.py not present")
NAMES = ["Varnholt", "Marrow", "Kestrel", "Oradric", "Taberg", "Elyckavik", "Quaeshoaven", "Piassouver"]


@pytest.fixture(autouse=True)
def tmp_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("RUNS_DIR", str(tmp_path / "runs"))
    return tmp_path / "runs"


@pytest.fixture
def numpy_bm25(monkeypatch):
    """Load BM25 indexes with bm25s's numpy backend whatever their size: the same scores, without
    numba compiling for ~5-10 s on a process's first search (the benchmark measures both)."""
    load = BM25Index.load

    def load_numpy(*args, **kwargs):
        index = load(*args, **kwargs)
        index.retriever.backend = "numpy"
        return index

    monkeypatch.setattr(BM25Index, "load", load_numpy)


@pytest.fixture
def small_store(tmp_path, numpy_bm25) -> Datastore:
    corpus = tmp_path / "corpus.jsonl"
    with open(corpus, "w") as handle:
        for i in range(80):
            name = f"{NAMES[i % 8]} {NAMES[(i // 8) % 8]}son"
            text = f"{name} is a person number {i}. {name} was born in {NAMES[(i + 3) % 8]} city in {1900 + i}."
            handle.write(json.dumps({"id": f"d{i}", "title": name, "text": text}) + "\n")
    build(DatastoreConfig(name="small", corpus=f"jsonl:{corpus}", retrievers=["bm25"]), root=tmp_path / "small",
          progress=False)
    return Datastore.load(tmp_path / "small")


def test_recall_at_k_hand_case():
    titles = ["A", "B", "C", "D"]
    assert bench.recall_at_k(titles, ["A", "D"], 1) == 0.5
    assert bench.recall_at_k(titles, ["A", "D"], 3) == 0.5
    assert bench.recall_at_k(titles, ["A", "D"], 4) == 1.0
    assert bench.recall_at_k(titles, ["X"], 10) == 0.0
    assert bench.recall_at_k(["A", "A"], ["A", "B"], 2) == 0.5  # a title found twice counts once
    recalls = bench.mean_recalls([["A", "B"], ["C"]], [["A", "C"], ["C"]], ks=(1, 2))
    assert recalls == {"recall@1": 0.75, "recall@2": 0.75}


def test_top_titles_keeps_one_passage_per_doc():
    meta = [("d1", "T1"), ("d1", "T1"), ("d2", "T2"), ("d3", "T3")]
    assert bench.top_titles([0, 1, 2, 3], meta, k=2) == ["T1", "T2"]


def test_fused_titles_follow_rrf():
    meta = [(f"d{i}", f"T{i}") for i in range(4)]
    sparse, dense = [[0, 1, 2]], [[2, 3]]
    # 2 is in both lists; 1 and 3 tie at rank 2 and the earlier list wins
    assert bench.fused_titles(sparse, dense, meta, 30, 60, (1.0, 1.0)) == [["T2", "T0", "T1", "T3"]]
    assert bench.fused_titles(sparse, dense, meta, 1, 60, (1.0, 1.0)) == [["T0", "T2"]]
    assert bench.fused_titles(sparse, dense, meta, 1, 60, (1.0, 2.0)) == [["T2", "T0"]]


def test_percentiles_are_ordered():
    result = percentiles([0.001 * i for i in range(1, 101)])
    assert result["p50_ms"] <= result["p99_ms"] <= 100.0
    assert percentiles([])["p50_ms"] is None


def test_world_queries_are_deterministic(small_store):
    queries = bench.world_queries(small_store, 30, seed=0)
    assert len(queries) == 30 and all(q.strip() for q in queries)
    assert queries == bench.world_queries(small_store, 30, seed=0)
    titles = {small_store.passages[i]["title"] for i in range(len(small_store.passages))}
    assert queries[0] in titles  # every third query is a plain title


def test_server_load_small(small_store):
    queries = bench.world_queries(small_store, 50)
    result = server_load(small_store, queries, clients=4, requests=200, deadline_s=60, mode="thread")
    assert result["errors"] == 0, result["error_samples"]
    assert result["requests"] == 200 and not result["hit_deadline"]
    assert 0 < result["p50_ms"] <= result["p99_ms"]
    assert result["rps"] > 0


def test_server_load_counts_errors_and_stops_at_deadline(small_store):
    # an empty query is a 400: every request is an error, none is lost, and the deadline ends the run
    result = server_load(small_store, ["   "], clients=2, requests=10**9, deadline_s=1.0, mode="thread")
    assert result["hit_deadline"] and result["seconds"] < 10
    assert result["requests"] > 0 and result["errors"] == result["requests"]
    assert "400" in result["error_samples"][0]


@pytest.mark.slow  # a fresh server process pays bm25s's numba compilation (~5-10 s) on its first search
def test_server_load_in_a_subprocess(small_store, tmp_path):
    queries = bench.world_queries(small_store, 50)
    result = server_load(small_store.folder, queries, clients=4, requests=200, deadline_s=60,
                         mode="process", log_path=tmp_path / "serve.log")
    assert result["errors"] == 0 and result["requests"] == 200
    assert 0 < result["p50_ms"] <= result["p99_ms"]
    assert result["server_rss_bytes"] > 0


def test_unknown_section_is_a_user_error(tmp_path):
    with pytest.raises(bench.UserError, match="unknown section"):
        bench.main(["--only", "qualty", "--out", str(tmp_path)])


@needs_realdata
def test_quality_bm25_small(tmp_path, numpy_bm25):
    bench.main(["--only", "quality", "--questions", "60", "--quality-retrievers", "bm25", "--out", str(tmp_path)])
    quality = json.loads((tmp_path / "retrieval.json").read_text())["sections"]["quality"]
    assert quality["docs"] == 11056 and quality["questions"] == 60
    ours, plain, text_only = quality["rows"]
    assert ours["recall@1"] <= ours["recall@5"] <= ours["recall@10"]
    assert ours["recall@10"] > 0.6 and plain["recall@10"] > 0.6 and text_only["recall@10"] > 0.5
    assert "reproduces" in plain["method"] and "fusion" not in quality  # no dense index, no hybrid
    assert "## Quality" in (tmp_path / "retrieval.md").read_text()


@needs_world
@pytest.mark.slow
def test_scale_and_server_sections_tiny(tmp_path):
    bench.main(["--only", "scale,server", "--scale-sizes", "300", "--scale-queries", "30", "--embed-passages", "0",
                "--server-world", "300", "--server-clients", "3", "--server-requests", "60", "--out", str(tmp_path)])
    results = json.loads((tmp_path / "retrieval.json").read_text())
    row = results["sections"]["scale"]["rows"][0]
    assert row["docs"] == 300 and row["peak_rss_mb"] > 10 and row["search"]["queries"] == 30
    assert row["cold"]["first_search_s"] >= 0 and row["backend"] in ("numpy", "numba")
    server = results["sections"]["server"]
    assert server["errors"] == 0 and server["requests"] == 60
    markdown = (tmp_path / "retrieval.md").read_text()
    assert "## Scale" in markdown and "## Server" in markdown and "## Quality" not in markdown


@needs_world
@pytest.mark.slow
def test_dense_scale_tiny(tmp_path):
    bench.main(["--only", "scale", "--scale-sizes", "600", "--scale-queries", "20", "--embed-passages", "40",
                "--ann-world", "600", "--ann-passages", "400", "--ann-queries", "30", "--out", str(tmp_path)])
    dense = json.loads((tmp_path / "retrieval.json").read_text())["sections"]["scale"]["dense"]
    assert dense["ann_passages"] == 400 and dense["passages_per_s"] > 0
    flat, *approx = dense["ann"]
    assert flat["recall@10"] == 1.0 and all(0 < a["recall@10"] <= 1 for a in approx)
    assert "sampled at random" in (tmp_path / "retrieval.md").read_text()
