"""Episodes per minute with batching and with the turn cache, against the same episodes run one at
a time and with a full prefill every turn, in one run.

    python -m agent.throughput --model smollm2-135m --n 32 --batch-size 16
    python -m agent.throughput --model smollm2-135m --replay runs/data/world/trajectories/sft --n 16

All passes share the loaded model, greedy decoding and the questions; the batched passes run
every episode in lockstep (one batched generate per round), the sequential pass runs each episode
alone; the full-prefill pass re-reads each conversation every turn (agent/turn_cache.py is what it
saves). Writes runs/bench/agent_throughput.{json,md}. `--replay` times only the turn cache, on
recorded trajectories whose turns do not depend on the model (runs/bench/turn_cache.{json,md}).
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from common.errors import cli_main
from common.io import atomic_write_json, atomic_write_text
from common.paths import runs_dir

from agent.backends import Sampling, TransformersBackend
from agent.chat import prepare_tokenizer
from agent.episode import EpisodeConfig, run_episodes
from agent.models import load_model
from agent.run import read_questions
from agent.tools import SearchTools, tool_functions


def timed(questions, backend, make_tools, config, one_at_a_time: bool) -> tuple[float, list]:
    start = time.perf_counter()
    if one_at_a_time:
        episodes = [run_episodes([q], backend, make_tools, config, progress=False)[0] for q in questions]
    else:
        episodes = run_episodes(questions, backend, make_tools, config, progress=False)
    return time.perf_counter() - start, episodes


def replay(trajectories: list[dict], backend, tools, rounds: int = 2) -> tuple[float, list]:
    """Turn-by-turn prefill work without depending on what the model says: before each assistant
    turn of each trajectory the backend generates one turn (kept aside), then the trajectory's own
    turn and tool outputs are appended. Both passes of `--replay` thus read identical contexts."""
    conversations = [[] for _ in trajectories]
    outputs, start = [], time.perf_counter()
    cuts = [[i for i, m in enumerate(t["messages"]) if m["role"] == "assistant"] for t in trajectories]
    for turn in range(max(map(len, cuts))):
        active = [n for n, c in enumerate(cuts) if turn < len(c)]
        for n in active:  # extend the same list objects: the turn cache knows a conversation by its list
            conversations[n].extend(trajectories[n]["messages"][len(conversations[n]):cuts[n][turn]])
        outputs.append([c.text for c in backend.complete([conversations[n] for n in active], tools)])
    return time.perf_counter() - start, outputs


def replay_main(args, model, tokenizer, store) -> None:
    """--replay: the turn cache against a full prefill on the same recorded trajectories, alternating."""
    from common.io import iter_jsonl

    source = Path(args.replay)
    source = source / "trajectories.jsonl" if source.is_dir() else source
    trajectories = [row for _, row in iter_jsonl(source, "one trajectory {messages, ...} per line")][:args.n]
    tools = tool_functions(SearchTools(store))
    sampling = Sampling(max_new_tokens=args.max_new_tokens)
    arms = {"full prefill": False, "turn cache": True}
    seconds, outputs, shares = {arm: [] for arm in arms}, {}, {}
    for round_index in range(args.rounds):
        for arm in (list(arms) if round_index % 2 == 0 else list(reversed(arms))):
            backend = TransformersBackend(model, tokenizer, sampling, batch_size=args.batch_size, reuse_cache=arms[arm])
            secs, outputs[arm] = replay(trajectories, backend, tools)
            seconds[arm].append(round(secs, 1))
            if backend.turn_cache:
                shares[arm] = round(backend.turn_cache.reused_tokens / backend.turn_cache.prompt_tokens, 3)
            print(f"round {round_index + 1}: {arm}: {secs:.1f} s")
    turns = [pair for a, b in zip(outputs["full prefill"], outputs["turn cache"]) for pair in zip(a, b)]
    result = {"model": args.model, "trajectories": len(trajectories), "source": str(source),
              "batch_size": args.batch_size, "max_new_tokens": args.max_new_tokens, "seconds": seconds,
              "speedup": round(sum(seconds["full prefill"]) / sum(seconds["turn cache"]), 2),
              "prompt_tokens_from_cache": shares["turn cache"],
              "same_turns": sum(a == b for a, b in turns), "turns": len(turns)}
    out = runs_dir() / "bench"
    atomic_write_json(out / "turn_cache.json", result)
    text = (f"Turn cache, {args.model}, {len(trajectories)} recorded trajectories replayed turn by turn "
            f"({result['turns']} assistant turns, <= {args.max_new_tokens} new tokens each, batches of {args.batch_size}), "
            f"{args.rounds} alternating rounds: full prefill {seconds['full prefill']} s, turn cache {seconds['turn cache']} s: "
            f"**{result['speedup']}x**; {result['prompt_tokens_from_cache']:.0%} of prompt tokens read from the cache; "
            f"same generated turn in {result['same_turns']}/{result['turns']}.\n")
    atomic_write_text(out / "turn_cache.md", text)
    print(text)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="Agent episode throughput: batched vs one at a time.")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--questions", default=str(runs_dir() / "data/world/questions/dev.jsonl"))
    parser.add_argument("--datastore", default="world")
    parser.add_argument("--n", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--max-turns", type=int, default=4)
    parser.add_argument("--dtype", default="fast", help="fast: bfloat16 where the CPU has bf16 units, else float32")
    parser.add_argument("--replay", help="trajectories (file or folder): time the turn cache on them instead")
    parser.add_argument("--rounds", type=int, default=2, help="--replay: alternating rounds of both arms")
    args = parser.parse_args(argv)
    from datastore.retriever import Datastore

    questions = read_questions(args.questions, args.n)
    store = Datastore.load(args.datastore)
    model, tokenizer = load_model(args.model, dtype=args.dtype)
    if args.replay:
        return replay_main(args, model, prepare_tokenizer(tokenizer), store)
    sampling, tokenizer = Sampling(max_new_tokens=args.max_new_tokens), prepare_tokenizer(tokenizer)
    backend = TransformersBackend(model, tokenizer, sampling, batch_size=args.batch_size)
    full = TransformersBackend(model, tokenizer, sampling, batch_size=args.batch_size, reuse_cache=False)
    config = EpisodeConfig(max_turns=args.max_turns)
    make_tools = lambda: SearchTools(store)  # noqa: E731
    timed(questions[:2], backend, make_tools, config, one_at_a_time=False)  # warm-up: first-call costs
    seq_s, seq = timed(questions, backend, make_tools, config, one_at_a_time=True)
    backend.turn_cache.retain([])  # free its memory before the other passes
    full_s, full_eps = timed(questions, full, make_tools, config, one_at_a_time=False)
    backend = TransformersBackend(model, tokenizer, sampling, batch_size=args.batch_size)  # counts this pass alone
    bat_s, bat = timed(questions, backend, make_tools, config, one_at_a_time=False)
    tokens = lambda eps: sum(e.tokens_generated for e in eps)  # noqa: E731
    same = lambda xs, ys: sum(a.prediction == b.prediction and a.turns == b.turns for a, b in zip(xs, ys))  # noqa: E731
    arm = lambda secs, eps: {"seconds": round(secs, 1), "episodes_per_min": round(60 * len(eps) / secs, 2),  # noqa: E731
                             "tokens_per_s": round(tokens(eps) / secs, 1)}
    result = {
        "model": args.model, "episodes": len(questions), "batch_size": args.batch_size,
        "max_new_tokens": args.max_new_tokens, "max_turns": args.max_turns,
        "sequential": arm(seq_s, seq), "batched_full_prefill": arm(full_s, full_eps), "batched": arm(bat_s, bat),
        "speedup": round(seq_s / bat_s, 2), "same_outcome": same(seq, bat),
        "turn_cache_speedup": round(full_s / bat_s, 2), "turn_cache_same_outcome": same(full_eps, bat),
        "prompt_tokens_reused": round(backend.turn_cache.reused_tokens / max(backend.turn_cache.prompt_tokens, 1), 3),
    }
    out = runs_dir() / "bench"
    atomic_write_json(out / "agent_throughput.json", result)
    atomic_write_text(out / "agent_throughput.md", "\n".join([
        f"Agent throughput, {args.model}, {len(questions)} episodes (greedy, <= {args.max_turns} turns, "
        f"<= {args.max_new_tokens} new tokens per turn), same process and questions:", "",
        "| mode | seconds | episodes/min | generated tokens/s |", "|---|---|---|---|",
        f"| one at a time | {result['sequential']['seconds']} | {result['sequential']['episodes_per_min']} | {result['sequential']['tokens_per_s']} |",
        f"| batched ({args.batch_size}), full prefill every turn | {result['batched_full_prefill']['seconds']} | {result['batched_full_prefill']['episodes_per_min']} | {result['batched_full_prefill']['tokens_per_s']} |",
        f"| batched ({args.batch_size}) | {result['batched']['seconds']} | {result['batched']['episodes_per_min']} | {result['batched']['tokens_per_s']} |",
        "", f"Batching: {result['speedup']}x; episodes with the same prediction and turns as one at a time: "
        f"{result['same_outcome']}/{len(questions)} (left padding changes float rounding, so greedy paths can part).",
        f"Turn cache: {result['turn_cache_speedup']}x over a full prefill every turn; same outcome "
        f"{result['turn_cache_same_outcome']}/{len(questions)}; {result['prompt_tokens_reused']:.0%} of prompt tokens "
        "read from the cache.", ""]))
    print(open(out / "agent_throughput.md").read())


if __name__ == "__main__":
    cli_main(main)
