"""Episodes per minute with batching, against the same episodes run one at a time, in one run.

    python -m agent.throughput --model smollm2-135m --n 32 --batch-size 16

Both passes load the model once, use greedy decoding and the same questions; the batched pass
runs every episode in lockstep (one batched generate per round), the sequential pass runs each
episode alone. Writes runs/bench/agent_throughput.{json,md}.
"""
from __future__ import annotations

import argparse
import time

from common.errors import cli_main
from common.io import atomic_write_json, atomic_write_text
from common.paths import runs_dir

from agent.backends import Sampling, TransformersBackend
from agent.chat import prepare_tokenizer
from agent.episode import EpisodeConfig, run_episodes
from agent.models import load_model
from agent.run import read_questions
from agent.tools import SearchTools


def timed(questions, backend, make_tools, config, one_at_a_time: bool) -> tuple[float, list]:
    start = time.perf_counter()
    if one_at_a_time:
        episodes = [run_episodes([q], backend, make_tools, config, progress=False)[0] for q in questions]
    else:
        episodes = run_episodes(questions, backend, make_tools, config, progress=False)
    return time.perf_counter() - start, episodes


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="Agent episode throughput: batched vs one at a time.")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--questions", default=str(runs_dir() / "data/world/questions/dev.jsonl"))
    parser.add_argument("--datastore", default="world")
    parser.add_argument("--n", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--max-turns", type=int, default=4)
    args = parser.parse_args(argv)
    from datastore.retriever import Datastore

    questions = read_questions(args.questions, args.n)
    store = Datastore.load(args.datastore)
    model, tokenizer = load_model(args.model)
    backend = TransformersBackend(model, prepare_tokenizer(tokenizer), Sampling(max_new_tokens=args.max_new_tokens),
                                  batch_size=args.batch_size)
    config = EpisodeConfig(max_turns=args.max_turns)
    make_tools = lambda: SearchTools(store)  # noqa: E731
    timed(questions[:2], backend, make_tools, config, one_at_a_time=False)  # warm-up: first-call costs
    seq_s, seq = timed(questions, backend, make_tools, config, one_at_a_time=True)
    bat_s, bat = timed(questions, backend, make_tools, config, one_at_a_time=False)
    tokens = lambda eps: sum(e.tokens_generated for e in eps)  # noqa: E731
    same = sum(a.prediction == b.prediction and a.turns == b.turns for a, b in zip(seq, bat))
    result = {
        "model": args.model, "episodes": len(questions), "batch_size": args.batch_size,
        "max_new_tokens": args.max_new_tokens, "max_turns": args.max_turns,
        "sequential": {"seconds": round(seq_s, 1), "episodes_per_min": round(60 * len(seq) / seq_s, 2),
                       "tokens_per_s": round(tokens(seq) / seq_s, 1)},
        "batched": {"seconds": round(bat_s, 1), "episodes_per_min": round(60 * len(bat) / bat_s, 2),
                    "tokens_per_s": round(tokens(bat) / bat_s, 1)},
        "speedup": round(seq_s / bat_s, 2), "same_outcome": same,
    }
    out = runs_dir() / "bench"
    atomic_write_json(out / "agent_throughput.json", result)
    atomic_write_text(out / "agent_throughput.md", "\n".join([
        f"Agent throughput, {args.model}, {len(questions)} episodes (greedy, <= {args.max_turns} turns, "
        f"<= {args.max_new_tokens} new tokens per turn), same process and questions:", "",
        "| mode | seconds | episodes/min | generated tokens/s |", "|---|---|---|---|",
        f"| one at a time | {result['sequential']['seconds']} | {result['sequential']['episodes_per_min']} | {result['sequential']['tokens_per_s']} |",
        f"| batched ({args.batch_size}) | {result['batched']['seconds']} | {result['batched']['episodes_per_min']} | {result['batched']['tokens_per_s']} |",
        "", f"Speedup: {result['speedup']}x. Episodes with the same prediction and turns in both modes: {same}/{len(questions)} "
        "(left padding changes float rounding, so greedy paths can part).", ""]))
    print(open(out / "agent_throughput.md").read())


if __name__ == "__main__":
    cli_main(main)
