"""Does the model's next move depend on whether the output shows the fact? Shown against hidden, teacher-forced.

    python -m eval.evidence_contrast --model runs/smollm2-135m/sft/final \
        --trajectories runs/diagnostics/dev/miss_sft_le2hops runs/diagnostics/dev/miss_rl_2hops

Reads oracle trajectories built with missed-evidence rows (`python -m data.trajectories ... --p-miss 1`,
`make miss-sets`; dev questions, never test). Each row pairs two contexts that differ in one search
output: the oracle's own, which shows the fact (context "shown"), and the same search with the
fact's pages hidden (context "hidden"). After "shown" the oracle moves on or answers (its turn,
"go on"); after "hidden" it searches with other words ("again"). For each pair and each context the
model's log-probability of both turns is read, and its preference for searching again is
log P(again) - log P(go on). A model whose decision follows the evidence prefers "again" more after
"hidden" than after "shown": the share of pairs where it does is the summary's `follows_evidence`
(0.5: the output's content does not move the choice). `shift` is the mean of that difference in
nats. Over whole turns it is inflated by copying (a "go on" turn names the fact, which the hidden
output lacks), so the same is read for the turns' first own tokens (`first_token_follows_evidence`,
`first_token_shift`), where greedy decoding chooses the move; a pair whose two turns open with the
same token counts half there. Where the oracle answers right after
"shown" (its turn opens with `<answer>`), P(the turn opens with `<answer>`) is also read in both
contexts (`p_answer_shown`, `p_answer_hidden`): the stop decision itself, which the SFT agent makes
after ~1.2 calls whatever the output shows (stops 20-37). `python -m eval.contrast_compare` pools a
report's sets with 95% intervals and pairs it with another checkpoint's.
"""
from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

from tqdm import tqdm

from common.errors import UserError, cli_main
from common.io import atomic_write_json
from eval.stop_decisions import check_turn_starts_at_prompt, probe_parser, teacher_forcing_setup
from sft.data import as_context, as_target, read_trajectories, shown_rows


def pairs(rows: list[dict]) -> list[dict]:
    """{id, shown, hidden, go_on, again} per missed-evidence row whose trajectory is in `rows`:
    the two contexts (up to and including the differing output) and the two turns."""
    by_id = {row["id"]: row for row in rows}
    return [{"id": miss["id"], "hops": miss.get("hops"), "type": miss.get("type"),
             "shown": shown["messages"][:-1], "hidden": miss["messages"][:-1],
             "go_on": shown["messages"][-1], "again": miss["messages"][-1]}
            for shown in shown_rows(rows) for miss in [by_id[shown["pair_of"]]]]


def rendered(tokenizer, tools, template: str, context: list[dict], turn: dict) -> tuple[list[int], list[int]]:
    """(ids, labels) of context + turn, with labels on the turn's own tokens only."""
    from sft.data import tokenize_trajectory

    messages = as_context(context) + [as_target(turn)]
    return tokenize_trajectory(tokenizer, messages, tools, template)


def turn_logprobs(model, sequences: list[tuple[list[int], list[int]]]) -> list[list[float]]:
    """Per sequence, the log-probability of each labelled token. The pair's four sequences share
    everything up to the differing output: that prefix runs once, its KV cache copied for each."""
    import copy

    import torch

    from agent.turn_cache import generate_kwarg

    common = next((i for i, ids in enumerate(zip(*(s[0] for s in sequences))) if len(set(ids)) > 1),
                  min(len(s[0]) for s in sequences)) - 1
    if any(label != -100 for _, labels in sequences for label in labels[:common]):
        raise ValueError("a labelled token lies in the shared prefix; the turns must follow the differing output")
    decoder, head, name = model.get_decoder(), model.get_output_embeddings(), generate_kwarg()
    out = []
    with torch.no_grad():
        prefix = decoder(input_ids=torch.tensor([sequences[0][0][:common]]), use_cache=True)
        cache = getattr(prefix, "cache", None)
        cache = cache if cache is not None else prefix.past_key_values
        for ids, labels in sequences:
            rest = decoder(input_ids=torch.tensor([ids[common:]]), use_cache=True,
                           **{name: copy.deepcopy(cache)}).last_hidden_state[0]
            hidden = torch.cat([prefix.last_hidden_state[0, -1:], rest[:-1]])  # hidden[j] predicts ids[common + j]
            targets = torch.tensor(labels[common:])
            keep = targets != -100  # the vocabulary head only where a turn token is predicted
            logits = head(hidden[keep]).float()
            out.append(torch.log_softmax(logits, dim=-1).gather(1, targets[keep, None])[:, 0].tolist())
    return out


def probe_pair(model, tokenizer, tools, template: str, tag: list[int], offset: int | None, pair: dict) -> dict:
    """Both turns' log-probabilities in both contexts; where the oracle answers after "shown",
    P(the turn opens with `<answer>`) in each context, read off the same pass (eval.stop_decisions'
    quantity: the tag's tokens right after the template's own `offset` tokens)."""
    keys = [(turn, context) for context in ("shown", "hidden") for turn in ("go_on", "again")]
    sequences = [rendered(tokenizer, tools, template, pair[context], pair[turn]) for turn, context in keys]
    logprobs = dict(zip(keys, turn_logprobs(model, sequences)))
    scores = {f"{turn}|{context}": sum(logprobs[turn, context]) for turn, context in keys}
    row = {"id": pair["id"], "hops": pair["hops"], "type": pair["type"], **{k: round(v, 3) for k, v in scores.items()},
           "shift": round(_shift(lambda turn, context: scores[f"{turn}|{context}"]), 3)}
    if offset is not None:  # the turn's first own token: where greedy decoding makes the choice
        row["first_shift"] = round(_shift(lambda turn, context: logprobs[turn, context][offset]), 3)
    go_on = sequences[keys.index(("go_on", "shown"))]
    turn_ids = [token for token, label in zip(*go_on) if label != -100]
    if offset is not None and turn_ids[offset:offset + len(tag)] == tag and not pair["go_on"].get("tool_calls"):
        for context in ("shown", "hidden"):
            row[f"p_answer_{context}"] = round(math.exp(sum(logprobs["go_on", context][offset:offset + len(tag)])), 4)
    return row


def _shift(score) -> float:
    """How much more the model prefers "again" over "go on" after the hidden output than after the shown one."""
    prefer = {context: score("again", context) - score("go_on", context) for context in ("shown", "hidden")}
    return prefer["hidden"] - prefer["shown"]


def summary(rows: list[dict]) -> dict:
    stops = [r for r in rows if "p_answer_shown" in r]
    mean = lambda values: round(statistics.mean(values), 3) if values else None  # noqa: E731
    follows = lambda key: mean([(r[key] > 0) + 0.5 * (r[key] == 0) for r in rows if key in r])  # noqa: E731
    return {"pairs": len(rows), "follows_evidence": follows("shift"), "shift": mean([r["shift"] for r in rows]),
            "first_token_follows_evidence": follows("first_shift"),
            "first_token_shift": mean([r["first_shift"] for r in rows if "first_shift" in r]),
            "stop_pairs": len(stops), "p_answer_shown": mean([r["p_answer_shown"] for r in stops]),
            "p_answer_hidden": mean([r["p_answer_hidden"] for r in stops]),
            "stop_lower_when_hidden": mean([r["p_answer_hidden"] < r["p_answer_shown"] for r in stops])}


def main(argv=None) -> None:
    from agent.backends import ANSWER_TAG
    from agent.chat import training_template
    from sft.data import content_offset

    args = probe_parser("Shown against hidden evidence: does the model's next move follow the output?").parse_args(argv)
    sets = {path: pairs(read_trajectories(path)) for path in args.trajectories}
    for path, found in sets.items():
        if not found:
            raise UserError(f"{path} holds no missed-evidence rows with their trajectories; build it with "
                            "`python -m data.trajectories ... --p-miss 1` (make miss-sets)")
    model, tokenizer, tools = teacher_forcing_setup(args)
    template, tag = training_template(tokenizer), tokenizer(ANSWER_TAG, add_special_tokens=False).input_ids
    offset = content_offset(tokenizer, template)
    report = {}
    for path, found in sets.items():
        check_turn_starts_at_prompt(tokenizer, tools, found[0]["shown"])
        rows = [probe_pair(model, tokenizer, tools, template, tag, offset, pair)
                for pair in tqdm(found, desc=Path(path).name, unit="pair", mininterval=5.0)]
        report[path] = {"summary": summary(rows), "rows": rows}
        print(json.dumps({"trajectories": path, **report[path]["summary"]}))
    if args.out:
        atomic_write_json(Path(args.out), {"model": args.model, "sets": report})


if __name__ == "__main__":
    cli_main(main)
