"""Untrained baselines: the base model with the agent prompt and tools, and closed-book (no tools).

    python -m agent.baselines --model smollm2-135m --limit 100

Runs `agent.run` on synthetic dev, test_heldout, test_ood and HotpotQA dev-500 (over its own
datastore, with the 2Wiki distractors) and writes runs/<model>/{base,closed-book}/eval/<set>/
plus a summary table runs/<model>/base/baselines.md. Closed-book near 0 on the synthetic sets is
the proof that those questions need search. Finished sets are resumed, not redone.
"""
from __future__ import annotations

import argparse
import json

from common.errors import cli_main
from common.io import atomic_write_text
from common.paths import runs_dir
from eval.metrics import normalize_answer
from eval.stats import bootstrap_ci

from agent.run import parse_args as run_args
from agent.run import run

BENCHMARKS = {  # name -> (questions file under runs/, datastore)
    "world_dev": ("data/world/questions/dev.jsonl", "world"),
    "world_test_heldout": ("data/world/questions/test_heldout.jsonl", "world"),
    "world_test_ood": ("data/world/questions/test_ood.jsonl", "world"),
    "hotpotqa_dev500": ("data/hotpotqa_dev500/questions.jsonl", "hotpotqa_dev500"),
}


def lenient_hit(record: dict) -> bool:
    """An answer alias appears anywhere in the final reply (tags or not): how far format alone explains 0 EM."""
    final = normalize_answer(record["messages"][-1].get("content") or "")
    return any(normalize_answer(alias) and f" {normalize_answer(alias)} " in f" {final} " for alias in record["answers"])


def summary_row(name: str, mode: str, folder) -> str:
    metrics = json.loads((folder / "metrics.json").read_text())
    overall = metrics["overall"]
    records = [json.loads(line) for line in (folder / "predictions.jsonl").read_text().splitlines()]
    low, high = bootstrap_ci([r["em"] for r in records if "em" in r] or [0.0])
    lenient = sum(map(lenient_hit, records)) / len(records)
    valid = overall["valid_tool_call_rate"]
    return (f"| {name} | {mode} | {overall['n']} | {overall['em']:.3f} [{low:.3f}, {high:.3f}] | {overall['f1']:.3f} | "
            f"{overall['answer_rate']:.3f} | {'-' if valid is None else f'{valid:.3f}'} | {overall['tool_calls']:.2f} | "
            f"{overall['tokens_generated']:.0f} | {lenient:.3f} |")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--limit", type=int, default=100, help="questions per set (the first N)")
    parser.add_argument("--sets", default=",".join(BENCHMARKS))
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--summary-only", action="store_true", help="only tabulate the sets already run")
    args = parser.parse_args(argv)
    rows = []
    for name in args.sets.split(","):
        questions, datastore = BENCHMARKS[name]
        for mode in ("base", "closed-book"):
            out = runs_dir() / args.model / mode / "eval" / name
            argv_run = ["--model", args.model, "--questions", str(runs_dir() / questions), "--datastore", datastore,
                        "--out", str(out), "--limit", str(args.limit), "--max-new-tokens", str(args.max_new_tokens)]
            if not args.summary_only:
                run(run_args(argv_run + (["--closed-book"] if mode == "closed-book" else [])))
            if (out / "metrics.json").exists():
                rows.append(summary_row(name, mode, out))
            else:
                print(f"skipped {name} / {mode}: not run yet")
    table = "\n".join([
        f"Untrained {args.model}, greedy, first {args.limit} questions per set, at most {args.max_new_tokens} new "
        f"tokens per turn (`python -m agent.baselines --model {args.model} --limit {args.limit} "
        f"--max-new-tokens {args.max_new_tokens}`). EM with a 95% bootstrap interval.", "",
        "| set | mode | n | EM [95% CI] | F1 | answer rate | valid tool-call rate | tool calls | tokens | alias in reply |",
        "|---|---|---|---|---|---|---|---|---|---|", *rows, "",
        "`alias in reply`: a gold alias appears in the final reply with or without answer tags (lenient, not EM;"
        " comparison and yes/no answers are easy to hit by chance).", ""])
    atomic_write_text(runs_dir() / args.model / "base" / "baselines.md", table)
    print(table)


if __name__ == "__main__":
    cli_main(main)
