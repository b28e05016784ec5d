"""Helpers of `python -m datastore.bench`: timing, the server under load, the markdown report.

    python -m datastore.bench --only server --server-clients 32 --server-requests 10000

The server runs as its own process (`python -m datastore.serve`), so the clients' threads and
the server do not share one GIL; `mode="thread"` serves from a thread of this process instead.
Clients are threads, each with its own httpx connection, that take request numbers from one
shared counter until the total is reached or the deadline passes.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import httpx
import numpy as np

from common.errors import UserError
from common.io import read_manifest
from common.paths import REPO_ROOT, datastore_dir
from datastore.serve import free_port

KS = (1, 5, 10)
SECTIONS = ("quality", "speed", "scale", "server")
_WORD = re.compile(r"[A-Za-z]{4,}")


def percentiles(seconds: list[float]) -> dict:
    """p50 / p99 / mean in milliseconds."""
    if not seconds:
        return {"p50_ms": None, "p99_ms": None, "mean_ms": None}
    ms = np.asarray(seconds) * 1000.0
    return {"p50_ms": round(float(np.percentile(ms, 50)), 3), "p99_ms": round(float(np.percentile(ms, 99)), 3),
            "mean_ms": round(float(ms.mean()), 3)}


def time_each(fn: Callable[[object], object], queries: list, warmup: int = 5) -> dict:
    """Call fn once per query (after a few warm-up calls); queries/s and latency percentiles."""
    for query in queries[:warmup]:
        fn(query)
    latencies = []
    start = time.perf_counter()
    for query in queries:
        t0 = time.perf_counter()
        fn(query)
        latencies.append(time.perf_counter() - t0)
    total = time.perf_counter() - start
    return {"queries": len(queries), "seconds": round(total, 3), "qps": round(len(queries) / total, 1),
            **percentiles(latencies)}


def start_server(folder: Path, log_path: Path, timeout: float = 90.0) -> tuple[subprocess.Popen, str]:
    """Start `python -m datastore.serve` on a free loopback port; return it once /health answers."""
    port = free_port()
    log = open(log_path, "w")
    proc = subprocess.Popen([sys.executable, "-m", "datastore.serve", "--name", str(folder), "--port", str(port)],
                            stdout=log, stderr=subprocess.STDOUT, cwd=Path(__file__).resolve().parent.parent)
    log.close()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    stop_server(proc)
    raise RuntimeError(f"datastore server did not answer /health within {timeout:.0f}s; log:\n"
                       + Path(log_path).read_text()[-2000:])


def stop_server(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _rss_bytes(pid: int) -> int | None:
    try:
        import psutil
        return psutil.Process(pid).memory_info().rss
    except Exception:  # psutil missing or process gone: memory is a nice-to-have here
        return None


def hammer(url: str, queries: list[str], clients: int, requests: int, deadline_s: float,
           k: int = 10, method: str = "bm25") -> dict:
    """`clients` threads send POST /search until `requests` were sent or `deadline_s` passed."""
    lock = threading.Lock()
    state = {"next": 0, "errors": 0, "error_samples": []}
    latencies: list[list[float]] = [[] for _ in range(clients)]
    stop_at: list[float] = []  # set when every client is connected, just before they start
    ready = threading.Barrier(clients + 1, action=lambda: stop_at.append(time.perf_counter() + deadline_s))

    def client(slot: int) -> None:
        with httpx.Client(base_url=url, timeout=30.0) as http:
            try:
                http.get("/health")  # open the connection before the clock starts
            except httpx.HTTPError:
                pass  # the searches below will count the failure
            ready.wait(timeout=120)
            while True:
                with lock:
                    number = state["next"]
                    if number >= requests or time.perf_counter() > stop_at[0]:
                        return
                    state["next"] += 1
                body = {"query": queries[number % len(queries)], "k": k, "method": method}
                t0 = time.perf_counter()
                try:
                    response = http.post("/search", json=body)
                    ok = response.status_code == 200 and "hits" in response.json()
                    problem = None if ok else f"HTTP {response.status_code}: {response.text[:200]}"
                except Exception as exc:  # count every failure; the bench must show them, not die
                    problem = f"{type(exc).__name__}: {exc}"
                latencies[slot].append(time.perf_counter() - t0)
                if problem:
                    with lock:
                        state["errors"] += 1
                        if len(state["error_samples"]) < 5:
                            state["error_samples"].append(problem)

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for thread in threads:
        thread.start()
    ready.wait(timeout=120)
    start = stop_at[0] - deadline_s
    for thread in threads:
        thread.join(deadline_s + 60)
    elapsed = time.perf_counter() - start
    flat = [x for per in latencies for x in per]
    return {"clients": clients, "requests_wanted": requests, "requests": len(flat), "errors": state["errors"],
            "error_samples": state["error_samples"], "seconds": round(elapsed, 2), "deadline_s": deadline_s,
            "hit_deadline": len(flat) < requests, "rps": round(len(flat) / elapsed, 1), **percentiles(flat)}


def first_request_ms(url: str, query: str) -> float:
    """One search before the clients start (with bm25s's numba backend it pays the compilation)."""
    t0 = time.perf_counter()
    httpx.post(f"{url}/search", json={"query": query, "k": 10, "method": "bm25"}, timeout=120)
    return round((time.perf_counter() - t0) * 1000, 1)


def server_load(folder: Path, queries: list[str], clients: int = 32, requests: int = 10_000,
                deadline_s: float = 120.0, mode: str = "process", log_path: Path | None = None) -> dict:
    """Serve the datastore at `folder` (bm25) and measure it under `clients` concurrent clients.

    In thread mode `folder` may also be a loaded Datastore, served as it is."""
    if mode == "thread":
        from datastore.retriever import Datastore
        from datastore.serve import serve_in_thread
        store = folder if isinstance(folder, Datastore) else Datastore.load(folder)
        store.index("bm25")
        with serve_in_thread(store) as url:
            first = first_request_ms(url, queries[0])
            result = hammer(url, queries, clients, requests, deadline_s)
        return {"mode": mode, **result, "first_request_ms": first, "server_rss_bytes": None}
    if log_path is None:
        import tempfile
        log_path = Path(tempfile.mkdtemp(prefix="bench-serve-")) / "serve.log"
    proc, url = start_server(Path(folder), log_path)
    try:
        first = first_request_ms(url, queries[0])
        result = hammer(url, queries, clients, requests, deadline_s)
        rss = _rss_bytes(proc.pid)
    finally:
        stop_server(proc)
    return {"mode": mode, **result, "first_request_ms": first, "server_rss_bytes": rss}


# ---- scale helpers ---------------------------------------------------------------------------
@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    import torch
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def world_queries(store, n: int, seed: int = 0) -> list[str]:
    """A third each: a passage's title; its title plus 2 of its words; 4 words from 4 random passages."""
    rng = np.random.default_rng(seed)
    total = len(store.passages)

    def words_of(row: int) -> list[str]:
        return _WORD.findall(store.passages[row]["text"]) or ["entity"]

    queries = []
    for i in range(n):
        row = int(rng.integers(total))
        title = store.passages[row]["title"]
        if i % 3 == 0:
            queries.append(title)
        elif i % 3 == 1:
            queries.append(f"{title} {' '.join(rng.choice(words_of(row), 2))}")
        else:
            queries.append(" ".join(str(rng.choice(words_of(int(rng.integers(total))))) for _ in range(4)))
    return queries


# A child's ru_maxrss starts from its parent's RSS at fork (Linux keeps the high-water mark across
# exec), and this process holds GBs by now: so a small Python process starts the build and reports
# its child's peak.
PEAK_RSS = ("import resource, subprocess, sys; rc = subprocess.call(sys.argv[2:]); "
            "open(sys.argv[1], 'w').write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)); sys.exit(rc)")
# Load a datastore and search once in a fresh process: what a new RL worker or server pays.
COLD = ("import json, sys, time; t0 = time.perf_counter(); from datastore.retriever import Datastore; "
        "store = Datastore.load(sys.argv[1]); store.index('bm25'); t1 = time.perf_counter(); "
        "store.search(sys.argv[2], 10, 'bm25'); t2 = time.perf_counter(); "
        "print(json.dumps({'import_and_load_s': round(t1 - t0, 2), 'first_search_s': round(t2 - t1, 2)}))")


def build_in_subprocess(name: str, corpus: Path) -> dict:
    """BM25-only build in a fresh process: wall time and that process's own peak RSS."""
    import tempfile

    cmd = [sys.executable, "-m", "datastore.build", "--name", name, "--corpus", f"jsonl:{corpus}",
           "--retrievers", "bm25", "--force"]
    with tempfile.TemporaryDirectory() as scratch:
        rss_file = Path(scratch) / "maxrss"
        t0 = time.perf_counter()
        code = subprocess.call([sys.executable, "-c", PEAK_RSS, str(rss_file), *cmd], cwd=REPO_ROOT)
        wall = time.perf_counter() - t0
        if code:
            raise UserError(f"build of {name} failed (exit {code}): {' '.join(cmd)}")
        peak_kb = int(rss_file.read_text())
    manifest = read_manifest(datastore_dir(name))
    return {"docs": manifest["counts"]["docs"], "passages": manifest["counts"]["passages"],
            "build_wall_s": round(wall, 1), "build_inprocess_s": manifest["seconds"]["total"],
            "bm25_index_s": manifest["seconds"].get("bm25"), "peak_rss_mb": round(peak_kb / 1024, 1),
            "disk_mb": round(manifest["disk_bytes"] / 2**20, 1)}


def cold_start(name: str, query: str) -> dict:
    out = subprocess.run([sys.executable, "-c", COLD, str(datastore_dir(name)), query], cwd=REPO_ROOT,
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


# ---- the markdown report --------------------------------------------------------------------
def table(headers: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return "\n".join(lines + ["| " + " | ".join("-" if v is None else str(v) for v in row) + " |" for row in rows])


def md_quality(q: dict) -> list[str]:
    ref = "; ".join(f"{k} R@5 {v['recall@5']}, R@10 {v['recall@10']}" for k, v in q["reference_elsewhere"].items())
    parts = [f"Recall@k of the gold titles of the first {q['questions']} HotpotQA dev questions over {q['docs']:,} docs "
             f"({q['passages']:,} passages: dev-500 contexts + 2Wiki distractors); one k=10 search per question, titles of "
             f"distinct docs. Measured elsewhere on this corpus: {ref}.",
             table(["method", "R@1", "R@5", "R@10"], [[r["method"], *(r[f"recall@{k}"] for k in KS)] for r in q["rows"]])]
    if "fusion" in q:
        f = q["fusion"]
        default = next(v for v in f["variants"] if v.get("default"))
        chosen = next(v for v in f["variants"] if v.get("chosen"))
        parts.append(f"Hybrid variants: score = sum of w / (rrf_k + rank) over the bm25 and dense rankings cut at `depth` "
                     f"passages. Chosen by {f['selection']}, tune = questions {f['tune_questions']}, "
                     f"held-out = questions {f['heldout_questions']}. default = what Datastore.search does now "
                     f"(same top-10 titles as its hybrid on {default['matches_datastore']}/{q['questions']} questions"
                     f"{'' if default['matches_datastore'] == q['questions'] else '; the rest differ by near-ties'}). "
                     f"Chosen on tune: depth {chosen['depth']}, rrf_k {chosen['rrf_k']}, "
                     f"w_dense {chosen['w_dense']}: held-out R@5 {chosen['heldout']['recall@5']} vs default "
                     f"{default['heldout']['recall@5']}; all {q['questions']}: {chosen['all']['recall@5']} vs "
                     f"{default['all']['recall@5']} (goal R@5 >= 0.80).")
        rows = [[v["depth"], v["rrf_k"], v["w_bm25"], v["w_dense"], v["tune"]["recall@5"], v["tune"]["recall@10"],
                 v["heldout"]["recall@5"], v["heldout"]["recall@10"], v["all"]["recall@5"], v["all"]["recall@10"],
                 " ".join(n for n in ("default", "chosen") if v.get(n)) or ""] for v in f["variants"]]
        parts.append(table(["depth", "rrf_k", "w_bm25", "w_dense", "tune R@5", "tune R@10", "held-out R@5",
                            "held-out R@10", "all R@5", "all R@10", ""], rows))
    return parts


def md_speed(s: dict) -> list[str]:
    ratios = "; ".join(f"{k}: {v}x" for k, v in s["ratios"].items())
    return [f"Queries/s on HotpotQA dev questions over the same {s['passages']:,} passages, side by side in one "
            f"process, k=10 (Datastore.search also reads passages and makes snippets). rank-bm25 runs on the first "
            f"{s.get('rank_bm25_queries', '?')} queries only, since it is slow; with the same stemmed tokens its top-10 "
            f"overlaps bm25s's by {s['top10_overlap_bm25s_vs_rank_bm25']}. Datastore uses the bm25s "
            f"{s['datastore_backend']} backend at this size; numba's first call (compilation) took "
            f"{s['numba_first_call_s']} s. Ratios (goal >= {s['goal_ratio']}x): {ratios}.",
            table(["what", "queries", "q/s", "p50 ms", "p99 ms"],
                  [[r["what"], r["queries"], r["qps"], r.get("p50_ms"), r.get("p99_ms")] for r in s["rows"]])]


def md_scale(s: dict) -> list[str]:
    rows = []
    for r in s["rows"]:
        cold, search = r.get("cold", {}), r["search"]
        rows.append([r["world_docs"], r["passages"], r["build_wall_s"], r["build_inprocess_s"], r["bm25_index_s"],
                     r["peak_rss_mb"], r["disk_mb"], r["load_s"], r.get("backend"), cold.get("import_and_load_s"),
                     cold.get("first_search_s"), search["queries"], search["p50_ms"], search["p99_ms"], search["qps"],
                     r["index_only"]["p50_ms"]])
    parts = [f"BM25-only builds of synthetic worlds (data.world; generation not counted), each in a fresh process "
             f"(`python -m datastore.build --force`; peak RSS = ru_maxrss of that process, started from a small "
             f"parent). Then single queries in one process after loading and warming up, k=10 through "
             f"Datastore.search (index only: bm25s without snippets). Cold: a fresh process imports, loads the index "
             f"and searches once (numba compiles on that first search). Queries: {s['queries']}. "
             f"Goals: 1M indexed in under 5 min, p50 under 20 ms.",
             table(["docs", "passages", "build wall s", "build s (in-process)", "bm25 index s", "peak RSS MB",
                    "disk MB", "load s", "bm25s backend", "cold: import+load s", "cold: first search s", "queries",
                    "p50 ms", "p99 ms", "q/s", "p50 ms index only"], rows)]
    d = s.get("dense")
    if d:
        hours = ", ".join(f"{int(k):,} passages: {v} h" for k, v in d["implied_hours_by_passages"].items())
        rates = ", ".join(f"{v} passages/s with torch {k} thread(s)"
                          for k, v in d.get("passages_per_s_by_torch_threads", {}).items())
        parts.append(f"Dense: all-MiniLM-L6-v2 embeds world passages at {rates} on this CPU (each timed on "
                     f"{d['embed_passages']:,} passages); at the better rate, a flat dense index needs embedding for "
                     f"{hours}.")
        n, world = d["ann_passages"], d["ann_world_passages"]
        scope = (f"all {n:,} passages of the world" if n >= world else
                 f"**{n:,} passages sampled at random from the {world:,}-passage world, not all of them**: the issue "
                 f"asks for the 100K set, and embedding all of it would take {round(world / d['passages_per_s'] / 60)} "
                 f"min here")
        parts.append(f"Approximate indexes vs the exact flat top-10 on the same vectors, {d['ann_queries']} queries one "
                     f"at a time, faiss on {d.get('faiss_threads', '?')} thread. Measured on {scope} (these {n:,} took "
                     f"{d['ann_embed_s']} s to embed).")
        parts.append(table(["index", "search param", "build s", "recall@10", "p50 ms", "p99 ms", "q/s"],
                           [[a["index"], a["param"], a["build_s"], a["recall@10"], a["p50_ms"], a["p99_ms"], a["qps"]]
                            for a in d["ann"]]))
    return parts


def md_server(s: dict) -> list[str]:
    rss = round(s["server_rss_bytes"] / 2**20) if s.get("server_rss_bytes") else None
    return [f"`python -m datastore.serve` ({s['mode']} mode) on {s['datastore']} ({s['passages']:,} passages, bm25), "
            f"{s['clients']} concurrent client threads (httpx) on 127.0.0.1 sending POST /search (k=10) until "
            f"{s['requests_wanted']:,} requests or a {s['deadline_s']:.0f} s deadline, after one warm-up request (the 'cold' "
            f"column: the first search after the server started).",
            table(["clients", "requests", "errors", "seconds", "req/s", "p50 ms", "p99 ms", "server RSS MB",
                   "first request ms (cold)"], [[s["clients"], s["requests"], s["errors"], s["seconds"], s["rps"],
                                                s["p50_ms"], s["p99_ms"], rss, s["first_request_ms"]]])]


def render_markdown(results: dict) -> str:
    env = results["environment"]
    versions = ", ".join(f"{k} {v}" for k, v in env["versions"].items())
    parts = ["# Retrieval benchmark", f"`python -m datastore.bench` on {env['cpu_count']} CPUs ({env['platform']}, "
             f"Python {env['python']}); {versions}."]
    for name in SECTIONS:
        if name in results["sections"]:
            section = results["sections"][name]
            load = section.get("load_avg_1min", ["?", "?"])
            parts.append(f"## {name.capitalize()}\n\n_Section wall time {section['wall_s']} s, measured "
                         f"{section['measured_at']}; 1-min load average {load[0]} before, {load[1]} after "
                         f"(other work shares these {env['cpu_count']} CPUs)._")
            parts += [f"Skipped: {section['skipped']}."] if section.get("skipped") else globals()[f"md_{name}"](section)
    return "\n\n".join(parts) + "\n"
