"""Does the model's first token depend on where the search stands? Openers at the oracle's decision points.

    python -m eval.openers --model runs/smollm2-135m/sft/final \
        --trajectories runs/diagnostics/decision/oracle_varied_px0_test_sft_le2hops

Greedy decoding makes a turn's choice at its first token: `<answer>` stops, and each kind of call
opens with the first word of its own thoughts ("Let me find ...", "Kret Construction was founded
by ...; now I need ..."). At every point right after a tool output of an oracle trajectory
(eval.stop_decisions.decision_points) the model's whole next-token distribution is read, and the
points are grouped by what the oracle does there: answer (the turn opens with `<answer>`), answer
after text (a comparison's or yes/no's final turn that states the facts first), search, find or
open. If the model knew where the search stands, its mean distributions would differ between
groups as the oracle's own first tokens do. Both are compared by total variation (0: the same
openers whatever the search needs; 1: never the same). Each group also gets the model's mean
probability of the oracle's own first token there, how often greedy decoding writes it, and the
mean per-token probability of the rest of the oracle's turn once that token is given (does the
model know how to write the move, whether or not it chooses it?). The oracle's distance is counted
from its samples, so it reads high for small groups whose openers are names (rare tokens); it is
the scale to read the model's against, not an exact target.
"""
from __future__ import annotations

import json
from collections import Counter
from itertools import combinations
from pathlib import Path

from common.errors import UserError, cli_main
from common.io import atomic_write_json
from eval.stop_decisions import check_turn_starts_at_prompt, decision_points, probe_parser, teacher_forcing_setup
from sft.data import read_trajectories

ACTIONS = ("answer", "answer after text", "search", "find", "open")
MIN_POINTS = 5  # groups with fewer points are listed but not compared
TOP = 5


def oracle_action(turn: dict, answers: bool | None) -> str:
    """`answers` as decision_points gives it: None for a final turn that opens with text."""
    calls = turn.get("tool_calls") or []
    return calls[0]["function"]["name"] if calls else "answer" if answers else "answer after text"


def teacher_forced(model, prompt_ids: list[int], turn_ids: list[int]):
    """(the next-token distribution at the prompt's end, the probability of each later token of the
    turn given the ones before it)."""
    import torch

    from agent.backends import continuation_distributions

    probs = continuation_distributions(model, prompt_ids, turn_ids).cpu()
    return probs[0], probs[torch.arange(1, len(turn_ids)), torch.tensor(turn_ids[1:], dtype=torch.long)]


def turn_tokens(tokenizer, prompt_ids: list[int], full: str, prompt: str) -> list[int]:
    """The turn's tokens as SFT tokenized them (the whole rendering, up to and including the end of
    turn, as SFT's labels), or the turn alone where the rendering's tokens do not start with the
    prompt's."""
    ids = tokenizer(full, add_special_tokens=False).input_ids
    if ids[:len(prompt_ids)] == prompt_ids:
        ids = ids[len(prompt_ids):]
    else:
        ids = tokenizer(full[len(prompt):], add_special_tokens=False).input_ids
    end = tokenizer.eos_token_id
    return ids[:ids.index(end) + 1] if end in ids else ids


def total_variation(p, q) -> float:
    return 0.5 * float((p - q).abs().sum())


def probe(model, tokenizer, tools, trajectories: list[dict]) -> dict:
    """Per oracle action: the number of points, the model's summed next-token distribution, the
    oracle's first-token counts, P(oracle's token) summed, greedy hits, and the mean probability of
    the rest of the oracle's turn once its first token is given, summed. Contexts longer than the
    model's window are skipped and counted."""
    import torch

    limit = getattr(model.config, "max_position_embeddings", None)
    groups: dict[str, dict] = {}
    skipped = 0
    for row in trajectories:
        for prefix, answers, _ in decision_points(row["messages"]):
            turn = row["messages"][len(prefix)]
            prompt = tokenizer.apply_chat_template(prefix, tools=tools, tokenize=False, add_generation_prompt=True)
            full = tokenizer.apply_chat_template(prefix + [turn], tools=tools, tokenize=False)
            if not groups:
                check_turn_starts_at_prompt(tokenizer, tools, prefix)
            ids = tokenizer(prompt, add_special_tokens=False).input_ids
            turn_ids = turn_tokens(tokenizer, ids, full, prompt)
            if limit and len(ids) + len(turn_ids) > limit:
                skipped += 1
                continue
            dist, rest = teacher_forced(model, ids, turn_ids)
            action = oracle_action(turn, answers)
            if action not in groups:
                groups[action] = {"n": 0, "model": torch.zeros_like(dist), "oracle": Counter(), "p_oracle": 0.0,
                                  "greedy_hits": 0, "p_rest": 0.0}
            group = groups[action]
            opener = turn_ids[0]
            group["n"] += 1
            group["model"] += dist
            group["oracle"][opener] += 1
            group["p_oracle"] += float(dist[opener])
            group["greedy_hits"] += int(dist.argmax()) == opener
            group["p_rest"] += float(rest.mean()) if len(rest) else 1.0
    return {"groups": groups, "skipped_too_long": skipped}


def oracle_distribution(counts: Counter, like):
    dist = like.new_zeros(like.shape)
    for token, count in counts.items():
        dist[token] = count
    return dist / dist.sum()


def summary(result: dict, tokenizer) -> dict:
    groups = result["groups"]
    cells, means = {}, {}
    for action in [a for a in ACTIONS if a in groups]:
        g = groups[action]
        mean = g["model"] / g["n"]
        means[action] = (mean, oracle_distribution(g["oracle"], mean))
        top = mean.topk(TOP)
        cells[action] = {
            "n": g["n"],
            "model_openers": {tokenizer.decode([i]): round(float(p), 3) for p, i in zip(top.values, top.indices)},
            "oracle_openers": {tokenizer.decode([t]): round(c / g["n"], 3) for t, c in g["oracle"].most_common(TOP)},
            "p_oracle_opener": round(g["p_oracle"] / g["n"], 3),
            "greedy_writes_oracle_opener": round(g["greedy_hits"] / g["n"], 3),
            "p_rest_of_oracle_turn": round(g["p_rest"] / g["n"], 3),
        }
    compared = [a for a in means if groups[a]["n"] >= MIN_POINTS]
    distances = {f"{a} vs {b}": {"model": round(total_variation(means[a][0], means[b][0]), 3),
                                 "oracle": round(total_variation(means[a][1], means[b][1]), 3)}
                 for a, b in combinations(compared, 2)}
    return {"by_oracle_action": cells, "total_variation": distances, "skipped_too_long": result["skipped_too_long"]}


def main(argv=None) -> None:
    parser = probe_parser("The model's first-token distribution at oracle decision points, by what the oracle does.")
    args = parser.parse_args(argv)
    sets = {path: read_trajectories(path) for path in args.trajectories}
    model, tokenizer, tools = teacher_forcing_setup(args)
    report = {}
    for path, trajectories in sets.items():
        result = probe(model, tokenizer, tools, trajectories)
        if not result["groups"]:
            raise UserError(f"{path}: no decision after a tool output in these trajectories that fits the model's "
                            f"window ({result['skipped_too_long']} too long)")
        report[path] = summary(result, tokenizer)
        print(json.dumps({"trajectories": path, **report[path]}))
    if args.out:
        atomic_write_json(Path(args.out), {"model": args.model, "sets": report})


if __name__ == "__main__":
    cli_main(main)
