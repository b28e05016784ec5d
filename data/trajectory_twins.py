"""Contrastive twins of oracle trajectories: the same first hop, asked as its own question.

    python -m data.trajectories --questions runs/data/world/questions/train_sft.jsonl --world runs/data/world \
        --datastore world --out runs/data/world/trajectories/sft_twins --p-twin 0.5

A two-hop trajectory reads the first hop's fact ("Tolo Treth founded Rivadal Software") and then
moves on to the bridge entity. Its twin asks the one-hop question ("Who founded Rivadal
Software?") and is the same trajectory up to that point, where it answers. The pair differs only
in the question: the tool outputs, the calls and the thoughts before the decision are
byte-identical, so the one thing that tells "answer now" from "search on" is what the question
asks. Measured before (stops 20-26), the SFT agent answers the bridge entity itself or an invented
fact right after the first hop, and cannot tell a finished one-hop search from an unfinished
two-hop one. SFT draws a trajectory and its twin in the same optimizer step (sft/train.py).

The twin is phrased with the sft pool's own one-hop templates (data/phrasings.py), mentions the
head entity as the trajectory's thoughts do, and is kept only where its answer is unique in the
world and not written in the question. It is skipped where the first hop was searched with the
whole two-hop question (its query would be another question's words).
API: first_hop_twin(world, question, record, hop_starts, prompt_tool_calls) -> record or None.
"""
from __future__ import annotations

import random

from agent.prompt import first_messages
from data import phrasings as P
from data.question_candidates import entity_answers
from data.questions import answer_in_question
from data.trajectory_oracle import Drop, surface_in, visible


def first_hop_twin(world, question: dict, record: dict, hop_starts: list, prompt_tool_calls: int) -> dict | None:
    """The twin of a chain question's trajectory at its second hop, or None where there is none
    (a one-hop question, a comparison, a second hop read off an earlier output, no one-hop
    phrasing for the relation, an ambiguous or leaked answer)."""
    relations, chain = question.get("relations") or [], question.get("chain") or []
    if question.get("type") not in ("bridge", "chain") or not hop_starts or relations[0].startswith("inv:"):
        return None
    head, relation = chain[0], relations[0]
    entity, fact = world.entities[head], world.facts.get((head, relation), {})
    if "object" not in fact or not P.has("ask", entity["type"], relation) or not _unique(world, head, relation):
        return None
    prefix = _prefix(record["messages"], hop_starts[0][0], question["question"])
    if prefix is None:
        return None
    text, template = _phrase(world, question, head, relation)
    answers = entity_answers(world.entities[fact["object"]])
    if text is None or answer_in_question(text, answers):
        return None
    messages = first_messages(text, prompt_tool_calls) + prefix + [
        {"role": "assistant", "content": f"<answer>{answers[0]}</answer>"}]
    hidden = head not in fact["stated_in"]
    return {"id": f"{question['id']}-twin", "question_id": question["id"], "twin_of": record["id"],
            "twin_question": text, "twin_template": template, "messages": messages, "answers": answers,
            "hops": 1, "type": "hidden_fact" if hidden else "lookup", "pool": question.get("pool"),
            "n_tool_calls": sum(bool(m.get("tool_calls")) for m in prefix), **hop_starts[0][1],
            "repeated_call": any(m.get("train") is False for m in prefix), "origin": "oracle_twin"}


def _prefix(messages: list[dict], second_hop: dict, asked: str) -> list[dict] | None:
    """The messages after the system prompt and question, up to the second hop's first call."""
    at = next(i for i, message in enumerate(messages) if message is second_hop)
    prefix = messages[2:at]
    queries = [call["function"]["arguments"].get("query") for m in prefix for call in m.get("tool_calls") or []]
    return None if asked in queries else prefix


def _phrase(world, question: dict, head: str, relation: str) -> tuple[str | None, str | None]:
    """A one-hop question about the head as the trajectory names it, in the question's pool."""
    try:
        surface = surface_in(world.entities[head], question["question"])
    except Drop:
        return None, None
    kind = world.entities[head]["type"]
    mention = ("the " if kind == "event" else "") + surface
    rng = random.Random(f"twin-{question['id']}")
    text, template = P.chain_text(rng, question.get("pool") or "sft", mention, [(kind, relation)])
    return (text, template) if visible(surface, text) else (None, None)


def _unique(world, head: str, relation: str) -> bool:
    """Every entity named like the head has the same object for the relation, if any (the question
    could mean any of them)."""
    objects = {world.facts.get((subject, relation), {}).get("object") for subject in world.named[world.entities[head]["name"]]}
    return len(objects - {None}) == 1
