"""Missed-evidence rows: the same search, its pages hidden, and the oracle searching again.

    python -m data.trajectories --questions runs/data/world/questions/train_sft.jsonl --world runs/data/world \
        --datastore world --out runs/data/world/trajectories/sft_misses --p-miss 0.5

In an oracle trajectory a hop is often read off one search's snippet: the output shows the fact,
and the next turn moves on to the next hop or answers. The SFT agent makes that next turn whatever
the output shows (stops 20-22: its first token after a tool output hardly depends on what the search
still needs, and it states a fact the output lacks). A missed-evidence row is the trajectory up to
such a search, the same call, and the output that search gives with every page stating the fact
left out (`Datastore.search(..., exclude=...)`: the hits it ranks after them), then the oracle's own
reaction to a miss (data/trajectory_oracle.py `_reformulate`: a thought saying why, and a search with
other words that finds a page stating the fact). Side by side with its trajectory, the pair differs
only in that one output, so what tells "move on" from "search again" is whether the output shows
the fact. The row ends with that call; its earlier turns are marked "train": false (the trajectory
itself trains them), so SFT learns the one decision.

The row replays like any trajectory: `hidden_docs` are left out of the search `hidden_query` only
(data/trajectories.py `replay`).
API: missed_evidence_row(oracle, record, snippet_reads, rng) -> record or None; Hiding(retriever, docs, query).
"""
from __future__ import annotations

import random

from agent.tools import SearchTools
from data.trajectory_oracle import Drop, cap, hit_lines


class Hiding:
    """A retriever that leaves `docs` out of the results of one query, and is the retriever otherwise."""

    def __init__(self, retriever, docs: list[str], query: str):
        self.retriever, self.docs, self.query = retriever, frozenset(docs), query

    def search(self, query: str, k: int = 5, method: str | None = None):
        if query != self.query:
            return self.retriever.search(query, k, method)
        return self.retriever.search(query, k, method, exclude=self.docs)

    def __getattr__(self, name: str):  # open, find and the rest: the wrapped retriever's own
        return getattr(self.retriever, name)


def missed_evidence_row(oracle, record: dict, snippet_reads: list[dict], rng: random.Random) -> dict | None:
    """One of the trajectory's snippet reads (drawn with rng) with its pages hidden and the oracle's
    search again; None where the trajectory has no such read or no other query finds a page."""
    if not snippet_reads:
        return None
    read = snippet_reads[int(rng.random() * len(snippet_reads))]
    messages = record["messages"]
    at = next(i for i, message in enumerate(messages) if message is read["output"])  # a refused repeat may come before
    call = messages[at - 1]["tool_calls"][0]["function"]
    query = call["arguments"]["query"]
    tools = SearchTools(Hiding(oracle.retriever, read["stated_in"], query), oracle.k, oracle.method)
    output = tools._call("search", {"query": query})
    tried = [c["function"]["arguments"].get("query") for m in messages[:at] for c in m.get("tool_calls") or []]
    walk_rng, oracle.rng = oracle.rng, rng  # the reaction's wording draws from the row's own stream
    try:
        entity = oracle.world.entities[read["known"]]
        again, thought = oracle._reformulate(entity, read["surface"], read["key"], hit_lines(output),
                                             read["stated_in"], tried, read["need"])
    except Drop:
        return None
    finally:
        oracle.rng = walk_rng
    search = {"type": "function", "function": {"name": "search", "arguments": {"query": again}}}
    context = [{**m, "train": False} if m["role"] == "assistant" else m for m in messages[:at]]
    return {"id": f"{record['id']}-miss", "question_id": record["question_id"], "miss_of": record["id"],
            "messages": context + [{"role": "tool", "name": "search", "content": output},
                                   {"role": "assistant", "content": cap(thought), "tool_calls": [search]}],
            "hidden_docs": sorted(read["stated_in"]), "hidden_query": query, "answers": record["answers"],
            "hops": record["hops"], "type": record["type"], "pool": record["pool"],
            "n_tool_calls": sum(bool(m.get("tool_calls")) for m in context) + 1, "recovered": True,
            "missed_find": False, "opened": any(c["function"]["name"] in ("open", "find") for m in context
                                                for c in m.get("tool_calls") or []),
            "repeated_call": any(m.get("train") is False for m in messages[:at]), "origin": "oracle_miss"}
