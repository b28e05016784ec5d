"""Paper tables from every evaluation result under runs/: markdown, CSV and LaTeX in runs/tables/.

    python -m eval.tables                 (make tables; after make eval)

1. main.*       rows run x stage (baselines included), columns benchmarks: EM [95% CI] / F1,
                plus tool calls and policy tokens per episode over all benchmarks of the row;
2. ablation.*   the RL run with and without the length penalty (SFT beside them);
3. paired.*     RL against SFT and the length penalty against none, on the same questions: the
                differences in EM and policy tokens with paired bootstrap intervals (issue 5's goals).
                RL is paired with the SFT checkpoint it started from (its train_summary.json), so a
                run with another RL seed or data needs no SFT evaluation of its own; `--pool RUN RUN`
                adds rows pooled over runs that differ only in the RL seed; `--versus NEW OLD` pairs a
                variant's runs with a base's, stage by stage (runs joined by `+`: each side's seeds are
                averaged per question, so two variant seeds can face one base seed);
4. by_hops.*, by_type.*, by_pool_hops.*  EM per group, per run, stage and benchmark;
5. retrieval.*  recall@k per retriever, from the datastore benchmark (make bench-retrieval);
6. timing.*     the wall time of each stage, from the stages' own logs.
Rows exist only for results that exist, so the same command makes the 8-GPU tables once those
runs are there. It also draws the plots (eval/plots.py) and writes runs/tables/README.md.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from common.errors import UserError, cli_main
from common.io import atomic_write_text
from common.paths import runs_dir
from eval.results import (STAGE_LABELS, Result, collect_benchmarks, grouped, pooled, pooled_breakdown, selected, stage_rank,
                          whole_benchmarks)
from eval.run import CALIBRATED_STAGES, SLICES


@dataclass
class Table:
    name: str
    title: str
    headers: list[str]
    rows: list[list[str]] = field(default_factory=list)
    note: str = ""

    def markdown(self) -> str:
        lines = [f"### {self.title}", "", "| " + " | ".join(self.headers) + " |", "|" + "---|" * len(self.headers)]
        lines += ["| " + " | ".join(row) + " |" for row in self.rows]
        return "\n".join(lines + (["", self.note] if self.note else []) + [""])

    def csv(self) -> str:
        buffer = io.StringIO()
        writer = csv.writer(buffer)
        writer.writerow(self.headers)
        writer.writerows(self.rows)
        return buffer.getvalue()

    def latex(self) -> str:
        def esc(text: str) -> str:
            for char in "\\&%$#_{}":
                text = text.replace(char, "\\" + char)
            return text.replace("±", "$\\pm$").replace("->", "$\\to$")
        body = [" & ".join(map(esc, self.headers)) + r" \\", r"\midrule"]
        body += [" & ".join(map(esc, row)) + r" \\" for row in self.rows]
        return "\n".join([r"\begin{table}[t]", r"\centering", rf"\caption{{{esc(self.title)}}}",
                          r"\begin{tabular}{" + "l" * 2 + "r" * (len(self.headers) - 2) + "}", r"\toprule",
                          *body, r"\bottomrule", r"\end{tabular}", r"\end{table}", ""])


def fmt(value, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def em_cell(overall: dict) -> str:
    ci = overall["em_ci"]
    low_high = f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else ""
    return f"{fmt(overall['em'])}{low_high} / {fmt(overall['f1'])}"


def main_table(results: list[Result]) -> Table:
    benchmarks = list(dict.fromkeys(r.benchmark for r in results))
    table = Table("main", "Main results: EM [95% bootstrap CI] / F1 per benchmark",
                  ["model", "stage", *benchmarks, "n per set", "answer rate", "valid calls", "evidence recall",
                   "answers after a miss", "tool calls", "policy tokens", "tokens per correct"])
    rows = grouped(results)
    common = whole_benchmarks(sorted(set.intersection(*(set(by_bench) for by_bench in rows.values()))))
    for (run, stage), by_bench in rows.items():
        total = pooled([by_bench[b] for b in common])
        cells = [em_cell(by_bench[b].overall) if b in by_bench else "-" for b in benchmarks]
        sizes = sorted({by_bench[b].overall["n"] for b in by_bench})
        table.rows.append([run, STAGE_LABELS.get(stage, stage), *cells, "/".join(map(str, sizes)),
                           fmt(total["answer_rate"], 2), fmt(total["valid_tool_call_rate"], 3),
                           fmt(total["evidence_recall"], 2), fmt(total["answer_after_unshown"], 2),
                           fmt(total["tool_calls"], 2), fmt(total["tokens_generated"], 0),
                           fmt(total["tokens_per_correct"], 0)])
    table.note = ("Greedy decoding. Answer rate (episodes ending in `<answer>`), valid calls (tool calls that parsed "
                  "and ran), evidence recall (gold documents among those retrieved or opened), answers after a miss (of "
                  "the tool outputs that showed no gold answer, the share the agent answered right after; yes/no "
                  "answers and answers the question names left out), tool calls, policy "
                  "tokens (generated by the model, tool outputs excluded) and tokens per correct answer pool the "
                  f"benchmarks every row has ({', '.join(common) or 'none'}).")
    return table


def ablation_table(results: list[Result]) -> Table:
    table = Table("ablation", "Length-penalty ablation (same seed, steps and data)",
                  ["model", "stage", "benchmark", "EM [95% CI] / F1", "policy tokens", "tool calls", "answer rate"])
    stages = grouped(results)
    with_rl = {run for run, stage in stages if stage in ("rl", "rl_nolen")}  # SFT alone ablates nothing
    rows = {key: by_bench for key, by_bench in stages.items()
            if key[1] in ("sft", "rl", "rl_nolen") and key[0] in with_rl}
    for (run, stage), by_bench in rows.items():
        # `all` pools only the benchmarks every compared stage of this run has, so the rows stay comparable
        common = whole_benchmarks(sorted(set.intersection(*(set(b) for (r, _), b in rows.items() if r == run))))
        for benchmark, result in [*by_bench.items(), ("all", None)]:
            overall = pooled([by_bench[b] for b in common]) if result is None else result.overall
            table.rows.append([run, STAGE_LABELS[stage], benchmark, em_cell(overall),
                               fmt(overall["tokens_generated"], 0), fmt(overall["tool_calls"], 2),
                               fmt(overall["answer_rate"])])
    table.note = "`all` pools the benchmarks that SFT and both RL runs of the model all have (not the goal slices of `make goals`)."
    return table


# (stage, against, label): the differences issue 5's goals are stated on
COMPARISONS = [("rl", "sft", "SFT+RL vs SFT"), ("rl", "rl_nolen", "length penalty vs none (both RL)"),
               ("rl_nolen", "sft", "SFT+RL without the length penalty vs SFT"),  # what RL's outcome reward adds alone
               ("sft_stop", "sft", "calibrated stop vs greedy (SFT)"), ("rl_stop", "rl", "calibrated stop vs greedy (RL)"),
               ("rl_stop", "sft_stop", "SFT+RL vs SFT, both with their calibrated stop"),
               ("rl_stop", "sft", "SFT+RL with its calibrated stop vs greedy SFT")]  # the agent a user would run, against issue 5's base
# benchmarks pooled as one row where both stages have them: where SFT is weakest (issue 5's +10 points)
POOLS = {"heldout + ood": ("world_test_heldout", "world_test_ood")}


def by_question(stage: dict[str, Result], benchmarks) -> dict[tuple, dict]:
    """(benchmark, id) -> the stage's record for that question."""
    records = {}
    for benchmark in benchmarks:
        mine = {r["id"]: r for r in stage[benchmark].records}
        if len(mine) != len(stage[benchmark].records):
            raise UserError(f"{benchmark}: a question id occurs twice in one stage's predictions; rerun `make eval`")
        records.update({(benchmark, i): r for i, r in mine.items()})
    return records


def paired_records(new: dict[str, Result], old: dict[str, Result], benchmarks) -> tuple[list[dict], list[dict]]:
    """The two stages' records for the questions both answered, in the same order (matched by id)."""
    after, before = by_question(new, benchmarks), by_question(old, benchmarks)
    both = [q for q in after if q in before]
    return [after[q] for q in both], [before[q] for q in both]


def paired_row(run: str, label: str, group: str, new: list[list[dict]], old: list[list[dict]]) -> list[str]:
    """One row from records per question and seed (new[q] against old[q]; the sides' seeds may differ in number)."""
    from eval.stats import mean_difference, paired_bootstrap, relative_change

    def table(records, key):  # em and tokens must be there; an episode without tool calls may lack the count
        return np.array([[float(r[key] if key != "tool_calls" else r.get(key) or 0) for r in seeds] for seeds in records])

    (new_em, old_em), (new_tokens, old_tokens), (new_calls, old_calls) = (
        (table(new, key), table(old, key)) for key in ("em", "tokens_generated", "tool_calls"))
    delta, (low, high) = paired_bootstrap(new_em, old_em, mean_difference)
    change, (c_low, c_high) = paired_bootstrap(new_tokens, old_tokens, relative_change)
    n_new, n_old = new_em.shape[1], old_em.shape[1]
    seeds = "" if n_new == n_old == 1 else f" x {n_new}" if n_new == n_old else f" x ({n_new} vs {n_old})"
    size = f"{len(new)}{seeds}"
    return [run, label, group, size, f"{old_em.mean():.3f} -> {new_em.mean():.3f}",
            f"{delta:+.3f} [{low:+.2f}, {high:+.2f}]", f"{old_tokens.mean():.0f} -> {new_tokens.mean():.0f}",
            f"{change:+.0%} [{c_low:+.0%}, {c_high:+.0%}]", f"{old_calls.mean():.2f} -> {new_calls.mean():.2f}"]


def rl_starts(runs: Path) -> dict[tuple[str, str], tuple[str, str, str | None]]:
    """(run, RL stage) -> (run, stage, weights digest) of the checkpoint it started from, as its train_summary.json
    names it (runs/<run>/<stage>/final; the digest since stop 46, else None): an RL run with another seed or data
    pairs with the SFT it started from."""
    starts = {}
    for summary in runs.glob("*/*/train_summary.json"):
        recorded = _read(summary)
        start = Path(recorded.get("start") or "")
        if len(start.parts) >= 3 and start.name == "final":
            starts[(summary.parent.parent.name, summary.parent.name)] = (start.parts[-3], start.parts[-2],
                                                                         recorded.get("start_weights"))
    return starts


def retrained_since(old: dict[str, Result], source: tuple | None) -> bool:
    """The SFT stage evaluated is not the checkpoint the RL run started from (`source`, from paired_sft):
    SFT was trained again after RL (same folder, other weights), and pairing the two would count the new
    SFT's change as RL's."""
    digest = source[2] if source else None
    return bool(digest) and any(result.checkpoint not in (None, digest) for result in old.values())


def comparison_groups(new: dict[str, Result], old: dict[str, Result]) -> list[tuple[str, list[str]]]:
    """Each benchmark both stages have, the pools of POOLS, and `all` where it adds a row (slices left out of
    the pools: their questions are their benchmark's)."""
    common = [b for b in new if b in old]
    whole = whole_benchmarks(common)
    pools = [(name, list(members)) for name, members in POOLS.items() if set(members) <= set(whole)]
    # `all` only where it adds a row: not for one benchmark, nor where it equals a pool
    every = [("all", whole)] if len(whole) > 1 and all(set(m) != set(whole) for _, m in pools) else []
    return [(b, [b]) for b in common] + pools + every


def paired_sft(starts: dict, run: str, stage: str, against: str) -> tuple[tuple[str, str], tuple | None]:
    """The (run, stage) an RL stage pairs with against an SFT stage, and the SFT checkpoint it started
    from where its train_summary.json names one (rl_stop decodes rl's); else the run's own stage and None."""
    source = starts.get((run, CALIBRATED_STAGES.get(stage, stage))) if against in ("sft", "sft_stop") else None
    if source and source[1] == "sft":
        return (source[0], against), source
    return (run, against), None


def pairs_for(rows: dict, starts: dict, run: str, stage: str, against: str):
    """(new stage, old stage) results, or None: SFT is the one RL started from where that is recorded."""
    old_key, source = paired_sft(starts, run, stage, against)
    new, old = rows.get((run, stage)), rows.get(old_key)
    return (new, old) if new and old and not retrained_since(old, source) else None


def unpaired_reason(rows: dict, starts: dict, run: str, stage: str) -> str:
    sft, source = paired_sft(starts, run, stage, "sft")
    if sft in rows and retrained_since(rows[sft], source):
        return (f"no paired row for {run}/{stage}: it started from other weights than the SFT evaluated at "
                f"runs/{'/'.join(sft)} (trained again since); rerun `make rl` (and its evaluation) from the new SFT")
    return (f"no paired row for {run}/{stage}: the SFT it started from ({'/'.join(sft)}) has no evaluation; "
            f"evaluate it with `python -m eval.run ... --run_name {sft[0]} --stages sft`")


def paired_table(results: list[Result], starts: dict | None = None, seed_pools: list[list[str]] = (),
                 versus: list[tuple[list[str], list[str]]] = (), log=print) -> Table:
    table = Table("paired", "RL against SFT, and the length penalty against none: paired differences",
                  ["model", "comparison", "benchmark", "n", "EM", "EM difference [95% CI]", "policy tokens",
                   "token change [95% CI]", "tool calls"])
    rows, starts = grouped(results), starts or {}
    for run, stage in rows:
        for wanted, against, label in COMPARISONS:
            pair = pairs_for(rows, starts, run, stage, against) if stage == wanted else None
            if stage == wanted and against == "sft" and not pair:
                log(unpaired_reason(rows, starts, run, stage))
            for group, members in comparison_groups(*pair) if pair else []:
                new, old = paired_records(*pair, members)
                if new:
                    table.rows.append(paired_row(run, label, group, [[r] for r in new], [[r] for r in old]))
    for pool in seed_pools:
        table.rows += seed_pool_rows(rows, starts, pool)
    for new_runs, old_runs in versus:
        table.rows += versus_rows(rows, new_runs, old_runs)
    table.note = ("Each row pairs the two stages on the questions both were run on (greedy episodes); the interval "
                  "resamples questions, the same ones for both stages. Token change: the relative change in mean "
                  "policy tokens per episode (tool outputs excluded). Rows of several runs (n = questions x runs) "
                  "pool RL seeds: a question's seeds are resampled together (the seeds themselves are not resampled, so "
                  "the interval leaves out training runs' seed-to-seed spread). A comparison \"<stage>: against RUNS\" pairs a variant's "
                  "runs with those base runs, the same stage, question by question: each side's seeds are averaged "
                  "(n = questions x seeds; the sides may differ in seeds). Issue 5's goals: RL - SFT >= +0.10 EM "
                  "on heldout + ood and >= -0.01 on world_test; the length penalty >= 20% fewer tokens at >= -0.02 EM.")
    return table


def seed_pool_rows(rows: dict, starts: dict, pool: list[str]) -> list[list[str]]:
    """The comparisons pooled over runs that differ only in their RL seed (`--pool`)."""
    out = []
    for wanted, against, label in COMPARISONS:
        pairs = [pairs_for(rows, starts, run, wanted, against) for run in pool]
        if all(pairs):
            out += pooled_rows(" + ".join(pool), label, [new for new, _ in pairs], [old for _, old in pairs])
    return out


def versus_rows(rows: dict, new_runs: list[str], old_runs: list[str]) -> list[list[str]]:
    """A variant's runs against a base's (`--versus`), for each stage all of them have; a question's
    seeds are averaged on each side and resampled together, so the sides may differ in seeds."""
    stages = sorted({stage for _, stage in rows if all((run, stage) in rows for run in new_runs + old_runs)}, key=stage_rank)
    out = []
    for stage in stages:
        news, olds = [rows[(run, stage)] for run in new_runs], [rows[(run, stage)] for run in old_runs]
        if same_models(news, olds):
            continue  # e.g. the base model or a shared SFT checkpoint: nothing the variant changed
        out += pooled_rows(" + ".join(new_runs), f"{STAGE_LABELS.get(stage, stage)}: against {' + '.join(old_runs)}",
                           news, olds)
    return out


# agent.run settings (metrics.json's "run") that change an episode of the same weights: a variant may be one of them
DECODING = ("answer_threshold", "hold_below", "release_repeats", "k", "max_turns", "max_new_tokens", "temperature")


def same_models(news: list[dict[str, Result]], olds: list[dict[str, Result]]) -> bool:
    """Whether two sides' evaluations ran the same models the same way: the same weights where eval.run
    recorded their digest (a folder moved or trained again keeps its path, not its weights), else the same
    path, and the same decoding settings (e.g. one calibrated stop with and one without --release-repeats)."""
    new, old = ({model_and_decoding(result) for stage in side for result in stage.values()} for side in (news, olds))
    return all(model is not None for model, *_ in new | old) and new == old


def model_and_decoding(result: Result) -> tuple:
    """(weights digest or path, then each DECODING setting; absent in older runs = off, as are False and 0)."""
    run = result.metrics.get("run", {})
    return (result.checkpoint or run.get("model"), *(run.get(key) or None for key in DECODING))


def pooled_rows(name: str, label: str, news: list[dict], olds: list[dict]) -> list[list[str]]:
    """Rows of new against old stage results (one per seed), on the benchmarks and questions all of them share."""
    out = []
    shared = set.intersection(*(set(stage) for stage in news + olds))
    for group, members in comparison_groups(news[0], olds[0]):
        if not set(members) <= shared:
            continue
        new_seeds, old_seeds = ([by_question(stage, members) for stage in side] for side in (news, olds))
        questions = sorted(set.intersection(*(set(seed) for seed in new_seeds + old_seeds)))
        if questions:
            out.append(paired_row(name, label, group, [[seed[q] for seed in new_seeds] for q in questions],
                                  [[seed[q] for seed in old_seeds] for q in questions]))
    return out


def breakdown_table(results: list[Result], key: str, title: str) -> Table:
    values = sorted({r.get(key) for result in results for r in result.records if r.get(key) is not None}, key=str)
    table = Table(f"by_{key}", title, ["model", "stage", "benchmark", *map(str, values)])
    for result in results:
        groups = pooled_breakdown([result], key)
        if not any(value in groups for value in values):
            continue
        table.rows.append([result.run, STAGE_LABELS.get(result.stage, result.stage), result.benchmark,
                           *(f"{groups[v]['em']:.2f} ({groups[v]['n']})" if v in groups else "-" for v in values)])
    table.note = "EM (number of questions) per group."
    return table


def retrieval_table(bench_json: Path) -> Table | None:
    if not bench_json.exists():
        return None
    quality = json.loads(bench_json.read_text()).get("sections", {}).get("quality")
    if not quality:
        return None
    rows = quality.get("rows") or []
    ks = sorted({key for row in rows for key in row if key.startswith("recall@")}, key=lambda key: int(key.split("@")[1]))
    table = Table("retrieval", f"Retrieval: HotpotQA dev, {quality.get('questions', '?')} questions over "
                  f"{quality.get('docs', '?')} documents", ["retriever", *ks])
    for row in rows:
        table.rows.append([row["method"], *(fmt(row.get(k)) for k in ks)])
    for name, scores in (quality.get("reference_elsewhere") or {}).items():
        table.rows.append([f"published: {name}", *(fmt(scores.get(k)) for k in ks)])
    table.note = "Recall@k: both gold documents of a question in the top k (make bench-retrieval)."
    return table


def _read(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


def timing_table(runs: Path, only: set[str] | None = None) -> Table:
    """Each stage's wall time as its own logs recorded it (process start-up and installs not included)."""
    table = Table("timing", "Wall time of each stage on this machine (from the stages' own logs)",
                  ["stage", "output", "seconds", "CPU share"])
    world = runs / "data" / "world"
    steps = [("datastore (world)", runs / "datastore/world/manifest.json", lambda d: d.get("seconds", {}).get("total")),
             ("questions", world / "questions/report.json", lambda d: d.get("seconds", {}).get("wall_s")),
             ("trajectories", world / "trajectories/sft/report.json", lambda d: d.get("seconds"))]
    for path in selected(runs, "*/*/train_summary.json", only):
        steps.append((f"train {path.parent.name}", path, lambda d: d.get("wall_seconds")))
    for stage in sorted(selected(runs, "*/*/eval", only), key=lambda p: (p.parent.parent.name, stage_rank(p.parent.name))):
        found = list(stage.glob("*/metrics.json"))
        for kind, in_slices in (("eval", False), ("goals", True)):
            timed = [_read(m).get("run", {}) for m in found if (m.parent.name in SLICES) == in_slices]
            if not timed:
                continue
            total = sum(run.get("seconds_this_run") or 0 for run in timed)
            shares = [run["cpu_share"] for run in timed if run.get("cpu_share") is not None]
            table.rows.append([f"{kind} {stage.parent.name}", str(stage.relative_to(runs)), f"{total:.0f}",
                               fmt(min(shares, default=None), 2)])
    for name, path, seconds in steps:
        data = _read(path) if path.exists() else {}
        if seconds(data) is not None:
            table.rows.append([name, str(path.relative_to(runs).parent), f"{seconds(data):.0f}",
                               fmt(data.get("cpu_share"), 2)])
    table.rows.sort(key=lambda row: ["datastore", "questions", "trajectories", "train", "eval", "goals"].index(row[0].split(" ")[0]))
    table.note = ("Eval seconds (goals: `make goals`' slices) count only the episodes run by the latest call (reused results cost nothing). CPU share: "
                  "the stage's CPU time over wall time x torch threads (for eval: while its episodes ran, lowest benchmark); well under ~0.9 on "
                  "a CPU run means another job shared the machine and the time is not the recipe's.")
    return table


def build_tables(runs: Path, log=print, results: list[Result] | None = None, seed_pools: list[list[str]] = (),
                 versus: list[list[str]] = (), only: set[str] | None = None) -> list[Table]:
    """Every table from the results under runs/, or only from the runs named in `only`."""
    results = collect_benchmarks(runs, log, only) if results is None else results
    if not results:
        chosen = f" of the runs {', '.join(sorted(only))}" if only is not None else ""
        raise UserError(f"no evaluation results{chosen} under {runs}/*/*/eval/: run `make eval` first")
    known = {result.run for result in results}
    for pool in seed_pools:
        if len(set(pool)) < len(pool) or len(pool) < 2 or set(pool) - known:
            raise UserError(f"--pool {' '.join(pool)}: name two or more different runs with results under {runs}/ "
                            f"(these have: {', '.join(sorted(known))})")
    versus = [check_versus(pair, known, runs) for pair in versus]
    tables = [main_table(results), ablation_table(results), paired_table(results, rl_starts(runs), seed_pools, versus, log),
              breakdown_table(results, "hops", "EM by number of hops"),
              breakdown_table(results, "type", "EM by question type"),
              breakdown_table(results, "pool_hops", "EM by phrasing pool and hops")]
    retrieval = retrieval_table(runs / "bench" / "retrieval.json")
    if retrieval is None:
        log("skipped the retrieval table: runs/bench/retrieval.json has no quality section (make bench-retrieval)")
    tables += [retrieval] if retrieval else []
    tables.append(timing_table(runs, only))
    return [table for table in tables if table.rows]


def check_versus(pair: list[str], known: set[str], runs: Path) -> tuple[list[str], list[str]]:
    """`--versus NEW OLD` -> (new runs, old runs), refused unless each run is named once and has results."""
    new_runs, old_runs = (side.split("+") for side in pair)
    named = new_runs + old_runs
    if len(set(named)) < len(named) or set(named) - known:
        raise UserError(f"--versus {' '.join(pair)}: name each run once (seeds joined by +), "
                        f"each with results under {runs}/ (these have: {', '.join(sorted(known))})")
    return new_runs, old_runs


def write_tables(tables: list[Table], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for table in tables:
        atomic_write_text(out / f"{table.name}.md", table.markdown())
        atomic_write_text(out / f"{table.name}.csv", table.csv())
        atomic_write_text(out / f"{table.name}.tex", table.latex())


BEGIN, END = "<!-- results:begin (written by python -m eval.tables --readme) -->", "<!-- results:end -->"


def update_readme(readme: Path, tables: list[Table], figures: list[Path]) -> None:
    """Replace the README's marked results section with these tables and plots (copied beside it)."""
    import shutil

    text = readme.read_text()
    if BEGIN not in text or END not in text:
        raise UserError(f"{readme} has no results markers; add the lines {BEGIN!r} and {END!r} where the results go")
    pictures = readme.parent / "docs" / "results"
    pictures.mkdir(parents=True, exist_ok=True)
    for figure in figures:
        shutil.copyfile(figure, pictures / figure.name)
    for stale in set(pictures.glob("*.png")) - {pictures / figure.name for figure in figures}:
        stale.unlink()  # a plot of a run no longer in runs/ would otherwise sit beside the tables that dropped it
    body = [table.markdown() for table in tables
            if table.name in ("main", "ablation", "paired", "by_hops", "by_type", "by_pool_hops", "retrieval", "timing")]
    body += [f"![{figure.stem}](docs/results/{figure.name})\n" for figure in figures]
    head, rest = text.split(BEGIN, 1)
    atomic_write_text(readme, head + BEGIN + "\n" + "\n".join(body) + "\n" + END + rest.split(END, 1)[1])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", default=str(runs_dir()), help="the runs folder to collect from")
    parser.add_argument("--out", help="default: <runs>/tables")
    parser.add_argument("--no-plots", action="store_true")
    parser.add_argument("--readme", help="also rewrite this README's results section and copy the plots to docs/results/")
    parser.add_argument("--pool", nargs="+", action="append", default=[], metavar="RUN",
                        help="runs that differ only in the RL seed (e.g. smollm2-135m smollm2-135m-rlseed1): the paired "
                             "table adds their comparisons pooled, resampling questions with all their seeds; repeatable")
    parser.add_argument("--only", nargs="+", metavar="RUN",
                        help="tables and plots from these runs (runs/<RUN>/) alone, e.g. the recipes' own runs without "
                             "experiments beside them (make tables passes TABLE_RUNS); default: every run")
    parser.add_argument("--versus", nargs=2, action="append", default=[], metavar=("NEW", "OLD"),
                        help="a variant's runs against a base's, stage by stage, each side's seeds averaged per "
                             "question (e.g. smollm2-135m-plan+smollm2-135m-plan0 smollm2-135m); repeatable")
    args = parser.parse_args(argv)
    runs = Path(args.runs)
    out = Path(args.out) if args.out else runs / "tables"
    only = set(args.only) if args.only else None
    results = collect_benchmarks(runs, only=only)
    if only is not None:
        print(f"runs in the tables: {', '.join(sorted({r.run for r in results})) or 'none'}"
              f" (no results: {', '.join(sorted(only - {r.run for r in results})) or 'none'})")
    tables = build_tables(runs, results=results, seed_pools=args.pool, versus=args.versus, only=only)
    write_tables(tables, out)
    figures = []
    if not args.no_plots:
        from eval.plots import draw_all
        figures = draw_all(runs, out, results, only)
    index = [f"# Results tables\n\nMade by `python -m eval.tables` (make tables) from runs/*/*/eval/.\n"]
    index += [table.markdown() for table in tables]
    index += [f"![{path.stem}]({path.name})\n" for path in figures]
    atomic_write_text(out / "README.md", "\n".join(index))
    print(f"{len(tables)} tables and {len(figures)} plots -> {out}")
    if args.readme:
        update_readme(Path(args.readme), tables, figures)
        print(f"updated the results section of {args.readme}")
    print(tables[0].markdown())


if __name__ == "__main__":
    cli_main(main)
