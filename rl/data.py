"""RL data: the question set (optionally filtered by the SFT model's pass rate) as a GRPO dataset.

Each row's `prompt` is the agent's own first messages (agent.prompt.first_messages), conversational,
so TRL renders it with the tool schema exactly as the agent does; `id`, `answers` and `gold_doc_ids`
travel with it to the environment's reset() and to the reward functions.

The filter reads agent.run episodes and scores them by the rewards' rules (record_score,
record_evidence_reward; tests/test_rl.py checks they agree with rl.rewards on the same episodes).
"""
from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from common.errors import UserError


def record_recall(record: dict) -> float | None:
    """An agent.run episode's evidence recall (None where its question names no gold documents).
    Scored records carry evidence_recall; a raw predictions.jsonl line has the ids to compute it."""
    from eval.metrics import evidence_recall

    if "evidence_recall" in record:
        return record["evidence_recall"]
    return evidence_recall(record["gold_doc_ids"], record["retrieved"] + record["opened"])


def evidence_was_seen(record: dict) -> bool:
    """Did the episode see all its question's gold documents (True where it names none)?"""
    return record_recall(record) in (None, 1.0)


def record_score(record: dict, needs_evidence: bool = False) -> float:
    """An episode's EM as the `em` reward scores it: with needs_evidence, 0 unless the evidence was seen."""
    from eval.metrics import best_em

    score = record["em"] if "em" in record else best_em(record.get("prediction"), record.get("answers") or [])
    return 0.0 if needs_evidence and not evidence_was_seen(record) else float(score)


def record_evidence_reward(record: dict) -> float:
    """The `evidence` reward of an episode: its evidence recall if it answered, else 0."""
    return float(record_recall(record) or 0.0) if record.get("prediction") is not None else 0.0


def pass_rates(path: str, needs_evidence: bool = False) -> dict[str, float]:
    """Mean EM per question id over the records of an agent.run predictions.jsonl (several runs may repeat ids).

    With needs_evidence a right answer counts only when the episode saw all its gold documents
    (evidence_was_seen), as the rewards count it with answer_needs_evidence."""
    if not Path(path).is_file():
        raise UserError(f"pass_rate_file {path} does not exist; run `make pass-rate` first (python -m rl.pass_rate "
                        f"--model <sft> --questions <train_rl.jsonl> --out <dir>: <dir>/predictions.jsonl), or drop pass_rate_file")
    scores = defaultdict(list)
    for lineno, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            scores[record["id"]].append(record_score(record, needs_evidence))
        except (json.JSONDecodeError, KeyError, TypeError):
            fields = "id, prediction, gold_doc_ids, retrieved and opened" if needs_evidence else "id and prediction"
            raise UserError(f"{path}, line {lineno}: expected an agent.run prediction record with {fields}; "
                            f"use the predictions.jsonl of `make pass-rate`") from None
    return {qid: sum(v) / len(v) for qid, v in scores.items()}


def check_pass_rates_model(path: str, model_path: str, digest: str | None = None) -> None:
    """Pass rates measured on another checkpoint pick the wrong questions: stop before training on them.

    rl.pass_rate records the checkpoint's digest in pass_rates.json beside predictions.jsonl; a
    pass_rate_file without one (made by hand or by an older version) is not checked."""
    from agent.models import checkpoint_digest

    summary = Path(path).parent / "pass_rates.json"
    try:
        measured = json.loads(summary.read_text()).get("model_digest") if summary.is_file() else None
    except (json.JSONDecodeError, AttributeError):
        raise UserError(f"{summary} is not rl.pass_rate's summary; rerun `make pass-rate`") from None
    if measured and measured != (digest or checkpoint_digest(model_path)):
        raise UserError(f"pass_rate_file {path} was measured on another checkpoint than {model_path}; "
                        f"rerun `make pass-rate` (python -m rl.pass_rate --model {model_path} ...)")


def load_questions(script) -> tuple[list[dict], dict]:
    from agent.run import read_questions

    questions = read_questions(script.questions)
    stats = {"questions": len(questions)}
    if script.pass_rate_file:
        rates = pass_rates(script.pass_rate_file, script.answer_needs_evidence)
        # a question without a measured rate is dropped: "sometimes solved" cannot be assumed
        measured = [q for q in questions if q["id"] in rates]
        questions = [q for q in measured if script.min_pass_rate <= rates[q["id"]] <= script.max_pass_rate]
        stats.update(pass_rate_file=script.pass_rate_file, measured=len(measured), kept_by_pass_rate=len(questions))
    questions = questions[: script.max_questions] if script.max_questions else questions
    missing = [q["id"] for q in questions if not q.get("answers")]
    if missing:
        raise UserError(f"{script.questions}: question(s) {', '.join(missing[:3])} have no \"answers\"; RL needs them for the reward")
    if not questions:
        raise UserError(f"no questions left from {script.questions} (check pass_rate_file / min_pass_rate / max_pass_rate)")
    stats["used"] = len(questions)
    return questions, stats


def make_dataset(questions: list[dict], max_tool_calls: int):
    """Conversational `prompt` (the agent's first messages) plus the columns rewards and reset() read."""
    from datasets import Dataset

    from agent.prompt import first_messages

    return Dataset.from_list([{"id": q["id"], "prompt": first_messages(q["question"], max_tool_calls),
                               "answers": [str(a) for a in q["answers"]],
                               "gold_doc_ids": [str(d) for d in q.get("gold_doc_ids") or []]} for q in questions])


def make_retriever(script):
    if script.retrieval_url:
        from datastore.client import RetrievalClient
        return RetrievalClient(script.retrieval_url)
    from datastore.retriever import Datastore
    return Datastore.load(script.datastore)
