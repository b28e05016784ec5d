"""Retrieval benchmark: quality on real data, speed against rank-bm25, scale, and the server under load.

    python -m datastore.bench                         # every section (`make bench-retrieval`)
    python -m datastore.bench --only quality,speed    # some sections; the others keep their last results

Writes runs/bench/retrieval.json (every number, the settings and the environment) and
runs/bench/retrieval.md (one table per section), both atomically. Sections:
- quality: recall@1/5/10 of the gold titles of HotpotQA dev-500 over its passages plus the 2Wiki
  distractors (11,056 docs), for bm25, dense, hybrid, a plain-bm25s reference, and RRF variants
  chosen on the first questions and reported on the held-out rest;
- speed: queries/s of each method through Datastore.search, bm25 batched, and rank-bm25;
- scale: synthetic worlds (data.world) of 10K/100K/1M docs: BM25 build time and peak memory (each
  build in a fresh process), query latency; MiniLM embedding rate; ANN recall against flat;
- server: `python -m datastore.serve` on the 10K world under 32 concurrent clients.
Sizes are flags (see --help), so tests run tiny versions. Datastores go to runs/datastore/bench-*,
worlds to runs/bench/world-<n>; both are reused when their manifest matches.
"""
from __future__ import annotations

import argparse
import gc
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from common.errors import UserError, cli_main
from common.io import atomic_write_json, atomic_write_text
from common.paths import REPO_ROOT, datastore_dir, realdata_dir, runs_dir
from datastore.bench_load import (KS, SECTIONS, build_in_subprocess, cold_start, render_markdown, server_load,
                                  time_each, torch_threads, world_queries)
from datastore.build import DatastoreConfig, build
from datastore.retriever import Datastore, rrf_fuse

REFERENCE = {"plain bm25s": {"recall@5": 0.718, "recall@10": 0.864},
             "dense all-MiniLM-L6-v2": {"recall@5": 0.714, "recall@10": 0.794}}
LABELS = {"bm25": "bm25 (Datastore: bm25s, stemmed, title + text)", "dense": "dense (Datastore: MiniLM, flat)",
          "hybrid": "hybrid (Datastore: RRF, rrf_k 60, depth 30)"}


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", flush=True)


# ---- recall and fusion -----------------------------------------------------------------------
def recall_at_k(titles: list[str], gold: list[str], k: int) -> float:
    """Fraction of the gold titles found among the titles of the top-k hits."""
    gold_set = set(gold)
    return len(gold_set & set(titles[:k])) / len(gold_set) if gold_set else 0.0


def mean_recalls(title_lists: list[list[str]], golds: list[list[str]], ks=KS) -> dict:
    return {f"recall@{k}": round(float(np.mean([recall_at_k(t, g, k) for t, g in zip(title_lists, golds)])), 4)
            for k in ks}


def top_titles(rows, meta: list[tuple[str, str]], k: int = 10) -> list[str]:
    """Titles of the first k distinct documents of a passage ranking (as Datastore._hits does)."""
    titles, seen = [], set()
    for row in rows:
        doc_id, title = meta[row]
        if doc_id not in seen:
            seen.add(doc_id)
            titles.append(title)
            if len(titles) == k:
                break
    return titles


def fused_titles(sparse, dense, meta, depth: int, rrf_k: int, weights: tuple[float, float]) -> list[list[str]]:
    """Hybrid top-10 titles per query from precomputed bm25 / dense rankings cut at `depth`."""
    out = []
    for a, b in zip(sparse, dense):
        fused = rrf_fuse([list(a[:depth]), list(b[:depth])], list(weights), rrf_k)
        out.append(top_titles([row for row, _ in fused], meta))
    return out


def fusion_variants() -> list[dict]:
    return [{"depth": d, "rrf_k": c, "w_bm25": 1.0, "w_dense": w}
            for d in (30, 100) for c in (2, 5, 10, 30, 60) for w in (0.6, 0.8, 1.0)]


# ---- section 1: quality on HotpotQA dev-500 --------------------------------------------------
def hotpot_paths() -> dict:
    root = realdata_dir()
    return {"questions": root / "hotpotqa_dev500" / "questions.jsonl",
            "hotpot": root / "hotpotqa_dev500" / "corpus.jsonl", "wiki2": root / "2wiki_distractors" / "corpus.json"}


def missing_realdata() -> str | None:
    missing = [str(p) for p in hotpot_paths().values() if not p.exists()]
    return f"real data missing ({', '.join(missing)}); set REALDATA_DIR to the realdata folder" if missing else None


def hotpot_store(retrievers: list[str]) -> Datastore:
    if missing_realdata():
        raise UserError(missing_realdata())
    paths = hotpot_paths()
    name = "bench-hotpot" if retrievers == ["bm25", "dense"] else f"bench-hotpot-{'-'.join(retrievers)}"
    spec = f"jsonl:{paths['hotpot']}+title_text:{paths['wiki2']}"
    build(DatastoreConfig(name=name, corpus=spec, retrievers=retrievers))
    return Datastore.load(name)


def read_questions(limit: int) -> list[dict]:
    with open(hotpot_paths()["questions"], encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()][:limit]


def search_titles(store: Datastore, queries: list[str], method: str, k: int = 10) -> list[list[str]]:
    out = []
    for start in range(0, len(queries), 256):
        out += [[hit.title for hit in hits] for hits in store.search_batch(queries[start:start + 256], k, method)]
    return out


def plain_bm25s_titles(queries: list[str], with_title: bool) -> list[list[str]]:
    """The reference setting: whole documents, bm25s.tokenize(stopwords='en'), no stemmer, BM25() defaults."""
    import bm25s

    from datastore.readers import read_corpus
    paths = hotpot_paths()
    docs = list(read_corpus(f"jsonl:{paths['hotpot']}+title_text:{paths['wiki2']}"))
    texts = [f"{d['title']} {d['text']}" if with_title else d["text"] for d in docs]
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(texts, stopwords="en", show_progress=False), show_progress=False)
    tokens = bm25s.tokenize(queries, stopwords="en", show_progress=False)
    rows, _ = retriever.retrieve(tokens, k=10, show_progress=False)
    return [[docs[int(r)]["title"] for r in row] for row in rows]


def section_quality(args) -> dict:
    retrievers = args.quality_retrievers.split(",")
    store = hotpot_store(retrievers)
    questions = read_questions(args.questions)
    queries, golds = [q["question"] for q in questions], [q["gold_titles"] for q in questions]
    meta = [(p["doc_id"], p["title"]) for p in (store.passages[i] for i in range(len(store.passages)))]
    methods = ["bm25", "dense", "hybrid"] if "dense" in retrievers else ["bm25"]
    rows, titles = [], {}
    for method in methods:
        log(f"quality: {method} over {len(queries)} questions")
        titles[method] = search_titles(store, queries, method)
        rows.append({"method": LABELS[method], **mean_recalls(titles[method], golds)})
    log("quality: plain bm25s reference")
    for with_title, label in ((True, "title + text (reproduces the reference)"), (False, "text only")):
        rows.append({"method": f"plain bm25s, docs, no stemmer, {label}",
                     **mean_recalls(plain_bm25s_titles(queries, with_title), golds)})
    result = {"questions": len(queries), "docs": store.manifest["counts"]["docs"],
              "passages": store.manifest["counts"]["passages"], "rows": rows, "reference_elsewhere": REFERENCE}
    if "dense" in retrievers:
        result["fusion"] = fusion_study(store, queries, golds, meta, titles["hybrid"], args.tune_questions)
    return result


def fusion_study(store, queries, golds, meta, datastore_hybrid, tune_n: int) -> dict:
    """RRF variants chosen on the first `tune_n` questions, reported on the held-out rest."""
    tune_n = min(tune_n, len(queries) // 2)
    sparse = [[int(r) for r in row if r >= 0] for row in store.index("bm25").search_batch(queries, 100)[0]]
    dense = [[int(r) for r in row if r >= 0] for row in store.index("dense").search_batch(queries, 100)[0]]
    variants = []
    for v in fusion_variants():
        titles = fused_titles(sparse, dense, meta, v["depth"], v["rrf_k"], (v["w_bm25"], v["w_dense"]))
        variants.append({**v, "all": mean_recalls(titles, golds), "tune": mean_recalls(titles[:tune_n], golds[:tune_n]),
                         "heldout": mean_recalls(titles[tune_n:], golds[tune_n:])})
        if (v["depth"], v["rrf_k"], v["w_dense"]) == (30, 60, 1.0):
            same = sum(a == b for a, b in zip(titles, datastore_hybrid))
            log(f"quality: default RRF variant gives Datastore hybrid's titles on {same}/{len(queries)} questions")
            variants[-1]["default"], variants[-1]["matches_datastore"] = True, same
    chosen = max(variants, key=lambda v: (v["tune"]["recall@5"], v["tune"]["recall@10"]))
    chosen["chosen"] = True
    return {"tune_questions": f"1-{tune_n}", "heldout_questions": f"{tune_n + 1}-{len(queries)}",
            "selection": "highest recall@5 on the tune questions (ties: recall@10)", "variants": variants}


# ---- section 2: speed ------------------------------------------------------------------------
def section_speed(args) -> dict:
    import rank_bm25
    import Stemmer
    import torch
    from bm25s.tokenization import Tokenizer

    store = hotpot_store(["bm25", "dense"])
    queries = [q["question"] for q in read_questions(args.speed_queries)]
    index, _ = store.index("bm25"), store.index("dense")
    backend, threads, rows = index.retriever.backend, torch.get_num_threads(), {}

    def timed(key: str, what: str, fn, items=queries, warmup: int = 5) -> None:
        log(f"speed: {what}, {len(items)} queries")
        rows[key] = {"what": what, **time_each(fn, items, warmup)}

    timed("bm25", f"bm25: Datastore.search, one query at a time, bm25s {backend}", lambda q: store.search(q, 10, "bm25"))
    for n_threads in (threads, 1):  # torch's default threads, then one: shared CPUs punish spinning threads
        with torch_threads(n_threads):
            for method in ("dense", "hybrid"):
                timed(f"{method}_{n_threads}t", f"{method}: Datastore.search, one query at a time, torch {n_threads} "
                      f"thread(s)", lambda q, m=method: store.search(q, 10, m))
    start = time.perf_counter()
    for i in range(0, len(queries), 256):
        store.search_batch(queries[i:i + 256], 10, "bm25")
    seconds = time.perf_counter() - start
    rows["bm25_batch"] = {"what": f"bm25: Datastore.search_batch, 256 per batch, bm25s {backend}",
                          "queries": len(queries), "seconds": round(seconds, 3), "qps": round(len(queries) / seconds, 1)}
    compile_s = None
    for kind in ("numpy", "numba"):  # the index alone, under each bm25s backend
        index.retriever.backend = kind
        t0 = time.perf_counter()
        index.search_batch(queries[:1], 10)
        compile_s = round(time.perf_counter() - t0, 2) if kind == "numba" else compile_s
        timed(f"index_{kind}", f"bm25: BM25Index.search_batch of one query (no snippets), bm25s {kind}",
              lambda q: index.search_batch([q], 10))
    timed("bm25_numba", "bm25: Datastore.search, one query at a time, bm25s numba", lambda q: store.search(q, 10, "bm25"))
    index.retriever.backend = backend
    config = store.manifest["config"]
    tokenizer = Tokenizer(stemmer=Stemmer.Stemmer(config["bm25_stemmer"]) if config["bm25_stemmer"] else None,
                          stopwords=config["bm25_stopwords"] or [])
    texts = [f"{p['title']}. {p['text']}" for p in (store.passages[i] for i in range(len(store.passages)))]
    t0 = time.perf_counter()
    okapi = rank_bm25.BM25Okapi(tokenizer.tokenize(texts, return_as="string", show_progress=False),
                                k1=config["bm25_k1"], b=config["bm25_b"])
    okapi_index_s = time.perf_counter() - t0

    def okapi_top10(query: str):
        tokens = tokenizer.tokenize([query], update_vocab=False, return_as="string", show_progress=False)[0]
        scores = okapi.get_scores(tokens)
        top = np.argpartition(-scores, 10)[:10]
        return top[np.argsort(-scores[top])]

    sub = queries[:args.rank_bm25_queries]
    timed("rank_bm25", "rank-bm25 BM25Okapi, same stemmed tokens, get_scores + argpartition top-10", okapi_top10, sub, 1)
    agree = np.mean([len(set(okapi_top10(q)) & set(index.search_batch([q], 10)[0][0])) / 10 for q in sub[:50]])
    plain = rank_bm25.BM25Okapi([t.lower().split() for t in texts])
    timed("rank_bm25_recipe", "rank-bm25 BM25Okapi as recipes use it: lower().split(), get_top_n(n=10)",
          lambda q: plain.get_top_n(q.lower().split(), texts, n=10), sub, 1)
    like, recipe = rows["rank_bm25"]["qps"], rows["rank_bm25_recipe"]["qps"]
    names = {"bm25": f"Datastore.search ({backend})", "bm25_batch": f"Datastore.search_batch ({backend})",
             "bm25_numba": "Datastore.search (numba)", "index_numpy": "bm25s numpy, index only",
             "index_numba": "bm25s numba, index only"}
    ratios = {f"{name} / rank-bm25 same tokens": round(rows[key]["qps"] / like, 1) for key, name in names.items()}
    ratios[f"Datastore.search ({backend}) / rank-bm25 recipe style"] = round(rows["bm25"]["qps"] / recipe, 1)
    return {"passages": len(texts), "rows": list(rows.values()), "ratios": ratios, "goal_ratio": 50,
            "datastore_backend": backend, "numba_first_call_s": compile_s, "rank_bm25_queries": len(sub),
            "rank_bm25_index_s": round(okapi_index_s, 2), "top10_overlap_bm25s_vs_rank_bm25": round(float(agree), 3)}


# ---- section 3: scale ------------------------------------------------------------------------
def ensure_world(n: int, out: Path) -> dict:
    """Generate (or reuse) runs/bench/world-<n>/corpus.jsonl with data.world; generation is not timed as indexing."""
    folder = out / f"world-{n}"
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "data.world", "--out", str(folder), "--docs", str(n), "--seed", "0"],
                   cwd=REPO_ROOT, check=True)
    if not (folder / "corpus.jsonl").exists():
        raise UserError(f"data.world wrote no {folder / 'corpus.jsonl'}")
    return {"folder": str(folder), "corpus": folder / "corpus.jsonl", "generate_s": round(time.perf_counter() - t0, 1)}


def section_scale(args) -> dict:
    out = Path(args.out)
    sizes = [int(s) for s in args.scale_sizes.split(",") if s]
    rows, names = [], {}
    for n in sizes:
        world = ensure_world(n, out)
        names[n] = f"bench-world-{n}"
        log(f"scale: building {names[n]} (bm25) in a fresh process")
        row = {"world_docs": n, "generate_s": world["generate_s"],
               **build_in_subprocess(names[n], world["corpus"])}
        store = Datastore.load(names[n])
        t0 = time.perf_counter()
        index = store.index("bm25")
        row["load_s"], row["backend"] = round(time.perf_counter() - t0, 2), index.retriever.backend
        queries = world_queries(store, args.scale_queries)
        row["cold"] = cold_start(names[n], queries[0])
        log(f"scale: {len(queries)} single queries on {row['passages']} passages")
        row["search"] = time_each(lambda q: store.search(q, 10, "bm25"), queries, warmup=20)
        row["index_only"] = time_each(lambda q: index.search_batch([q], 10), queries, warmup=20)
        rows.append(row)
        del store, index
        gc.collect()
    result = {"rows": rows,
              "queries": "a third each: a passage's title; title + 2 of its words; 4 words of 4 random passages",
              "goals": {"1M index under": "5 min", "p50 under": "20 ms"}}
    if args.embed_passages:
        result["dense"] = dense_scale(args, names, rows)
    return result


def dense_scale(args, names: dict, rows: list[dict]) -> dict:
    import faiss
    import torch

    from datastore.dense import DenseIndex, load_encoder, make_index
    ann_world = args.ann_world if args.ann_world in names else max(names)
    store = Datastore.load(names[ann_world])
    rng = np.random.default_rng(1)
    encoder = load_encoder("all-MiniLM-L6-v2")

    def texts(count: int) -> list[str]:
        picks = rng.choice(len(store.passages), size=min(count, len(store.passages)), replace=False)
        return [f"{p['title']}. {p['text']}" for p in (store.passages[int(r)] for r in np.sort(picks))]

    rates = {}
    for n_threads in dict.fromkeys((torch.get_num_threads(), 1)):  # the default, then one thread
        with torch_threads(n_threads):
            DenseIndex.embed(encoder, texts(64), show_progress=False)  # warm-up
            sample = texts(args.embed_passages)
            log(f"scale: embedding {len(sample)} world passages with all-MiniLM-L6-v2, torch {n_threads} thread(s)")
            t0 = time.perf_counter()
            DenseIndex.embed(encoder, sample)
            rates[n_threads] = round(len(sample) / (time.perf_counter() - t0), 1)
    best = max(rates, key=rates.get)
    rate = rates[best]
    implied = {str(r["passages"]): round(r["passages"] / rate / 3600, 2) for r in rows}
    result = {"embed_passages": len(sample), "passages_per_s_by_torch_threads": rates, "passages_per_s": rate,
              "torch_threads_used": best, "implied_hours_by_passages": implied}
    n = args.ann_passages or max(1000, min(20_000, int(rate * args.ann_budget_s) // 1000 * 1000))
    n = min(n, len(store.passages))
    log(f"scale: ANN study on {n} passages of {names[ann_world]} ({len(store.passages)} passages)")
    with torch_threads(best):
        t0 = time.perf_counter()
        vectors = DenseIndex.embed(encoder, texts(n))
        embed_s = time.perf_counter() - t0
        qv = DenseIndex.embed(encoder, world_queries(store, args.ann_queries, seed=2), show_progress=False)
    one = [qv[i:i + 1] for i in range(len(qv))]
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)  # one query at a time: OpenMP threads only spin against other work here
    flat = make_index(vectors, "flat")
    truth = flat.search(qv, 10)[1]
    ann = [{"index": "flat (exact)", "param": "-", "build_s": 0.0, "recall@10": 1.0,
            **time_each(lambda v: flat.search(v, 10), one)}]
    for kind, knob, values in (("ivf", "nprobe", (4, 16, 64)), ("hnsw", "efSearch", (16, 64, 128))):
        t0 = time.perf_counter()
        index = make_index(vectors, kind)
        build_s = round(time.perf_counter() - t0, 2)
        for value in values:
            if kind == "ivf":
                index.nprobe = value
            else:
                index.hnsw.efSearch = value
            found = index.search(qv, 10)[1]
            recall = float(np.mean([len(set(f) & set(t)) / 10 for f, t in zip(found, truth)]))
            desc = f"nlist={index.nlist}" if kind == "ivf" else "M=32"
            ann.append({"index": f"{kind} ({desc})", "param": f"{knob}={value}", "build_s": build_s,
                        "recall@10": round(recall, 4), **time_each(lambda v: index.search(v, 10), one)})
    faiss.omp_set_num_threads(threads)
    result.update({"ann_world_passages": len(store.passages), "ann_passages": n, "ann_embed_s": round(embed_s, 1),
                   "ann_queries": len(qv), "ann": ann, "faiss_threads": 1})
    return result


# ---- section 4: server -----------------------------------------------------------------------
def section_server(args) -> dict:
    name = f"bench-world-{args.server_world}"
    if not (datastore_dir(name) / "manifest.json").exists():
        world = ensure_world(args.server_world, Path(args.out))
        build(DatastoreConfig(name=name, corpus=f"jsonl:{world['corpus']}", retrievers=["bm25"]))
    store = Datastore.load(name)
    queries = world_queries(store, 1000, seed=3)
    log(f"server: {args.server_clients} clients, {args.server_requests} requests, deadline {args.server_deadline}s")
    result = server_load(datastore_dir(name), queries, args.server_clients, args.server_requests,
                         args.server_deadline, args.server_mode, Path(args.out) / "serve.log")
    return {"datastore": name, "passages": store.manifest["counts"]["passages"], **result}


# ---- report ----------------------------------------------------------------------------------
def environment() -> dict:
    versions = {}
    for package in ("bm25s", "faiss-cpu", "rank-bm25", "sentence-transformers", "torch", "numpy", "fastapi",
                    "uvicorn", "httpx"):
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    torch = sys.modules.get("torch")  # only if a section loaded it
    return {"cpu_count": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
            "torch_threads": torch.get_num_threads() if torch else None, "versions": versions, "date": datetime.now(timezone.utc).isoformat(timespec="seconds")}


def main(argv=None) -> None:
    args = parse_args(argv)
    only = [s for s in args.only.split(",") if s]
    unknown = set(only) - set(SECTIONS)
    if unknown:
        raise UserError(f"unknown section(s) {', '.join(sorted(unknown))}; use --only with {','.join(SECTIONS)}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "retrieval.json"
    results = {} if args.fresh or not path.exists() else json.loads(path.read_text())
    results.setdefault("sections", {})
    for name in (s for s in SECTIONS if s in only):
        log(f"section {name} ...")
        start, load_before = time.perf_counter(), os.getloadavg()[0]
        skip = missing_realdata() if name in ("quality", "speed") else None
        if skip:
            log(f"section {name} skipped: {skip}")
        section = {"skipped": skip} if skip else globals()[f"section_{name}"](args)
        section.update({"wall_s": round(time.perf_counter() - start, 1), "measured_at": environment()["date"],
                        "load_avg_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)]})
        results["sections"][name] = section
        results["environment"] = environment()
        atomic_write_json(path, results)
        atomic_write_text(out / "retrieval.md", render_markdown(results))
        log(f"section {name} done in {section['wall_s']}s")
    print(f"wrote {path} and {out / 'retrieval.md'}")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", default=",".join(SECTIONS), help=f"comma list of {','.join(SECTIONS)}")
    p.add_argument("--out", default=str(runs_dir() / "bench"), help="folder for retrieval.json/.md and worlds")
    p.add_argument("--fresh", action="store_true", help="drop the results of sections not run now")
    p.add_argument("--questions", type=int, default=500, help="quality: HotpotQA dev questions used")
    p.add_argument("--tune-questions", type=int, default=250, help="quality: first N questions pick the RRF variant")
    p.add_argument("--quality-retrievers", default="bm25,dense", help="quality: bm25,dense or bm25 (no hybrid)")
    p.add_argument("--speed-queries", type=int, default=500)
    p.add_argument("--rank-bm25-queries", type=int, default=100, help="speed: rank-bm25 is slow, so a subset")
    p.add_argument("--scale-sizes", default="10000,100000,1000000", help="scale: world sizes in docs")
    p.add_argument("--scale-queries", type=int, default=1000)
    p.add_argument("--embed-passages", type=int, default=2000,
                   help="scale: passages to time embedding on (0: skip dense)")
    p.add_argument("--ann-world", type=int, default=100000, help="scale: the world whose passages the ANN study embeds")
    p.add_argument("--ann-passages", type=int, default=0,
                   help="scale: passages embedded for ANN (0: 20K if it fits the budget)")
    p.add_argument("--ann-budget-s", type=float, default=480, help="scale: embedding time allowed for the ANN study")
    p.add_argument("--ann-queries", type=int, default=1000)
    p.add_argument("--server-world", type=int, default=10000, help="server: the world datastore served")
    p.add_argument("--server-clients", type=int, default=32)
    p.add_argument("--server-requests", type=int, default=10_000)
    p.add_argument("--server-deadline", type=float, default=120.0, help="server: clients stop after this many seconds")
    p.add_argument("--server-mode", choices=["process", "thread"], default="process")
    return p.parse_args(argv)


if __name__ == "__main__":
    cli_main(main)
