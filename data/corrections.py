"""Correction rows: the oracle's next move at the points where the agent's own episode went wrong.

    python -m data.corrections --episodes runs/diagnostics/s42_own_sft/predictions.jsonl \
        --questions runs/data/world/questions/train_sft.jsonl --world runs/data/world --datastore world \
        --out runs/data/world/trajectories/corrections --mix runs/data/world/trajectories/sft

Oracle trajectories (data/trajectories.py) show the model only the oracle's own searches; at test
time it reads its own, whose misses are of other kinds (a wrong relation asked, the right page with
the fact phrased unlike the query, a refused repeat). Here an expert labels the agent's own states,
as DAgger does: for each assistant turn of a recorded `agent.run` episode on a train question, the
expert reads which of the question's facts the episode's tool outputs have shown so far
(data/trajectory_oracle.py's rule) and says what it would do next: answer once all are shown;
else read a page already listed that states the missing fact (find, or open), or search for it with
a query whose results hold a page stating it and that the episode has not tried. Where the agent's
own turn did something else (answered early or wrongly, a call whose output showed nothing new, a
refused repeat, no valid call), the row is the episode up to that turn, every agent turn kept as
untrained context ("train": false), then the expert's turn, the only one trained.

Chain questions only (lookup, bridge, inverse, hidden fact, chain); comparisons and yes/no are
counted as skipped. `--mix DIR` adds as many of that folder's trajectories (a seeded draw), so the
output is a ready SFT set (`python -m sft.train ... --trajectories OUT`). Writes trajectories.jsonl,
report.json and manifest.json into --out. Questions of a split other than train_* are refused: the
rows carry their gold answers.
"""
from __future__ import annotations

import argparse
import random
from collections import Counter
from pathlib import Path

from agent.run import read_questions
from common.errors import UserError, cli_main
from common.io import atomic_dir, atomic_write_json, file_sha256, iter_jsonl, write_jsonl
from data import trajectory_text as T
from data.leakage import PAIRED
from data.trajectory_oracle import Drop, Oracle, WorldIndex, cap, hit_lines, surface_in
from eval.metrics import best_em, extract_answer
from sft.data import as_context, read_trajectories


def read_so_far(messages: list[dict]) -> tuple[dict[str, str], list[str]]:
    """(doc id -> everything the tool outputs showed of it, the search queries made), as the
    oracle's Session keeps them: a search's hit lines, a find's or an open's whole output."""
    read, queries, calls = {}, [], {}
    for message in messages:
        for call in message.get("tool_calls") or []:
            calls[call["function"]["name"]] = call["function"].get("arguments") or {}
            if call["function"]["name"] == "search":
                queries.append(str(calls["search"].get("query", "")))
        if message["role"] != "tool":
            continue
        name = message.get("name")
        pieces = hit_lines(message["content"]).items() if name == "search" else \
            [(str(calls.get(name, {}).get("doc_id")), message["content"])]
        for doc, text in pieces:
            read[doc] = read.get(doc, "") + "\n" + text
    return read, queries


class Expert:
    """The oracle's next move from any state of a chain question's episode."""

    def __init__(self, oracle: Oracle):
        self.oracle, self.world = oracle, oracle.world

    def progress(self, question: dict, messages: list[dict]) -> dict:
        """The first hop whose fact no output has shown: {hop, known, surface, key, target, stated_in,
        shows, facts (the facts shown before it)}; hop is None once all are shown. Raises Drop."""
        chain, relations = question.get("chain") or [], question.get("relations") or []
        if not chain or not relations:
            raise Drop("no_chain")
        read, _ = read_so_far(messages)
        known, surface, facts = chain[0], surface_in(self.world.entities[chain[0]], question["question"]), []
        for hop, relation in enumerate(relations):
            target_id, target, stated_in, key = self.oracle._hop(chain, hop, known, relation)
            shows = self.oracle._shows(known, surface, target)
            state = {"hop": hop, "known": known, "surface": surface, "key": key, "target": target,
                     "stated_in": stated_in, "shows": shows, "facts": facts, "read": read}
            if not any(shows(d, read[d]) for d in stated_in if d in read):
                return state
            facts = facts + [T.FACT[key].format(n=surface, o=target)]
            if target_id is None and hop + 1 < len(relations):
                raise Drop("attribute_mid_chain")
            known, surface = target_id, target
        return {"hop": None, "facts": facts, "read": read}

    def move(self, question: dict, messages: list[dict], rng: random.Random) -> dict:
        """The expert's assistant turn at this state."""
        self.oracle.rng, self.oracle.tight, self.oracle.extra = rng, False, 0.0
        state = self.progress(question, messages)
        if state["hop"] is None:
            return {"role": "assistant", "content": f"<answer>{question['answers'][0]}</answer>"}
        need = self.oracle.pick(T.NEED[state["key"]]).format(n=state["surface"])
        listed = [d for d in state["stated_in"] if d in state["read"] and not opened(messages, d)]
        if listed:
            return self._read_page(listed[0], state, need)
        return self._search(question, messages, state, need)

    def _read_page(self, doc: str, state: dict, need: str) -> dict:
        """A page the outputs listed states the fact but its snippet does not show it: find, or open."""
        known, key, shows = state["known"], state["key"], state["shows"]
        texts = self.oracle._find_texts(key) if doc == known else [self.world.entities[known]["name"]]
        good = self.oracle._first_find(doc, texts, lambda text: shows(doc, "", text))
        fields = {"need": need, "d": doc, "t": good, "n": state["surface"], "own": known}
        if good is not None:
            return turn(self.oracle.pick(T.FIND_NEEDED).format(**fields), "find", doc_id=doc, text=good)
        return turn(self.oracle.pick(T.OPEN_NEEDED).format(**fields), "open", doc_id=doc)

    def _search(self, question: dict, messages: list[dict], state: dict, need: str) -> dict:
        """A query whose results hold a page stating the fact, not tried before; the thought says why."""
        tried = read_so_far(messages)[1]
        surface, key, stated_in, shows = state["surface"], state["key"], state["stated_in"], state["shows"]
        self.oracle.tight = True  # a query whose snippet shows the fact, where one does
        query = self.oracle._first_query(surface, key, stated_in, shows)
        fresh = query not in tried and any(h.doc_id in stated_in for h in
                                           self.oracle.retriever.search(query, self.oracle.k, self.oracle.method))
        if not tried or (fresh and self.just_found(question, messages, state)):
            if not fresh:
                raise Drop("no_query")
            fields = {"need": need, "n": surface, "fact": state["facts"][-1] if state["facts"] else ""}
            thought = self.oracle.pick(T.NEXT if state["facts"] else T.START).format(**fields)
            return turn(cap(thought), "search", query=query)
        lines = last_search_lines(messages)
        query, thought = self.oracle._reformulate(self.world.entities[state["known"]], surface, key, lines,
                                                  stated_in, tried, need)
        return turn(thought, "search", query=query)

    def just_found(self, question: dict, messages: list[dict], state: dict) -> bool:
        """Did the last tool output show the previous hop's fact, so the next search starts a hop?"""
        if not state["facts"] or len(messages) < 2 or messages[-1]["role"] != "tool":
            return False
        return self.progress(question, messages[:-2])["hop"] != state["hop"]


def turn(thought: str, name: str, **arguments) -> dict:
    return {"role": "assistant", "content": thought,
            "tool_calls": [{"type": "function", "function": {"name": name, "arguments": arguments}}]}


def opened(messages: list[dict], doc: str) -> bool:
    """Did an earlier call find in or open this page?"""
    calls = [call["function"] for m in messages for call in m.get("tool_calls") or []]
    return any(c["name"] in ("find", "open") and (c.get("arguments") or {}).get("doc_id") == doc for c in calls)


def last_search_lines(messages: list[dict]) -> dict[str, str]:
    searches = [m for m in messages if m["role"] == "tool" and m.get("name") == "search"]
    return hit_lines(searches[-1]["content"]) if searches else {}


def verdict(expert: Expert, question: dict, messages: list[dict], at: int, before: dict) -> str:
    """How the agent's turn at `at` compares with the expert's move: "agree", or what went wrong."""
    own = messages[at]
    if not own.get("tool_calls"):
        if before["hop"] is not None:
            return "answered_early" if extract_answer(own.get("content") or "") is not None else "no_call"
        return "agree" if best_em(extract_answer(own.get("content") or "") or "", question["answers"]) else "misread"
    if before["hop"] is None:
        return "searched_on"
    output = messages[at + 1] if at + 1 < len(messages) and messages[at + 1]["role"] == "tool" else None
    if output is None:
        return "no_output"
    after = expert.progress(question, messages[:at + 2])
    advanced = after["hop"] is None or after["hop"] > before["hop"]
    listed = lambda state: {d for d in before["stated_in"] if d in state["read"]}
    return "agree" if advanced or listed(after) > listed(before) else "no_progress"


def turn_verdicts(expert: Expert, question: dict, messages: list[dict]) -> list[tuple[int, str]]:
    """(message index, verdict) for each assistant turn; "skipped_<reason>" where the expert has no state."""
    out = []
    for at, message in enumerate(messages):
        if message["role"] == "assistant":
            try:
                out.append((at, verdict(expert, question, messages, at, expert.progress(question, messages[:at]))))
            except Drop as reason:
                out.append((at, f"skipped_{reason}"))
    return out


def verdicts_of(expert: Expert, question: dict, messages: list[dict]) -> list[str]:
    """The verdicts of an episode's turns that the expert could judge (eval.expert_agreement)."""
    return [seen for _, seen in turn_verdicts(expert, question, messages) if not seen.startswith("skipped_")]


def correction_rows(expert: Expert, question: dict, episode: dict) -> tuple[list[dict], Counter]:
    """The rows for one episode and a count of its turns' verdicts (and of states without a move)."""
    messages, rows, counts = episode["messages"], [], Counter()
    for at, seen in turn_verdicts(expert, question, messages):
        counts[seen] += 1
        if seen == "agree" or seen.startswith("skipped_"):
            continue
        rng = random.Random(f"{expert.oracle.seed}-{question['id']}-correct-{at}")
        try:
            target = expert.move(question, messages[:at], rng)
        except Drop as reason:
            counts[f"skipped_{reason}"] += 1
            continue
        rows.append({"id": f"{question['id']}-fix{at}", "question_id": question["id"],
                     "messages": as_context(messages[:at]) + [target], "answers": question["answers"],
                     "hops": question.get("hops"), "type": question.get("type"), "pool": question.get("pool"),
                     "n_tool_calls": sum(bool(m.get("tool_calls")) for m in messages[:at]), "fixes": seen,
                     "origin": "correction"})
    return rows, counts


def build(episodes: list[dict], questions: dict, expert: Expert) -> tuple[list[dict], Counter]:
    rows, counts = [], Counter()
    for episode in episodes:
        question = questions.get(episode["id"])
        if question is None:
            raise UserError(f"episode {episode['id']} has no question in --questions; pass the file it was run on")
        if question.get("type") in PAIRED:
            counts["skipped_pair_question"] += 1
            continue
        new, seen = correction_rows(expert, question, episode)
        rows += new
        counts.update(seen)
    return rows, counts


def mixed(rows: list[dict], mix: str | None, seed: int) -> list[dict]:
    """The rows and as many trajectories drawn from `mix` (all of them where it holds fewer)."""
    if not mix:
        return rows
    pool = read_trajectories(mix)
    return rows + random.Random(seed).sample(pool, min(len(rows), len(pool)))


def read_episodes(path: Path) -> list[dict]:
    if not path.is_file():
        raise UserError(f"{path} does not exist; run the agent on train questions first (python -m agent.run ... --out DIR)")
    episodes = [row for _, row in iter_jsonl(path, "one agent.run episode {id, messages, ...} per line")]
    if not episodes or any("messages" not in e or "id" not in e for e in episodes):
        raise UserError(f"{path} holds no agent.run episodes with ids and messages; pass an agent.run predictions.jsonl")
    return episodes


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description="Correction rows from an agent's own episodes (see the module).")
    parser.add_argument("--episodes", required=True, help="an agent.run predictions.jsonl on train questions")
    parser.add_argument("--questions", required=True, help="the question file those episodes ran on")
    parser.add_argument("--world", default="runs/data/world", help="the world the questions were built from")
    parser.add_argument("--datastore", default="world")
    parser.add_argument("--k", type=int, default=3, help="hits per search, as the episodes ran (eval's k)")
    parser.add_argument("--method", default=None)
    parser.add_argument("--mix", default=None, help="trajectories to add as many of (e.g. the default SFT set)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True)
    return parser.parse_args(argv)


def main(argv=None) -> None:
    from datastore.retriever import Datastore

    args = parse_args(argv)
    episodes = read_episodes(Path(args.episodes))
    questions = {q["id"]: q for q in read_questions(args.questions)}
    held = sorted({q["split"] for q in questions.values() if q.get("split") and not q["split"].startswith("train")})
    if held:  # rows from evaluation questions would teach their answers to the model evaluated on them
        raise UserError(f"{args.questions} holds {', '.join(held)} questions; correction rows are training data: "
                        "pass a train split (train_sft or train_rl)")
    oracle = Oracle(WorldIndex(args.world), Datastore.load(args.datastore), args.k, args.method, args.seed)
    rows, counts = build(episodes, questions, Expert(oracle))
    if not rows:
        raise UserError(f"no correction rows from {args.episodes} (verdicts: {dict(counts)})")
    out_rows = mixed(rows, args.mix, args.seed)
    moves = Counter(r["messages"][-1]["tool_calls"][0]["function"]["name"] if r["messages"][-1].get("tool_calls")
                    else "answer" for r in rows)
    report = {"episodes": len(episodes), "corrections": len(rows), "mixed_in": len(out_rows) - len(rows),
              "verdicts": dict(counts.most_common()), "fixes": dict(Counter(r["fixes"] for r in rows).most_common()),
              "expert_moves": dict(moves.most_common())}
    inputs = {name: file_sha256(Path(getattr(args, name))) for name in ("episodes", "questions")}
    manifest = {"generator": "data.corrections", "config": vars(args), "inputs": inputs}
    with atomic_dir(Path(args.out)) as tmp:
        write_jsonl(tmp / "trajectories.jsonl", out_rows)
        atomic_write_json(tmp / "report.json", report)
        atomic_write_json(tmp / "manifest.json", manifest)
    print(f"wrote {len(rows)} correction rows (+{report['mixed_in']} mixed in) to {args.out}: {report}")


if __name__ == "__main__":
    cli_main(main)
