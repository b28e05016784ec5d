"""Does the model stop when the question is answered? Teacher-forced stop decisions on oracle trajectories.

    python -m eval.stop_decisions --model runs/smollm2-135m/sft/final \
        --trajectories runs/diagnostics/decision/oracle_varied_test_sft_le2hops

Build the trajectories for held-out questions with `python -m data.trajectories --questions
<test slice> ...` (the oracle never saw them). At every point right after a tool output the
conversation so far (the oracle's own, so every model is judged on the same contexts) is rendered
as the agent renders it, and the model's probability that its next turn opens with the `<answer>`
tag is read and set against what the oracle did there: answer, or call again. The varied oracle
sometimes reads on after the fact was shown (`--p-extra`), so some "goes on" labels are a coin
the model cannot call; build probe sets with `--p-extra 0` for cleaner labels. The summary's AUC is the
chance that a point where the oracle answers gets a higher P(answer) than one where it goes on:
0.5 means the decision ignores the question and what the tools showed, however often the model
answers. Unlike greedy episodes, this does not hinge on which of two nearly equal first tokens
wins, so it separates "has not learned when to stop" from "stops at the wrong rate".
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
from pathlib import Path

import numpy as np

from common.errors import UserError, cli_main
from common.io import atomic_write_json, config_hash
from eval.metrics import value_order
from sft.data import read_trajectories  # the same reader and checks as SFT

RECIPES = Path(__file__).resolve().parent.parent / "recipes"
MAKE_DEFAULT_MODEL = "smollm2-135m"  # the Makefile's MODEL
MAKE_DEFAULT_DTYPE = "float32"  # the Makefile's DTYPE (make stop-fit), as eval.yaml's


def decision_points(messages: list[dict]):
    """(prefix, oracle_answers, k) for each assistant turn right after a tool output, the k-th such
    decision. oracle_answers is None for a final turn that opens with text before `<answer>` (its
    first token is not the decision; counted, not probed). The oracle's deliberate repeats
    ("train": false) are context, not decisions: the turn after their refusal is the real one."""
    k = 0
    for i in range(1, len(messages)):
        turn = messages[i]
        if turn["role"] != "assistant" or messages[i - 1]["role"] != "tool" or turn.get("train") is False:
            continue
        k += 1
        answers = not turn.get("tool_calls")
        yield messages[:i], (None if answers and not turn["content"].startswith("<answer>") else answers), k


def check_turn_starts_at_prompt(tokenizer, tools, prefix: list[dict]) -> None:
    prompt = tokenizer.apply_chat_template(prefix, tools=tools, tokenize=False, add_generation_prompt=True)
    full = tokenizer.apply_chat_template(prefix + [{"role": "assistant", "content": "<answer>x</answer>"}], tools=tools,
                                         tokenize=False)
    if not full.startswith(prompt + "<answer>"):
        raise UserError("this chat template puts text between the generation prompt and the turn (e.g. a think "
                        "block), so P(<answer>) at the prompt is not the stop decision; probe a ChatML-style model")


def probe(model, tokenizer, tools, trajectories: list[dict]) -> tuple[list[dict], int]:
    """Per decision point: P(the turn opens with the whole `<answer>` tag; its first token alone is
    shared with `<tool_call>` in SmolLM2's vocabulary) and whether greedy decoding writes it.
    Returns the rows and the number of points skipped (text before the answer)."""
    from agent.backends import ANSWER_TAG, tag_probability

    tag = tokenizer(ANSWER_TAG, add_special_tokens=False).input_ids
    rows, skipped = [], 0
    for t, row in enumerate(trajectories):
        for prefix, answers, k in decision_points(row["messages"]):
            if answers is None:
                skipped += 1
                continue
            if not rows:
                check_turn_starts_at_prompt(tokenizer, tools, prefix)
            text = tokenizer.apply_chat_template(prefix, tools=tools, tokenize=False, add_generation_prompt=True)
            p_answer, greedy_answers = tag_probability(model, tokenizer(text, add_special_tokens=False).input_ids, tag)
            rows.append({"trajectory": t, "id": row.get("id"), "hops": row.get("hops"), "type": row.get("type"), "k": k,
                         "oracle_answers": answers, "p_answer": p_answer, "greedy_answers": greedy_answers})
    return rows, skipped


def auc(positives: list[float], negatives: list[float]) -> float | None:
    """P(a random positive scores above a random negative), ties counting half (Mann-Whitney)."""
    if not positives or not negatives:
        return None
    pos, neg = np.asarray(positives)[:, None], np.asarray(negatives)[None, :]
    return float((pos > neg).mean() + 0.5 * (pos == neg).mean())


def auc_ci(rows: list[dict], n_boot: int = 1000, seed: int = 0) -> tuple[float, float] | None:
    """95% interval of the AUC, resampling whole trajectories (their decisions are not independent)."""
    by_traj: dict[int, list[dict]] = {}
    for row in rows:
        by_traj.setdefault(row["trajectory"], []).append(row)
    groups = list(by_traj.values())
    rng = np.random.default_rng(seed)
    values = []
    for _ in range(n_boot):
        sample = [r for i in rng.integers(0, len(groups), len(groups)) for r in groups[i]]
        value = auc([r["p_answer"] for r in sample if r["oracle_answers"]],
                    [r["p_answer"] for r in sample if not r["oracle_answers"]])
        if value is not None:
            values.append(value)
    return (float(np.quantile(values, 0.025)), float(np.quantile(values, 0.975))) if values else None


def _cell(rows: list[dict]) -> dict:
    return {"n": len(rows), "mean_p_answer": round(statistics.mean(r["p_answer"] for r in rows), 3) if rows else None,
            "greedy_answers": sum(r["greedy_answers"] for r in rows)}


def summary(rows: list[dict]) -> dict:
    answer = [r for r in rows if r["oracle_answers"]]
    go_on = [r for r in rows if not r["oracle_answers"]]
    value, interval = auc([r["p_answer"] for r in answer], [r["p_answer"] for r in go_on]), auc_ci(rows)
    agree = [r["greedy_answers"] == r["oracle_answers"] for r in rows]
    return {
        "decisions": len(rows), "auc": None if value is None else round(value, 3),
        "auc_ci": None if interval is None else [round(x, 3) for x in interval],
        "greedy_agreement": round(statistics.mean(agree), 3) if agree else None,
        "oracle_answers": _cell(answer), "oracle_goes_on": _cell(go_on),
        "by_hops": {f"{h}-hop, oracle {'answers' if a else 'goes on'}": _cell([r for r in rows if r["hops"] == h and r["oracle_answers"] == a])
                    for h in sorted({r["hops"] for r in rows}, key=value_order) for a in (True, False)},
        "by_output": {f"after output {k}, oracle {'answers' if a else 'goes on'}": _cell([r for r in rows if r["k"] == k and r["oracle_answers"] == a])
                      for k in sorted({r["k"] for r in rows}) for a in (True, False)},
    }


def fit_threshold(rows: list[dict], two_sided: bool = False) -> dict:
    """The `agent.run --answer-threshold` that best reproduces the oracle's stops on these rows: the
    agent answers where P(answer) >= threshold or greedy decoding answers anyway; `two_sided`
    (`--hold-below`): exactly where P(answer) >= threshold. One-sided, None when no threshold beats
    greedy decoding alone. Ties go to the higher threshold (answering a bridge after its first hop
    is fatal; going on costs a call)."""
    def answers(r: dict, threshold: float | None) -> bool:
        if threshold is None:
            return r["greedy_answers"]
        above = r["p_answer"] >= threshold
        return above if two_sided else above or r["greedy_answers"]

    def agreement(threshold: float | None) -> float:
        return statistics.mean(answers(r, threshold) == r["oracle_answers"] for r in rows)

    candidates = ([] if two_sided else [None]) + sorted({r["p_answer"] for r in rows}, reverse=True)
    best = max(candidates, key=agreement)  # max keeps the first of ties
    return {"threshold": best, "two_sided": two_sided, "agreement": round(agreement(best), 3),
            "greedy_agreement": round(agreement(None), 3), "decisions": len(rows)}


def probe_parser(description: str) -> argparse.ArgumentParser:
    """The arguments every probe on oracle trajectories takes (this one, openers, oracle_reading, next_calls)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--model", required=True, help="checkpoint folder or model name")
    parser.add_argument("--trajectories", required=True, nargs="+", help="oracle trajectories (folder or .jsonl), one summary each")
    parser.add_argument("--out", help="write the summaries (and the per-point rows, where the probe keeps them) to this JSON file")
    parser.add_argument("--dtype", default="fast", help="fast: bfloat16 where the CPU has bf16 units, else float32")
    return parser


def teacher_forcing_setup(args) -> tuple:
    """(model in eval mode, tokenizer with the agent's template, the agent's tool schema) for the
    teacher-forced probes (this one, eval.openers)."""
    from agent.chat import prepare_tokenizer
    from agent.models import load_model
    from agent.tools import SearchTools, tool_functions

    model, tokenizer = load_model(args.model, dtype=args.dtype)
    return model.eval(), prepare_tokenizer(tokenizer), tool_functions(SearchTools(None))


def main(argv=None) -> None:
    parser = probe_parser("Teacher-forced stop decisions of a model on oracle trajectories.")
    parser.add_argument("--fit-threshold", action="store_true",
                        help="fit agent.run's --answer-threshold on all the sets' decisions, alone (one-sided) and "
                             "with --hold-below (two-sided); use dev questions, never test")
    args = parser.parse_args(argv)
    from agent.models import checkpoint_digest
    from common.hardware import resolved_dtype

    sets = {path: read_trajectories(path) for path in args.trajectories}
    identity = {"checkpoint": checkpoint_digest(args.model), "dtype": resolved_dtype(args.dtype), "trajectories": {
        path: config_hash(rows) for path, rows in sets.items()}}
    if args.fit_threshold and args.out and stored_identity(Path(args.out)) == identity:
        print(f"{args.out} is up to date (same checkpoint, dtype and probe sets); nothing to do")
        return
    model, tokenizer, tools = teacher_forcing_setup(args)
    report = {}
    for path, trajectories in sets.items():
        rows, skipped = probe(model, tokenizer, tools, trajectories)
        if not rows:
            raise UserError(f"{path}: no decision after a tool output in these trajectories")
        report[path] = {"summary": {**summary(rows), "skipped_text_before_answer": skipped}, "rows": rows}
        print(json.dumps({"trajectories": path, **report[path]["summary"]}))
    rows = [r for entry in report.values() for r in entry["rows"]]
    fitted = {"one_sided": fit_threshold(rows), "two_sided": fit_threshold(rows, two_sided=True)} if args.fit_threshold else None
    if fitted:
        print(json.dumps({"fitted": fitted}))
    if args.out:
        atomic_write_json(Path(args.out), {"model": args.model, **identity, "sets": report, "fitted": fitted})


def stored_identity(path: Path) -> dict | None:
    """The checkpoint digest, dtype and probe sets a stored result was made from (None if there is none)."""
    if not path.is_file():
        return None
    stored = json.loads(path.read_text())
    keys = ("checkpoint", "dtype", "trajectories")
    return {key: stored.get(key) for key in keys} if stored.get("fitted") else None


def stop_fit_command(path: Path, dtype: str | None = None) -> str:
    """What writes the fit at `path` (in `dtype`): `make stop-fit` for runs/<model>[-rlseed<N>]/<stage>/ of a
    recipe folder (make rl RL_SEED=N writes the -rlseed<N> runs), the module itself for any other run folder."""
    run, stage = path.parent.parent.name, path.parent.name
    seed = re.fullmatch(r"(.+)-rlseed(\d+)", run)
    model = seed.group(1) if seed else run
    if not (RECIPES / model).is_dir():
        return (f"python -m eval.stop_decisions --model {path.parent / 'final'} --trajectories <dev oracle searches> "
                f"--fit-threshold --dtype {dtype or MAKE_DEFAULT_DTYPE} --out {path}")
    return " ".join(["make stop-fit", *([f"STAGE={stage}"] if stage != "sft" else []),
                     *([f"RL_SEED={seed.group(2)}"] if seed else []),
                     *([f"MODEL={model}"] if model != MAKE_DEFAULT_MODEL else []),
                     *([f"DTYPE={dtype}"] if dtype not in (None, MAKE_DEFAULT_DTYPE) else [])])


def fitted_stop(path: Path, checkpoint: str, dtype: str | None = None) -> float | str:
    """The two-sided threshold fitted for this checkpoint (`make stop-fit`), or why there is none. With
    `dtype` (the one the episodes generate in), a fit made in another dtype is refused: bf16 and float32
    give the same checkpoint other P(answer)s, and so other thresholds (stop 63: 0.433 and 0.464)."""
    from agent.models import checkpoint_digest

    target = stop_fit_command(path, dtype)
    if not path.is_file():
        return f"no stop fit at {path} ({target})"
    stored = json.loads(path.read_text())
    if stored.get("checkpoint") != checkpoint_digest(checkpoint):
        return f"{path} was fitted on another checkpoint than {checkpoint} (rerun {target})"
    if dtype is not None and stored.get("dtype") != dtype:
        fitted_in = stored.get("dtype") or "an unrecorded dtype (fits before stop 64 used bf16 where the CPU has it)"
        return f"{path} was fitted in {fitted_in}, these episodes generate in {dtype} (rerun {target})"
    threshold = ((stored.get("fitted") or {}).get("two_sided") or {}).get("threshold")
    return threshold if threshold is not None else f"{path} holds no two-sided fit (rerun {target})"


if __name__ == "__main__":
    cli_main(main)
