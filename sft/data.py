"""SFT examples: trajectories rendered with the tool chat template, labels on assistant tokens only.

Each trajectory's messages are rendered exactly as the agent sees them at inference (same system
prompt, same tool schema, same template), using TRL's training variant of the template whose
`{% generation %}` markers let transformers return the assistant-token mask. Labels are the
input ids on assistant tokens (the model's own text and tool calls, and the `<|im_end|>` that
ends its turn) and -100 everywhere else: system prompt, question and tool outputs never enter
the loss, nor does an assistant message marked `"train": false` (the oracle's deliberate slips,
such as a repeated call that the tools refuse: context to recover from, never a target). We
tokenize here rather than in SFTTrainer so that what is trained is exactly what the agent renders
(tool-call arguments as the dicts it generated, whatever `datasets` would make of them), and so
that over-long trajectories are dropped and counted, never cut mid-call.
"""
from __future__ import annotations

import logging
from itertools import groupby
from dataclasses import dataclass
from pathlib import Path

from agent.chat import training_template
from common.errors import UserError
from common.io import iter_jsonl

log = logging.getLogger(__name__)


@dataclass
class TokenizedSet:
    input_ids: list[list[int]]
    labels: list[list[int]]
    dropped_too_long: int
    total_tokens: int
    loss_tokens: int


def read_trajectories(path: str) -> list[dict]:
    file = Path(path)
    if file.is_dir():
        file = file / "trajectories.jsonl"
    if not file.is_file():
        raise UserError(f"no trajectories at {path}; build them with `make data` (python -m data.trajectories)")
    rows = []
    for lineno, row in iter_jsonl(file, "one trajectory {id, messages, ...} per line"):
        messages = row.get("messages")
        if not isinstance(messages, list) or not any(m.get("role") == "assistant" for m in messages):
            raise UserError(f"{file}, line {lineno}: a trajectory needs a \"messages\" list with assistant turns")
        rows.append(row)
    if not rows:
        raise UserError(f"{file} holds no trajectories; rebuild them with `make data`")
    return rows


def tokenize_trajectory(tokenizer, messages: list[dict], tools: list, template: str) -> tuple[list[int], list[int]]:
    out = tokenizer.apply_chat_template(messages, tools=tools, chat_template=template, tokenize=True,
                                        return_dict=True, return_assistant_tokens_mask=True)
    ids, mask = list(out["input_ids"]), list(out["assistant_masks"])
    if not any(mask):
        raise UserError("the chat template marked no assistant tokens; it needs {% generation %} markers "
                        "(use a template TRL knows, or add them)")
    mask = _unmark_untrained(mask, messages)
    return ids, [tok if keep else -100 for tok, keep in zip(ids, mask)]


def _unmark_untrained(mask: list[int], messages: list[dict]) -> list[int]:
    """Clear the mask over assistant messages marked "train": false. The k-th run of marked tokens is
    the k-th assistant message (each is one {% generation %} block)."""
    trained = [m.get("train", True) for m in messages if m["role"] == "assistant"]
    if all(trained):
        return mask
    runs = [list(run) for marked, run in groupby(range(len(mask)), key=lambda i: bool(mask[i])) if marked]
    if len(runs) != len(trained):
        raise UserError(f"the chat template marks {len(runs)} assistant spans for {len(trained)} assistant "
                        "messages, so \"train\": false cannot be applied; drop that key or use another template")
    mask = list(mask)
    for run, keep in zip(runs, trained):
        if not keep:
            mask[run[0]:run[-1] + 1] = [0] * len(run)
    return mask


def tokenize_all(tokenizer, trajectories: list[dict], tools: list, max_length: int) -> TokenizedSet:
    """Render every trajectory; drop (and count) those longer than max_length instead of cutting a tool call."""
    template = training_template(tokenizer)
    input_ids, labels, dropped = [], [], 0
    for row in trajectories:
        ids, lab = tokenize_trajectory(tokenizer, row["messages"], tools, template)
        if len(ids) > max_length:
            dropped += 1
            continue
        input_ids.append(ids)
        labels.append(lab)
    if dropped:
        log.warning("dropped %d of %d trajectories longer than max_length=%d tokens (not truncated)",
                    dropped, len(trajectories), max_length)
    if not input_ids:
        raise UserError(f"every trajectory is longer than max_length={max_length}; raise max_length in the recipe")
    total = sum(map(len, input_ids))
    loss = sum(sum(t != -100 for t in lab) for lab in labels)
    return TokenizedSet(input_ids, labels, dropped, total, loss)
