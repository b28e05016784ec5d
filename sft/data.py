"""SFT examples: trajectories rendered with the tool chat template, labels on assistant tokens only.

Each trajectory's messages are rendered exactly as the agent sees them at inference (same system
prompt, same tool schema, same template), using TRL's training variant of the template whose
`{% generation %}` markers let transformers return the assistant-token mask. Labels are the
input ids on assistant tokens (the model's own text and tool calls, and the `<|im_end|>` that
ends its turn) and -100 everywhere else: system prompt, question, tool outputs and the generation
prompt (`<|im_start|>assistant\n`, which inference prefills and the model never writes) never enter
the loss, nor does an assistant message marked `"train": false` (the oracle's deliberate slips,
such as a repeated call that the tools refuse: context to recover from, never a target). We
tokenize here rather than in SFTTrainer so that what is trained is exactly what the agent renders
(tool-call arguments as the dicts it generated, whatever `datasets` would make of them), and so
that over-long trajectories are dropped and counted, never cut mid-call.
"""
from __future__ import annotations

import logging
import weakref
from itertools import groupby
from dataclasses import dataclass
from typing import NamedTuple
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
    kept: list[int]  # the index in the input of each row kept


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


def stale_warning(path: str) -> str | None:
    """A warning when the trajectories were built by another version of the oracle, tools or
    retriever than this checkout's (their manifest says so): SFT on them silently trains an older
    recipe. None for files without a data.trajectories manifest (hand-made or teacher JSONL)."""
    from common.io import read_manifest

    folder = Path(path) if Path(path).is_dir() else Path(path).parent
    manifest = read_manifest(folder)
    if not manifest or manifest.get("generator") != "data.trajectories":
        return None
    from agent.prompt import prompt_hash
    from data.trajectories import code_hash
    from datastore.retriever import Datastore

    inputs = manifest.get("inputs", {})
    if inputs.get("code") == code_hash(Datastore) and inputs.get("prompt") == prompt_hash():
        return None
    return (f"{path} was built by other oracle, tool or prompt code than this checkout's: rebuild it with "
            "`make data` (python -m data.trajectories), or train on it knowingly")


PROBE_TEXTS = ("Alpha", "Bravo", "Charlie")


def probe_messages() -> list[dict]:
    """A question and two tool outputs with three assistant turns, for measuring how a template
    renders turns. The outputs end differently (a full stop, a bracket) so that what the turns after
    them share is the template's own text."""
    call = [{"type": "function", "function": {"name": "search", "arguments": {"query": "q"}}}]
    messages = [{"role": "user", "content": "Question?"},
                {"role": "assistant", "content": PROBE_TEXTS[0], "tool_calls": call},
                {"role": "tool", "name": "search", "content": "[d1] River: founded in 1950."},
                {"role": "assistant", "content": PROBE_TEXTS[1], "tool_calls": call},
                {"role": "tool", "name": "search", "content": "[d2] Stone (town)"},
                {"role": "assistant", "content": PROBE_TEXTS[2]}]
    return messages


def _rendered_probe(tokenizer, template: str) -> tuple[list[int], list[int]]:
    """probe_messages rendered: (ids, the template's own assistant mask, before any unmarking)."""
    out = tokenizer.apply_chat_template(probe_messages(), chat_template=template, tokenize=True, return_dict=True,
                                        return_assistant_tokens_mask=True)
    return list(out["input_ids"]), list(out["assistant_masks"])


def tokenize_trajectory(tokenizer, messages: list[dict], tools: list, template: str) -> tuple[list[int], list[int]]:
    out = tokenizer.apply_chat_template(messages, tools=tools, chat_template=template, tokenize=True,
                                        return_dict=True, return_assistant_tokens_mask=True)
    ids, mask = list(out["input_ids"]), list(out["assistant_masks"])
    if not any(mask):
        raise UserError("the chat template marked no assistant tokens; it needs {% generation %} markers "
                        "(use a template TRL knows, or add them)")
    mask = _unmark_untrained(mask, messages)
    mask = _unmark_run_starts(mask, generation_prompt_tail(tokenizer, template))
    return ids, [tok if keep else -100 for tok, keep in zip(ids, mask)]


def _marked_runs(mask: list[int]) -> list[list[int]]:
    return [list(run) for marked, run in groupby(range(len(mask)), key=lambda i: bool(mask[i])) if marked]


def _unmark_run_starts(mask: list[int], count: int) -> list[int]:
    """Clear the first `count` marked tokens of every assistant span."""
    if not count:
        return mask
    mask = list(mask)
    for run in _marked_runs(mask):
        mask[run[0]:run[0] + count] = [0] * min(count, len(run))
    return mask


_TAILS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # tokenizer -> {template: tail}


def generation_prompt_tail(tokenizer, template: str) -> int:
    """generation_prompt_tail_uncached, once per tokenizer and template (it renders four conversations)."""
    known = _TAILS.setdefault(tokenizer, {})
    if template not in known:
        known[template] = generation_prompt_tail_uncached(tokenizer, template)
    return known[template]


def generation_prompt_tail_uncached(tokenizer, template: str) -> int:
    """How many tokens at the start of each `{% generation %}` span belong to the generation prompt
    (TRL's ChatML training templates open the span before the newline that ends
    `<|im_start|>assistant`). The agent never generates them: inference prefills them. Measured on
    a rendered conversation, one turn after the question and two after tool outputs, as the number
    of marked tokens the prompt rendered up to each turn (add_generation_prompt) already holds; the
    three must agree, or the template renders turns in ways this mask cannot follow."""
    messages = probe_messages()
    ids, mask = _rendered_probe(tokenizer, template)
    runs = _marked_runs(mask)
    turns = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    if len(runs) != len(turns):
        return 0  # a template that does not mark one span per turn: leave its mask as it is
    tails = set()
    for run, turn in zip(runs, turns):
        prompt = tokenizer.apply_chat_template(messages[:turn], chat_template=template, tokenize=True,
                                               add_generation_prompt=True, return_dict=True)["input_ids"]
        if list(prompt) != ids[:len(prompt)]:
            raise UserError("this chat template renders a turn's context differently from the generation prompt "
                            "the agent prefills; SFT would train on other tokens than inference sees")
        tails.add(max(0, len(prompt) - run[0]))
    if len(tails) != 1:
        raise UserError(f"this chat template puts {sorted(tails)} generation-prompt tokens into different turns' "
                        "assistant spans; the loss mask cannot leave them out consistently")
    return tails.pop()


def _unmark_untrained(mask: list[int], messages: list[dict]) -> list[int]:
    """Clear the mask over assistant messages marked "train": false. The k-th run of marked tokens is
    the k-th assistant message (each is one {% generation %} block)."""
    trained = [m.get("train", True) for m in messages if m["role"] == "assistant"]
    if all(trained):
        return mask
    runs = _marked_runs(mask)
    if len(runs) != len(trained):
        raise UserError(f"the chat template marks {len(runs)} assistant spans for {len(trained)} assistant "
                        "messages, so \"train\": false cannot be applied; drop that key or use another template")
    mask = list(mask)
    for run, keep in zip(runs, trained):
        if not keep:
            mask[run[0]:run[-1] + 1] = [0] * len(run)
    return mask


def _probe_rendering(tokenizer, template: str) -> tuple[list[int], list[list[int]]] | None:
    """probe_messages rendered: (ids, the labelled run of each turn, as tokenize_trajectory labels it),
    or None where the template does not mark three runs."""
    ids, mask = _rendered_probe(tokenizer, template)
    runs = _marked_runs(_unmark_run_starts(mask, generation_prompt_tail(tokenizer, template)))
    return (ids, runs) if len(runs) == 3 else None


def content_offset(tokenizer, template: str) -> int | None:
    """How many labelled tokens the template puts before the text of an assistant turn that follows a
    tool output (0 for ChatML once generation_prompt_tail is left out; a template could open a turn
    with its own text, such as an empty think block), so that
    decision_positions lands on the turn's first own token. Measured on a rendered conversation;
    None where the template prefixes such turns differently from one another: no token is then
    weighted or logged rather than the wrong one."""
    rendering = _probe_rendering(tokenizer, template)
    if rendering is None:
        return None
    ids, runs = rendering
    offsets = set()
    for run, text in zip(runs[1:], PROBE_TEXTS[1:]):
        # the first token that is a piece of the turn's own text, not of the template around it
        first = next((i for i in range(run[0], len(ids))
                      if tokenizer.decode([ids[i]]).strip() and text.startswith(tokenizer.decode([ids[i]]).strip())), None)
        offsets.add(None if first is None else first - run[0])
    return offsets.pop() if len(offsets) == 1 else None


def tool_gap(tokenizer, template: str) -> list[int] | None:
    """The token ids the template puts between a tool output's content and the next assistant turn's
    labelled tokens (ChatML: `</tool_response><|im_end|>\n<|im_start|>assistant`), which tell a turn
    after a tool output from the turn after the question. Measured as what the two post-tool turns
    of a rendered conversation share before them and the first turn does not; None where there is
    no such marker."""
    rendering = _probe_rendering(tokenizer, template)
    if rendering is None:
        return None
    ids, runs = rendering
    before = [ids[:run[0]] for run in runs]
    shared = 0
    while shared < min(map(len, before[1:])) and before[1][-1 - shared] == before[2][-1 - shared]:
        shared += 1
    gap = before[1][len(before[1]) - shared:]
    if not gap or before[0][-len(gap):] == gap:
        return None
    return gap


class DecisionMarker(NamedTuple):
    """Where a decision token sits: `offset` labelled template tokens into a turn that follows `gap`."""
    offset: int
    gap: list[int]


def decision_marker(tokenizer, template: str) -> DecisionMarker | None:
    """The marker decision_positions needs, or None where this template hides either part."""
    offset, gap = content_offset(tokenizer, template), tool_gap(tokenizer, template)
    return None if offset is None or gap is None else DecisionMarker(offset, gap)


def decision_positions(labels, input_ids, marker: DecisionMarker):
    """Boolean mask (shape of the (batch, length) labels tensor) of the first generated token of every
    trained assistant turn that follows a tool output: the token that decides between answering and
    calling again. Turns are runs of labels != -100; a turn follows a tool output where the ids
    (aligned with labels) before its run are the template's `gap` (tool_gap), so the turn after the
    question never counts and a row whose only trained turn follows an output (a missed-evidence row,
    or its shown side) does; `offset` (content_offset) skips the template's own labelled tokens."""
    import torch

    labelled = labels != -100
    previous = torch.nn.functional.pad(labelled[:, :-1], (1, 0), value=False)
    starts = labelled & ~previous
    width = len(marker.gap)
    windows = torch.nn.functional.pad(input_ids, (width, 0), value=-1).unfold(1, width, 1)  # [:, j]: ids[j-width:j]
    starts &= (windows[:, :labels.shape[1]] == torch.tensor(marker.gap, device=input_ids.device)).all(dim=-1)
    return torch.nn.functional.pad(starts, (marker.offset, 0), value=False)[:, :labels.shape[1]]


def tokenize_all(tokenizer, trajectories: list[dict], tools: list, max_length: int) -> TokenizedSet:
    """Render every trajectory; drop (and count) those longer than max_length instead of cutting a tool call."""
    template = training_template(tokenizer)
    input_ids, labels, kept, dropped = [], [], [], 0
    for index, row in enumerate(trajectories):
        ids, lab = tokenize_trajectory(tokenizer, row["messages"], tools, template)
        if len(ids) > max_length:
            dropped += 1
            continue
        input_ids.append(ids)
        labels.append(lab)
        kept.append(index)
    if dropped:
        log.warning("dropped %d of %d trajectories longer than max_length=%d tokens (not truncated)",
                    dropped, len(trajectories), max_length)
    if not input_ids:
        raise UserError(f"every trajectory is longer than max_length={max_length}; raise max_length in the recipe")
    total = sum(map(len, input_ids))
    loss = sum(sum(t != -100 for t in lab) for lab in labels)
    return TokenizedSet(input_ids, labels, dropped, total, loss, kept)


def first_turn_rows(rows: list[dict]) -> list[dict]:
    """For each trajectory whose first assistant turn calls a tool, that turn as a row of its own:
    the system prompt, the question and the first thought and call, nothing after. Where the
    question's reading decides the whole search (how many hops, which entity first), this gives
    SFT one more example of it for the price of the question and one turn (stop 36). A
    missed-evidence row (data/trajectory_misses.py) opens like its trajectory and gives none."""
    firsts = []
    for row in rows:
        if row.get("miss_of"):
            continue
        at = next(i for i, m in enumerate(row["messages"]) if m["role"] == "assistant")
        if row["messages"][at].get("tool_calls"):
            firsts.append({"id": f"{row.get('id')}-first", "first_turn_of": row.get("id"),
                           "messages": row["messages"][:at + 1], "origin": "first_turn"})
    return firsts


def as_context(messages: list[dict]) -> list[dict]:
    """The messages with every assistant turn marked "train": false: context the model reads, never a target."""
    return [{**m, "train": False} if m["role"] == "assistant" else m for m in messages]


def as_target(turn: dict) -> dict:
    """The turn without a "train" mark, so it is trained on like any assistant turn."""
    return {k: v for k, v in turn.items() if k != "train"}


def shown_rows(rows: list[dict]) -> list[dict]:
    """For each missed-evidence row (data/trajectory_misses.py) whose trajectory is in `rows`, the
    other side of its pair: the trajectory up to the same search's output, which shows the fact,
    then the oracle's next turn (moving on or answering), only that turn trained. With the row it
    is a pair that differs in one output and in the one turn after it (eval.evidence_contrast reads
    the same pairs); `pair_of` groups it with the row so both are drawn in one step."""
    by_id = {row.get("id"): row for row in rows}
    out = []
    for row in rows:
        original = by_id.get(row.get("miss_of"))
        if original is None:
            continue
        cut = len(row["messages"]) - 1  # the row's last turn follows the hidden output
        context = as_context(original["messages"][:cut])
        turn = as_target(original["messages"][cut])
        out.append({"id": f"{row['id']}-shown", "pair_of": row["id"], "question_id": row.get("question_id"),
                    "messages": context + [turn], "origin": "oracle_shown"})
    return out


def parse_type_repeats(spec: str) -> dict[str, int]:
    """`type_repeats` ("bridge=3,yesno=2") as {type: copies}; "" is {}."""
    repeats = {}
    for part in filter(None, (piece.strip() for piece in spec.split(","))):
        name, _, count = part.partition("=")
        if not name.strip() or not count.strip().isdigit() or int(count) < 1:
            raise UserError(f"type_repeats takes type=copies pairs such as bridge=3 (copies a whole number >= 1), got {part!r}")
        repeats[name.strip()] = int(count)
    return repeats


def repeat_by_type(rows: list[dict], spec: str) -> list[dict]:
    """The rows with each trajectory of a named question type present `copies` times, so that a
    step's random draw holds that type more often (the trajectories' own `type` field)."""
    repeats = parse_type_repeats(spec)
    if not repeats:
        return rows
    present = {row.get("type") for row in rows}
    missing = sorted(set(repeats) - present)
    if missing:
        raise UserError(f"type_repeats names {', '.join(missing)}, which no trajectory has; their types are "
                        f"{', '.join(sorted(str(t) for t in present))}")
    if twin_groups(rows):
        raise UserError("type_repeats copies rows, and these trajectories hold twins or evidence pairs drawn with "
                        "their original by row; set type_repeats: \"\" for them")
    return rows + [row for row in rows for _ in range(repeats.get(row.get("type"), 1) - 1)]


def evidence_pair_rows(rows: list[dict], mode: str) -> list[dict]:
    """The SFT rows for `evidence_pairs`: off (the rows as read), add (each missed-evidence row's
    shown side added) or only (the pairs alone: missed-evidence rows and their shown sides)."""
    if mode == "off":
        return rows
    shown = shown_rows(rows)
    if not shown:
        raise UserError("evidence_pairs needs missed-evidence rows with their trajectories in the same set; build them "
                        "with `python -m data.trajectories ... --p-miss P` (make data P_MISS=P) or set evidence_pairs: off")
    if mode == "only":  # a missed-evidence row whose trajectory is not in the set has no pair: left out
        paired = {row["pair_of"] for row in shown}
        return [row for row in rows if row.get("id") in paired] + shown
    return rows + shown


def twin_groups(rows: list[dict]) -> list[int] | None:
    """A group number per row, shared by rows drawn in one step: a trajectory and its contrastive
    twins (`twin_of`, data/trajectory_twins.py), a missed-evidence row and its shown side
    (`pair_of`, shown_rows); None when the rows hold neither."""
    if not any(row.get("twin_of") or row.get("pair_of") for row in rows):
        return None
    numbers: dict[str, int] = {}
    return [numbers.setdefault(row.get("twin_of") or row.get("pair_of") or row.get("id") or f"row {i}", len(numbers))
            for i, row in enumerate(rows)]


def twin_order(groups: list[int], step_size: int, generator) -> list[int]:
    """A random order of the rows in which each group (a row alone, or a trajectory and its twin)
    falls within one optimizer step of `step_size` rows: groups are shuffled and taken in turn, and
    a group too big for the room left in the step waits for the next one that fits. A pair is split
    only where a step's last place finds no single row left, which on data with few single rows
    can repeat step after step; stop 35's twin set (944 pairs, 2,005 single rows) has none split at
    8 rows per step."""
    import torch

    members: dict[int, list[int]] = {}
    for row, group in enumerate(groups):
        members.setdefault(group, []).append(row)
    units = list(members.values())
    queue = [units[i] for i in torch.randperm(len(units), generator=generator).tolist()]
    order: list[int] = []
    while queue:
        room = step_size - len(order) % step_size
        order.extend(queue.pop(next((i for i, unit in enumerate(queue) if len(unit) <= room), 0)))
    return order
