"""Answer and episode metrics, scored exactly as the official HotpotQA script does.

    from eval.metrics import best_em, best_f1, extract_answer, aggregate, breakdown
    pred = extract_answer(final_message)              # text of the last <answer>...</answer>, or None
    record = {"em": best_em(pred, q["answers"]), "f1": best_f1(pred, q["answers"]), ...}
    aggregate(records); breakdown(records, "hops")

Normalization follows `hotpot_evaluate_v1.py`: lower-case, drop the ASCII punctuation of
`string.punctuation` (other symbols such as an en dash stay), drop the whole words a/an/the,
collapse whitespace, in that order. F1 is token F1 with multiset overlap, and 0 when either
side normalizes to yes/no/noanswer and the two differ. Over answer aliases the best score counts;
a missing (None) prediction scores 0.
"""
from __future__ import annotations

import re
import string
from collections import Counter
from typing import Iterable

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_SPECIAL = ("yes", "no", "noanswer")
_OPEN, _CLOSE = re.compile(r"<answer>", re.IGNORECASE), re.compile(r"</answer>", re.IGNORECASE)
_CHUNK_SUFFIX = re.compile(r"#\d+$")


def normalize_answer(s: str) -> str:
    """lower -> remove punctuation -> remove articles -> collapse whitespace (the official order)."""
    text = s.lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match(prediction: str | None, gold: str) -> float:
    if prediction is None:
        return 0.0
    return float(normalize_answer(prediction) == normalize_answer(gold))


def f1_score(prediction: str | None, gold: str) -> tuple[float, float, float]:
    """(f1, precision, recall) over normalized tokens, as the official script."""
    if prediction is None:
        return 0.0, 0.0, 0.0
    pred_norm, gold_norm = normalize_answer(prediction), normalize_answer(gold)
    if (pred_norm in _SPECIAL or gold_norm in _SPECIAL) and pred_norm != gold_norm:
        return 0.0, 0.0, 0.0
    pred_tokens, gold_tokens = pred_norm.split(), gold_norm.split()
    same = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
    if same == 0:
        return 0.0, 0.0, 0.0
    precision, recall = same / len(pred_tokens), same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall), precision, recall


def best_em(prediction: str | None, answers: Iterable[str]) -> float:
    """The best exact match over the answer aliases (0 for a None prediction or no aliases)."""
    return max((exact_match(prediction, answer) for answer in answers), default=0.0)


def best_f1(prediction: str | None, answers: Iterable[str]) -> float:
    """The best F1 over the answer aliases (0 for a None prediction or no aliases)."""
    return max((f1_score(prediction, answer)[0] for answer in answers), default=0.0)


def extract_answer(text: str | None) -> str | None:
    """The stripped content of the last complete `<answer>...</answer>`; None if absent or empty.

    "Last" is the last `<answer>` that is closed later; its content runs to the first
    `</answer>` after it, so with nested tags the innermost last pair wins.
    """
    if not text:
        return None
    for opening in reversed(list(_OPEN.finditer(text))):
        closing = _CLOSE.search(text, opening.end())
        if closing:
            return text[opening.end():closing.start()].strip() or None
    return None


def evidence_recall(gold_doc_ids: Iterable[str], retrieved_doc_ids: Iterable[str]) -> float | None:
    """Fraction of the gold document ids among the retrieved/opened ids; None without gold ids.

    A passage id `<doc_id>#<n>` counts for its document.
    """
    gold = set(gold_doc_ids or ())
    if not gold:
        return None
    seen = set()
    for doc_id in retrieved_doc_ids or ():
        seen.add(doc_id)
        seen.add(_CHUNK_SUFFIX.sub("", doc_id))
    return len(gold & seen) / len(gold)


def answer_shown(answers: Iterable[str], messages: list[dict]) -> bool:
    """Did a tool output show a gold answer (normalized, whole words)? An agent cannot copy what
    never reached its context: EM among the episodes where it did measures reading alone."""
    shown = " ".join(normalize_answer(str(m.get("content") or "")) for m in messages if m.get("role") == "tool")
    return any(f" {gold} " in f" {shown} " for gold in map(normalize_answer, answers) if gold)


def answers_after_unshown(answers: Iterable[str], question: str, messages: list[dict]) -> tuple[int, int] | None:
    """(tool outputs that show no gold answer, how many of them the agent's very next turn answers).

    The turn-level rate of answering from nothing: an agent that invents answers stops right after
    such outputs, one that reads searches on. Tool errors (refused or malformed calls) are not
    outputs. None where showing cannot be told: yes/no answers, and answers the question itself names
    (a comparison's entities), which appear in any output about them.
    """
    golds = [g for g in map(normalize_answer, answers) if g]
    asked = f" {normalize_answer(question)} "
    if not golds or any(g in ("yes", "no") or f" {g} " in asked for g in golds):
        return None
    outputs = answered = 0
    for output, turn in zip(messages, messages[1:]):
        if output.get("role") != "tool" or str(output.get("content") or "").startswith("Error") or turn.get("role") != "assistant":
            continue
        if not answer_shown(golds, [output]):
            outputs += 1
            answered += extract_answer(turn.get("content")) is not None
    return outputs, answered


def _mean(values: list) -> float | None:
    values = [float(v) for v in values if v is not None]
    return sum(values) / len(values) if values else None


def aggregate(records: list[dict]) -> dict:
    """Means over per-question records: em, f1, answer_rate, valid_tool_call_rate, ...

    Each mean is taken over the records that carry the key (None when none do);
    `valid_tool_call_rate` is valid calls / all calls over every episode (None without calls; a call
    repeated with the same arguments is refused, so not valid; `repeated_calls` counts them);
    `evidence_recall` ignores questions without gold documents; `answer_shown`: the share of
    episodes where a tool output showed a gold answer, `em_when_shown` the EM among them;
    `answered_in_one_call`: the share that answered after at most one tool call (by hops, it shows
    whether the agent stops when the question is done: the oracle does so in 62% of its 1-hop
    trajectories and 4% of its 2-hop bridges); `answer_after_unshown`: of the tool outputs that
    showed no gold answer, the share the agent answered right after (`answers_after_unshown`).
    """
    records = list(records)
    calls = sum(int(r.get("tool_calls") or 0) for r in records)
    valid = sum(int(r.get("valid_tool_calls") or 0) for r in records)
    unshown = [r["unshown_outputs"] for r in records if r.get("unshown_outputs") is not None]
    unshown_outputs = sum(outputs for outputs, _ in unshown)
    return {
        "n": len(records),
        "em": _mean([r.get("em") for r in records]),
        "f1": _mean([r.get("f1") for r in records]),
        "answer_rate": _mean([r.get("answered") for r in records]),
        "valid_tool_call_rate": valid / calls if calls else None,
        "tool_calls": _mean([r.get("tool_calls") for r in records]),
        "repeated_calls": _mean([r.get("repeated_tool_calls") for r in records]),
        "tokens_generated": _mean([r.get("tokens_generated") for r in records]),
        "evidence_recall": _mean([r.get("evidence_recall") for r in records]),
        "answer_shown": _mean([r.get("answer_shown") for r in records]),
        "em_when_shown": _mean([r.get("em") for r in records if r.get("answer_shown")]),
        "answered_in_one_call": _mean([bool(r["answered"]) and int(r.get("tool_calls") or 0) <= 1
                                       for r in records if "answered" in r]),
        "answer_after_unshown": sum(n for _, n in unshown) / unshown_outputs if unshown_outputs else None,
    }


def summarize(records: list[dict]) -> dict:
    """`aggregate` plus 95% bootstrap intervals of EM and F1 and policy tokens per correct answer."""
    from eval.stats import bootstrap_ci

    overall = aggregate(records)
    overall.update(em_ci=bootstrap_ci([r["em"] for r in records]), f1_ci=bootstrap_ci([r["f1"] for r in records]))
    correct = sum(r["em"] for r in records)
    overall["tokens_per_correct"] = sum(r["tokens_generated"] for r in records) / correct if correct else None
    return overall


def value_order(value) -> tuple:
    """Sort key for breakdown values (hops, type, ...): numbers in order, then strings, None last."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return (value is None, not number, value if number else str(value))


def breakdown(records: list[dict], key: str) -> dict:
    """`aggregate` per value of `key` (e.g. hops, type, pool); records without it go under None."""
    groups: dict = {}
    for record in records:
        groups.setdefault(record.get(key), []).append(record)
    return {value: aggregate(groups[value]) for value in sorted(groups, key=value_order)}
