"""Can the model read the answer off a finished search? Final turns on oracle trajectories.

    python -m eval.oracle_reading --model runs/smollm2-135m/sft/final \
        --trajectories runs/diagnostics/decision/oracle_varied_px0_test_sft_le2hops

Each context is the oracle's whole search for a held-out question (built with `python -m
data.trajectories --questions <test slice> ...`), cut just before the oracle's final turn, where
every fact the answer needs has been shown. The model then writes that turn greedily, twice:

- forced: the turn is made to open with `<answer>`, so only reading is judged (no stop decision).
  The oracle opens comparisons and yes/no final turns with a sentence stating both facts; forcing
  the tag skips the model's own sentence there, so read those rows by type.
- free: the model writes the whole turn as `agent.run` would; it may search again instead.

Forced EM estimates the agent's EM were its searches and its stop as good as the oracle's (on
bridge and one-hop questions; free can beat it on comparisons): the gap between it and the agent's
EM is search and stop, the gap between it and 1 is reading.
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path

from agent.backends import ANSWER_TAG
from common.errors import UserError, cli_main
from common.io import atomic_write_json
from eval.metrics import answer_shown, best_em, extract_answer, value_order
from eval.stats import mean_and_ci
from eval.stop_decisions import probe_parser
from sft.data import read_trajectories  # the same reader and checks as SFT

FORCED_TOKENS, FREE_TOKENS = 32, 256  # an answer; a turn, as agent.run's default budget


def final_context(messages: list[dict]) -> list[dict] | None:
    """The conversation before the oracle's final answer, if that answer follows a tool output."""
    last = messages[-1]
    if last["role"] != "assistant" or last.get("tool_calls") or extract_answer(last["content"]) is None:
        return None
    return messages[:-1] if len(messages) > 2 and messages[-2]["role"] == "tool" else None


def forced_prediction(continuation: str) -> str | None:
    """The answer written after a forced `<answer>`, read as the agent reads its answers; None if
    the tag is never closed."""
    return extract_answer(ANSWER_TAG + continuation)


def read(backend, tools, trajectories: list[dict]) -> tuple[list[dict], dict]:
    """One row per trajectory ending in an answer after a tool output; also what was skipped."""
    tokenizer = backend.tokenizer
    assert backend.answer_threshold is None, "the probe reads the model's own stop"
    points = [(row, final_context(row["messages"])) for row in trajectories]
    skipped = {"no_answer_after_a_tool_output": sum(prefix is None for _, prefix in points), "context_too_long": 0}
    points = [(row, prefix) for row, prefix in points if prefix is not None]
    if not points:
        return [], skipped
    prompts = [tokenizer(backend.render(prefix, tools), add_special_tokens=False).input_ids for _, prefix in points]
    forced = backend.complete_ids([ids + backend.answer_tag for ids in prompts], max_new_tokens=FORCED_TOKENS)
    free = backend.complete_ids(prompts, max_new_tokens=FREE_TOKENS)
    rows = []
    for (row, prefix), forced_turn, free_turn in zip(points, forced, free):
        if forced_turn.error or free_turn.error:
            skipped["context_too_long"] += 1
            continue
        prediction, free_answer = forced_prediction(forced_turn.text), extract_answer(free_turn.text)
        free_answers = free_answer is not None and "<tool_call>" not in free_turn.text
        rows.append({"id": row.get("id"), "hops": row.get("hops"), "type": row.get("type"),
                     "answers": row["answers"], "shown": answer_shown(row["answers"], prefix),
                     "oracle_text_first": not row["messages"][-1]["content"].startswith(ANSWER_TAG),
                     "forced": prediction, "forced_em": best_em(prediction, row["answers"]),
                     "free": free_turn.text, "free_answers": free_answers,
                     "free_em": best_em(free_answer, row["answers"]) if free_answers else 0.0})
    return rows, skipped


def _mean(values: list) -> float | None:
    return round(statistics.mean(values), 3) if values else None


def _cell(rows: list[dict]) -> dict:
    cell = {"n": len(rows)}
    for key in ("forced_em", "free_answers", "free_em"):
        cell[key], cell[f"{key}_ci"] = mean_and_ci(r[key] for r in rows)
    return cell


def summary(rows: list[dict]) -> dict:
    def key(row):
        return f"{row['type']}/{row['hops']}"

    return {**_cell(rows), "gold_shown": _mean([float(r["shown"]) for r in rows]),
            "by_hops": {f"{h}-hop": _cell([r for r in rows if r["hops"] == h])
                        for h in sorted({r["hops"] for r in rows}, key=value_order)},
            "by_type": {k: _cell([r for r in rows if key(r) == k]) for k in sorted({key(r) for r in rows})}}


def greedy_backend(args, max_new_tokens: int):
    """The checkpoint behind agent.run's transformers backend: greedy, no turn cache (probes)."""
    from agent.backends import Sampling, TransformersBackend
    from agent.chat import prepare_tokenizer
    from agent.models import load_model

    model, tokenizer = load_model(args.model, dtype=args.dtype)
    return TransformersBackend(model, prepare_tokenizer(tokenizer), Sampling(max_new_tokens=max_new_tokens),
                               batch_size=args.batch_size, reuse_cache=False)


def main(argv=None) -> None:
    parser = probe_parser("Greedy final turns of a model on oracle searches (reading alone).")
    parser.add_argument("--batch-size", type=int, default=8)
    args = parser.parse_args(argv)
    sets = {path: read_trajectories(path) for path in args.trajectories}
    from agent.tools import SearchTools, tool_functions

    backend, tools = greedy_backend(args, FREE_TOKENS), tool_functions(SearchTools(None))
    report = {}
    for path, trajectories in sets.items():
        rows, skipped = read(backend, tools, trajectories)
        if not rows:
            raise UserError(f"{path}: no trajectory ends in an answer after a tool output")
        report[path] = {"summary": {**summary(rows), "skipped": skipped}, "rows": rows}
        if skipped["context_too_long"]:
            print(f"{path}: {skipped['context_too_long']} contexts too long for {backend.sampling.max_context_tokens} "
                  "tokens were skipped")
        print(json.dumps({"trajectories": path, **{k: v for k, v in report[path]["summary"].items() if k != "by_type"}}))
    if args.out:
        atomic_write_json(Path(args.out), {"model": args.model, "sets": report})


if __name__ == "__main__":
    cli_main(main)
