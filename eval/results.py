"""Collect evaluation results from runs/<run>/<stage>/eval/<benchmark>/ for tables and plots.

A result is one agent.run output folder (predictions.jsonl + metrics.json). Its predictions must
come from the benchmark's own question set: a folder whose question ids are not all in that set
is refused with a line saying so, never mixed in.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from eval.metrics import breakdown, summarize

STAGE_ORDER = ["closed-book", "naive-rag", "base", "sft", "sft_stop", "rl", "rl_stop", "rl_nolen"]
STAGE_LABELS = {"closed-book": "closed-book", "naive-rag": "naive RAG", "base": "base (tools)", "sft": "SFT",
                "sft_stop": "SFT, calibrated stop",
                "rl": "SFT+RL", "rl_stop": "SFT+RL, calibrated stop", "rl_nolen": "SFT+RL, no length penalty"}


@dataclass
class Result:
    run: str  # the model / recipe name: runs/<run>/
    stage: str
    benchmark: str
    records: list[dict] = field(repr=False)
    metrics: dict = field(repr=False)
    checkpoint: str | None = None  # digest of the weights evaluated (eval.run's fingerprint.json), where recorded

    @property
    def overall(self) -> dict:
        return self.metrics["overall"]


def stage_rank(stage: str) -> int:
    return STAGE_ORDER.index(stage) if stage in STAGE_ORDER else len(STAGE_ORDER)


def question_ids(path: Path, cache: dict) -> set[str] | None:
    if path not in cache:
        cache[path] = {json.loads(line)["id"] for line in path.read_text().splitlines() if line.strip()} \
            if path.is_file() else None
    return cache[path]


def outside_slice(records: list[dict], where: tuple[str, ...]) -> list[str]:
    """Ids of the records that a slice's filters (agent.run --where FIELD=V1,V2) leave out."""
    from agent.run import where_condition

    conditions = [where_condition(condition) for condition in where]
    return [r["id"] for r in records if not all(str(r.get(field)) in wanted for field, wanted in conditions)]


def load_result(folder: Path, benchmarks: dict, cache: dict, slices: dict | None = None) -> Result | str:
    """A Result, or a string saying why the folder is refused. `slices`: name -> the filters its
    predictions must all pass (eval.run.SLICES), so a slice's folder never holds other questions."""
    run, stage, benchmark = folder.parts[-4], folder.parts[-3], folder.parts[-1]
    metrics = json.loads((folder / "metrics.json").read_text())
    records = [json.loads(line) for line in (folder / "predictions.jsonl").read_text().splitlines() if line.strip()]
    questions = benchmarks.get(benchmark) or Path(metrics.get("run", {}).get("questions", ""))
    known = question_ids(Path(questions), cache)
    if known is None:
        return f"skipped {folder}: its question file {questions} is missing"
    foreign = [r["id"] for r in records if r["id"] not in known]
    foreign = foreign or outside_slice(records, (slices or {}).get(benchmark, ()))
    if foreign:
        return (f"refused {folder}: {len(foreign)} of its {len(records)} predictions are not questions of "
                f"{benchmark} ({questions}); rerun it with `make eval` (a slice: `make goals`)")
    from agent.run import score

    metrics = {**score(records), "run": metrics.get("run", {})}  # per-question em/f1 onto the records, fresh
    for record in records:  # the joint group the SFT goals are stated on (e.g. sft-pool phrasings, 2 hops)
        if record.get("pool") is not None and record.get("hops") is not None:
            record["pool_hops"] = f"{record['pool']} {record['hops']}-hop"
    fingerprint = folder / "fingerprint.json"
    checkpoint = json.loads(fingerprint.read_text()).get("model") if fingerprint.exists() else None
    return Result(run, stage, benchmark, records, metrics, checkpoint)


def selected(runs: Path, pattern: str, only: set[str] | None = None) -> list[Path]:
    """runs.glob(pattern), sorted, keeping the paths of the runs named in `only` (every run when None)."""
    return sorted(path for path in runs.glob(pattern) if only is None or path.relative_to(runs).parts[0] in only)


def collect(runs: Path, benchmarks: dict, log=print, only: set[str] | None = None,
            slices: dict | None = None) -> list[Result]:
    """Every finished result under runs/ (of the runs in `only`, if given), ordered by run, stage, benchmark."""
    results, cache = [], {}
    for metrics in selected(runs, "*/*/eval/*/metrics.json", only):
        folder = metrics.parent
        if not (folder / "predictions.jsonl").exists():
            log(f"skipped {folder}: metrics.json without predictions.jsonl")
            continue
        loaded = load_result(folder, benchmarks, cache, slices)
        if isinstance(loaded, str):
            log(loaded)
        else:
            results.append(loaded)
    bench_order = list(benchmarks)
    results.sort(key=lambda r: (r.run, stage_rank(r.stage), r.stage,
                                bench_order.index(r.benchmark) if r.benchmark in bench_order else 99, r.benchmark))
    return results


def grouped(results: list[Result]) -> dict[tuple[str, str], dict[str, Result]]:
    rows: dict = {}
    for result in results:
        rows.setdefault((result.run, result.stage), {})[result.benchmark] = result
    return dict(sorted(rows.items(), key=lambda item: (item[0][0], stage_rank(item[0][1]), item[0][1])))


def collect_benchmarks(runs: Path, log=print, only: set[str] | None = None) -> list[Result]:
    """`collect` with the recipe's named benchmarks and slices (eval.run.BENCHMARKS, SLICES) resolved under `runs`."""
    from eval.run import BENCHMARKS, SLICES, questions_benchmark

    files = {name: runs / BENCHMARKS[questions_benchmark(name)][0] for name in [*BENCHMARKS, *SLICES]}
    return collect(runs, files, log, only, {name: where for name, (_, where) in SLICES.items()})


def whole_benchmarks(names) -> list[str]:
    """The names that are whole benchmarks, not slices of one (eval.run.SLICES), in the order given: pooled
    with its benchmark, a slice would count its questions twice."""
    from eval.run import SLICES

    return [name for name in names if name not in SLICES]


def pooled(results: list[Result]) -> dict:
    """aggregate() over the episodes of several results (e.g. every synthetic benchmark of a stage)."""
    return summarize([r for result in results for r in result.records])


def pooled_breakdown(results: list[Result], key: str) -> dict:
    return breakdown([r for result in results for r in result.records], key)
