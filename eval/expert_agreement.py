"""How often an agent's turns do what the oracle would do from the same state, per benchmark.

    python -m eval.expert_agreement smollm2-135m/sft smollm2-135m-fix96/sft --out runs/diagnostics/agreement.json
    python -m eval.expert_agreement smollm2-135m/sft --benchmarks world_test_sft_le2hop world_test_heldout_2hop

For each named `run/stage`, the episodes `make eval` wrote for the synthetic benchmarks
(runs/<run>/<stage>/eval/world_test*/predictions.jsonl), chain questions only. Each assistant turn
gets data/corrections.py's verdict against the expert's state: `agree` (the right answer once every
fact is shown; a call whose output shows the missing fact or lists a page stating it) or what went
wrong instead: answered_early (an answer before the facts showed), misread (a wrong answer after
they did), searched_on, no_progress (a call that showed nothing new: a miss, a refused repeat, a
tool error), no_call. Reported per benchmark: the share of turns that agree (the mean over
episodes of each episode's share, with a 95% bootstrap interval over episodes), the share of
episodes with no wrong turn, and what each episode's first wrong turn was. EM says whether an
episode ended right; this says which move went wrong (stop 42: checkpoints whose EM differs by a
few points can agree with the expert on the same share of turns, one turn's kind of error traded
for another's).

A second table pools the benchmarks by phrasing pool (sft, rl, heldout; data/phrasings.py) over
multi-hop chain questions: the share of episodes whose tool outputs showed the first hop's fact, the
share that showed every fact (in the chain's order), and EM. A pool whose first fact is rarely shown
is one whose wording the agent does not turn into the right first search (stop 43).
"""
from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

from common.errors import UserError, cli_main
from common.io import atomic_write_json, iter_jsonl
from common.paths import runs_dir
from data.corrections import Expert, verdicts_of
from data.leakage import PAIRED
from data.trajectory_oracle import Drop, Oracle, WorldIndex
from eval.metrics import best_em
from eval.run import BENCHMARKS, SLICES, questions_benchmark
from eval.stats import mean_and_ci

SYNTHETIC = [name for name, (_, store) in BENCHMARKS.items() if store == "world"]
# the goal slices of those (make goals): their questions are their benchmark's, so judge them apart (--benchmarks)
SYNTHETIC_SLICES = {name: parent for name, (parent, _) in SLICES.items() if parent in SYNTHETIC}


def judged(expert: Expert, questions: dict, episodes: list[dict]) -> tuple[list[list[str]], list[dict]]:
    """(the verdict of each turn, per chain-question episode; the facts each multi-hop one showed)."""
    turns, found = [], []
    for episode in episodes:
        question = questions.get(episode["id"])
        if question is None:
            raise UserError(f"episode {episode['id']} is not a question of this benchmark's file; rerun make eval")
        if question.get("type") in PAIRED:
            continue
        turns.append(verdicts_of(expert, question, episode["messages"]))
        if len(question.get("relations") or []) < 2:
            continue  # the pool table is about multi-hop chains; a 1-hop episode's facts are not read again
        shown = facts_shown(expert, question, episode["messages"])
        if shown is not None:
            found.append({"pool": question.get("pool"), "hops": len(question["relations"]), "shown": shown,
                          "em": best_em(episode.get("prediction") or "", question["answers"])})
    return turns, found


def facts_shown(expert: Expert, question: dict, messages: list[dict]) -> int | None:
    """How many of the chain's facts, in order, the episode's tool outputs showed (None: no expert state)."""
    try:
        state = expert.progress(question, messages)
    except Drop:
        return None
    return len(question["relations"]) if state["hop"] is None else state["hop"]


def by_pool(found: list[dict]) -> dict:
    out = {}
    for pool in sorted({f["pool"] for f in found}, key=str):
        rows = [f for f in found if f["pool"] == pool]
        share = lambda test: round(sum(map(test, rows)) / len(rows), 3)
        out[str(pool)] = {"episodes": len(rows), "first_fact_shown": share(lambda f: f["shown"] >= 1),
                          "all_facts_shown": share(lambda f: f["shown"] == f["hops"]), "em": share(lambda f: f["em"])}
    return out


def summary(turns: list[list[str]]) -> dict:
    scored = [t for t in turns if t]
    share, interval = mean_and_ci([sum(v == "agree" for v in t) / len(t) for t in scored])
    firsts = Counter(next((v for v in t if v != "agree"), "none") for t in scored)
    return {"episodes": len(scored), "turns": sum(map(len, scored)), "turn_agreement": share, "ci": interval,
            "all_agree": round(firsts["none"] / len(scored), 3) if scored else None,
            "first_wrong": {k: round(n / len(scored), 3) for k, n in firsts.most_common()}}


def table(report: dict) -> str:
    # each stage's report holds its benchmarks and, beside them, the pool summary (pool_table's)
    report = {name: {b: s for b, s in sets.items() if b != "by_pool"} for name, sets in report.items()}
    kinds = sorted({k for sets in report.values() for s in sets.values() for k in s["first_wrong"]} - {"none"})
    lines = ["| run/stage | benchmark | episodes | turns agreeing [95% CI] | no wrong turn | "
             + " | ".join(f"first wrong: {k}" for k in kinds) + " |", "|---" * (5 + len(kinds)) + "|"]
    for name, sets in report.items():
        for bench, s in sets.items():
            ci = f" [{s['ci'][0]:.2f}, {s['ci'][1]:.2f}]" if s["ci"] else ""
            lines.append(f"| {name} | {bench} | {s['episodes']} | {s['turn_agreement']:.3f}{ci} | {s['all_agree']:.2f} | "
                         + " | ".join(f"{s['first_wrong'].get(k, 0):.2f}" for k in kinds) + " |")
    return "\n".join(lines)


def pool_table(report: dict) -> str:
    lines = ["| run/stage | pool | multi-hop chain episodes | first fact shown | all facts shown | EM |", "|---" * 6 + "|"]
    for name, sets in report.items():
        for pool, s in sets["by_pool"].items():
            lines.append(f"| {name} | {pool} | {s['episodes']} | {s['first_fact_shown']:.2f} | "
                         f"{s['all_facts_shown']:.2f} | {s['em']:.2f} |")
    return "\n".join(lines)


def main(argv=None) -> None:
    from agent.run import read_questions
    from datastore.retriever import Datastore

    parser = argparse.ArgumentParser(description="Turn-level agreement of an agent's episodes with the oracle.")
    parser.add_argument("stages", nargs="+", help="run/stage, e.g. smollm2-135m/sft")
    parser.add_argument("--world", default="runs/data/world")
    parser.add_argument("--datastore", default="world")
    parser.add_argument("--k", type=int, default=3, help="hits per search, as the episodes ran (eval's k)")
    parser.add_argument("--benchmarks", nargs="+", default=SYNTHETIC, choices=[*SYNTHETIC, *SYNTHETIC_SLICES],
                        help="which evaluated sets to judge: make eval's (the default) or make goals' slices")
    parser.add_argument("--out", default=None, help="also write the report as JSON")
    args = parser.parse_args(argv)
    both = [name for name in args.benchmarks if SYNTHETIC_SLICES.get(name) in args.benchmarks]
    if both:  # the pool table would count their shared episodes twice
        raise UserError(f"--benchmarks: judge {', '.join(both)} apart from {', '.join(SYNTHETIC_SLICES[b] for b in both)}, "
                        "whose questions it repeats (one call each)")
    expert = Expert(Oracle(WorldIndex(args.world), Datastore.load(args.datastore), args.k))
    report, questions_of = {}, {}  # each benchmark's questions read once, whatever the number of stages
    for name in args.stages:
        report[name], found = {}, []
        for bench in args.benchmarks:
            folder = runs_dir() / name / "eval" / bench
            if not (folder / "predictions.jsonl").is_file():
                continue
            if bench not in questions_of:
                source = BENCHMARKS[questions_benchmark(bench)][0]
                questions_of[bench] = {q["id"]: q for q in read_questions(str(runs_dir() / source))}
            questions = questions_of[bench]
            episodes = [row for _, row in iter_jsonl(folder / "predictions.jsonl", "one agent.run episode per line")]
            turns, shown = judged(expert, questions, episodes)
            found += shown
            scored = summary(turns)
            if scored["episodes"]:  # a set of comparisons and yes/no questions only has no chain to judge
                report[name][bench] = scored
        if not report[name]:
            raise UserError(f"no evaluated chain questions of {', '.join(args.benchmarks)} under {runs_dir() / name}/eval; "
                            "run make eval (make goals for the slices) first")
        report[name]["by_pool"] = by_pool(found)
    print(table(report))
    print()
    print(pool_table(report))
    if args.out:
        atomic_write_json(Path(args.out), report)


if __name__ == "__main__":
    cli_main(main)
