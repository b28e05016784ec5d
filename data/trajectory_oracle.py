"""The oracle behind `python -m data.trajectories` (oracle mode): it walks a question's facts in a
world with real tool calls, reformulating missed searches and reading with find/open until each
fact shows, or raises Drop(reason).

Separate from data/trajectories.py (the command: modes, replay checks, outputs) because this is
the one part that decides what an oracle trajectory says; its wording is data/trajectory_text.py.
API: WorldIndex(folder); Oracle(world, retriever).build(question) -> record, or raises Drop(reason).
"""
from __future__ import annotations

import json
import random
import re
from pathlib import Path

from agent.prompt import first_messages
from agent.tools import DEFAULT_K, SearchTools
from common.errors import UserError
from data import trajectory_text as T
from data.leakage import PAIRED
from data.world_plan import YEAR_ATTRS

HIT = re.compile(r"^\[([^\]]+)\] ", re.MULTILINE)


class Drop(Exception):
    """This question gets no oracle trajectory; the message is the counted reason."""


def visible(needle: str, text: str) -> bool:
    return bool(needle) and re.search(r"(?<!\w)" + re.escape(needle) + r"(?!\w)", text) is not None


def surface_in(entity: dict, text: str) -> str:
    """How the text names the entity (its name, an alias or its title), or raise Drop."""
    for surface in [entity["name"], *entity.get("aliases", []), entity["title"]]:
        if visible(surface, text):
            return surface
    raise Drop("entity_not_in_question")


def hit_lines(output: str) -> dict[str, str]:
    """doc_id -> its line in a search output (title and snippet), in rank order."""
    return {match.group(1): line for line in output.splitlines() if (match := HIT.match(line))}


def cap(sentence: str) -> str:
    return sentence[:1].upper() + sentence[1:]


def word_key(world: "WorldIndex", subject: str, relation: str) -> str:
    """The key of trajectory_text's word lists for a relation (a university lies in a city)."""
    is_uni = world.entities[subject]["type"] == "university"
    return "located_in_uni" if relation == "located_in" and is_uni else relation


class WorldIndex:
    """entities.jsonl and facts.jsonl of a world (data/world.py), keyed for the oracle."""

    def __init__(self, folder: Path):
        folder = Path(folder)
        for name in ("entities.jsonl", "facts.jsonl"):
            if not (folder / name).is_file():
                raise UserError(f"{folder / name} is missing; build the world: python -m data.world --out {folder}")
        with open(folder / "entities.jsonl") as entities, open(folder / "facts.jsonl") as facts:
            self.entities = {e["id"]: e for e in map(json.loads, entities)}
            self.facts = {(f["subject"], f["relation"]): f for f in map(json.loads, facts)}
        self.named: dict[str, list[str]] = {}  # name -> ids of the entities so named
        for entity in self.entities.values():
            self.named.setdefault(entity["name"], []).append(entity["id"])

    def target(self, subject: str, relation: str) -> tuple[str | None, str, list[str]]:
        """(object id or None, the object's name or the value as written, documents stating it)."""
        fact = self.facts.get((subject, relation))
        if fact is None:
            raise Drop("fact_missing")
        if "object" in fact:
            return fact["object"], self.entities[fact["object"]]["name"], fact["stated_in"]
        return None, fact["surface"], fact["stated_in"]


class Session:
    """One trajectory being written: each call is a thought, a real tool call and its output."""

    def __init__(self, question: dict, tools: SearchTools, max_tool_calls: int):
        self.messages = first_messages(question["question"], max_tool_calls)
        self.tools, self.recovered, self.opened, self.missed_find = tools, False, False, False
        self.need: str | None = None  # what the hop being read needs (the check_first turns restate it)
        self.read: dict[str, str] = {}  # doc id -> all the agent has read of it (search lines, pages, finds)
        self.hop_starts: list[tuple[dict, dict]] = []  # per later hop: (its first call's message, flags() before it)
        # per hop read off one search's snippet: where that output is and what it had to show (trajectory_misses.py)
        self.snippet_reads: list[dict] = []

    def flags(self) -> dict:
        """The trajectory record's flags for the walk so far."""
        return {"recovered": self.recovered or self.missed_find, "missed_find": self.missed_find, "opened": self.opened}

    def call(self, thought: str, name: str, **arguments) -> str:
        call = {"type": "function", "function": {"name": name, "arguments": arguments}}
        self.messages.append({"role": "assistant", "content": cap(thought), "tool_calls": [call]})
        output = self.tools._call(name, arguments)
        self.messages.append({"role": "tool", "name": name, "content": output})
        self.opened |= name in ("open", "find")
        pieces = hit_lines(output).items() if name == "search" else [(arguments.get("doc_id"), output)]
        for doc, text in pieces:
            self.read[doc] = self.read.get(doc, "") + "\n" + text
        return output


class Oracle:
    """max_tool_calls: the most calls one trajectory may make (agent.run's 8 turns leave 7 and the
    answer); prompt_tool_calls: the budget the system prompt states (as at evaluation).
    canonical: one wording per situation (the first template of each list) and one query style
    (name + the relation's first word), so what varies between trajectories is only the question
    and what the tools return; a small model then imitates one policy instead of a mixture.
    next_opener: a fixed word (e.g. "Found:") that opens every thought moving on to the next hop,
    before the fact just read. Greedy decoding picks a turn's first token, so the choice to move on
    is made there; the plain templates open with the fact itself (a name that differs per
    question), which splits that choice over many first tokens while the thoughts of a find or an
    open share a few ("I'll", "Let"), and those win.
    check_first: every turn after a tool output opens with a check, "Check <need>: <fact>." or
    "Check <need>: not shown.", before its thought or answer; the turn's first token is then always
    the same, and the choice between moving on and reading further follows the need restated and
    the evidence (a find in the entity's own page while a snippet already shows the fact is left
    out in this mode: its check would contradict the call). With p_repeat, the repeated turn keeps
    the check it was copied with.
    plan: a multi-hop chain question's first thought also names its later hops ("Then I need the
    birthplace of that person."), worded from a random stream of its own, so that everything else
    in the trajectory is what it is without the plan."""

    def __init__(self, world: WorldIndex, retriever, k: int = DEFAULT_K, method: str | None = None, seed: int = 0,
                 p_extra: float = 0.15, max_tool_calls: int = 7, prompt_tool_calls: int = 8,
                 p_question: float = 0.1, p_find_miss: float = 0.5, canonical: bool = False, p_repeat: float = 0.0,
                 next_opener: str | None = None, check_first: bool = False, plan: bool = False):
        self.world, self.retriever, self.k, self.method, self.seed = world, retriever, k, method, seed
        self.p_extra, self.p_question, self.p_find_miss = p_extra, p_question, p_find_miss
        self.max_tool_calls, self.prompt_tool_calls = max_tool_calls, prompt_tool_calls
        self.canonical, self.p_repeat, self.next_opener = canonical, p_repeat, next_opener
        self.check_first, self.plan = check_first, plan

    def build(self, question: dict) -> dict:
        """The trajectory record, or raise Drop(reason)."""
        return self._build(question)[0]

    def build_with_extras(self, question: dict, p_twin: float = 0.0, p_miss: float = 0.0) -> list[dict]:
        """[the trajectory, for a share p_twin of chain questions its first-hop twin
        (data/trajectory_twins.py), for a share p_miss of questions a missed-evidence row
        (data/trajectory_misses.py)], or raise Drop(reason). The trajectory is the one build() makes:
        the extras draw from random streams of their own."""
        from data.trajectory_misses import missed_evidence_row
        from data.trajectory_twins import first_hop_twin

        record, session = self._build(question)
        extras = [record]
        if p_twin > 0 and random.Random(f"{self.seed}-{question['id']}-twin").random() < p_twin:
            extras.append(first_hop_twin(self.world, question, record, session.hop_starts, self.prompt_tool_calls))
        rng = random.Random(f"{self.seed}-{question['id']}-miss")
        if p_miss > 0 and rng.random() < p_miss:
            extras.append(missed_evidence_row(self, record, session.snippet_reads, rng))
        return [row for row in extras if row]

    def _build(self, question: dict) -> tuple[dict, Session]:
        from eval.metrics import best_em

        for self.tight in (False, True):  # over the call budget: once more, saving calls
            self.rng = random.Random(f"{self.seed}-{question['id']}")
            self.extra = 0.0 if self.tight or self.canonical else self.p_extra
            session = Session(question, SearchTools(self.retriever, self.k, self.method), self.prompt_tool_calls)
            final, lead = self._walk(question, session)
            if session.tools.log.n_calls <= self.max_tool_calls:
                break
        else:
            raise Drop("over_call_budget")
        if not best_em(final, question["answers"]):
            raise Drop("answer_mismatch")
        repeated = session.tools.log.n_calls < self.max_tool_calls and self.rng.random() < self.p_repeat
        if repeated:
            self._repeat_a_call(session)
        session.messages.append({"role": "assistant", "content": f"{lead}<answer>{question['answers'][0]}</answer>"})
        return {"id": f"{question['id']}-oracle", "question_id": question["id"], "messages": session.messages,
                "answers": question["answers"], "hops": question.get("hops"), "type": question.get("type"),
                "pool": question.get("pool"), "n_tool_calls": session.tools.log.n_calls, **session.flags(),
                "repeated_call": repeated, "origin": "oracle"}, session

    def _repeat_a_call(self, session: Session) -> None:
        """Right after one call's output, make that call again: the tools refuse it, and the walk goes
        on as before. The repeat is marked "train": false (sft/data.py keeps it out of the loss), so
        the model learns what follows the refusal, never the repeat itself: its own loops are such
        repeats, and without an example it answers the refusal by repeating again."""
        calls = [i for i, m in enumerate(session.messages) if m.get("tool_calls")]
        at = calls[int(self.rng.random() * len(calls))]
        call = session.messages[at]["tool_calls"][0]["function"]
        refusal = session.tools._call(call["name"], dict(call["arguments"]))
        session.messages[at + 2:at + 2] = [{**session.messages[at], "train": False},
                                           {"role": "tool", "name": call["name"], "content": refusal}]

    # ---- question types ------------------------------------------------------------------------
    def _walk(self, question: dict, session: Session) -> tuple[str, str]:
        """Read every hop; (what the last one found, text before the answer tag)."""
        chain, relations = question.get("chain") or [], question.get("relations") or []
        gold = question.get("gold_doc_ids") or []
        if not chain or not relations:
            raise Drop("no_chain")
        if question.get("type") in PAIRED:
            return self._pair(question, session, chain, relations[0], gold)
        known, surface, fact = chain[0], self._surface_in_question(chain[0], question["question"]), None
        plan = self._plan(question["id"], chain, relations) if self.plan else ""
        for hop, relation in enumerate(relations):
            target_id, target, stated_in, key = self._hop(chain, hop, known, relation)
            need = self.pick(T.NEED[key]).format(n=surface)
            if fact is None:
                thought = self.pick(T.START).format(need=need, n=surface)
            else:
                thought = self.checked(session, self.moving_on(T.NEXT, T.NEXT_AFTER_OPENER, fact=fact, need=need,
                                                               n=surface), fact)
            new = T.FACT[key].format(n=surface, o=target)
            if self._known(session, known, surface, target, stated_in):  # an earlier output showed it
                fact = f"{fact}; {self.pick(T.ALREADY).format(fact=new)}"
            else:
                at, flags = len(session.messages), session.flags()
                self._read(session, known, surface, key, target, stated_in, gold[hop:hop + 1], thought, need,
                           question["question"] if hop == 0 else None, plan if hop == 0 else "")
                if hop:
                    session.hop_starts.append((session.messages[at], flags))
                fact = None if hop + 1 == len(relations) else new
            if target_id is None and hop + 1 < len(relations):
                raise Drop("attribute_mid_chain")
            known, surface = target_id, target
        if self.check_first:
            return target, self.checked(session, "", fact or new)
        return target, f"{cap(fact)}. " if fact else ""

    def _plan(self, question_id: str, chain: list, relations: list) -> str:
        """The plan sentence, ' Then I need <the second hop's need>, then <the third's>.', for a
        multi-hop question; "" for one hop, or where the chain is broken (the walk then drops the
        question itself). A wording missing from T.NEED or T.THAT raises its KeyError, as in the walk."""
        rng, later = random.Random(f"{self.seed}-{question_id}-plan"), []
        try:
            for hop in range(1, len(relations)):
                key = self._hop(chain, hop, chain[hop], relations[hop])[3]
                later.append(self.pick(T.NEED[key], rng).format(n=T.THAT[self.world.entities[chain[hop]]["type"]]))
        except (Drop, IndexError):
            return ""
        return f" {self.pick(T.PLAN, rng).format(need=', then '.join(later))}" if later else ""

    def _hop(self, chain: list, hop: int, known: str, relation: str) -> tuple:
        """(the entity read next, or None for a value; its surface; pages stating it; wording key)."""
        if relation.startswith("inv:"):  # the known entity is the object; the subject is asked for
            rel = relation[4:]
            subject = chain[hop + 1] if hop + 1 < len(chain) else None
            fact = self.world.facts.get((subject, rel))
            if fact is None or fact.get("object") != known:
                raise Drop("chain_mismatch")
            return subject, self.world.entities[subject]["name"], fact["stated_in"], "inv:" + self._key(subject, rel)
        target_id, target, stated_in = self.world.target(known, relation)
        if target_id is not None and hop + 1 < len(chain) and chain[hop + 1] != target_id:
            raise Drop("chain_mismatch")
        return target_id, target, stated_in, self._key(known, relation)

    def _pair(self, question: dict, session: Session, chain: list, relation: str, gold: list) -> tuple[str, str]:
        """Comparison (one attribute of A and of B) or yes/no (do A and B share a relation's object)."""
        from eval.metrics import best_em

        if len(chain) != 2:
            raise Drop("pair_needs_two_entities")
        names = [self._surface_in_question(e, question["question"]) for e in chain]
        noun = T.ATTR_NOUN[self._key(chain[0], relation)]
        facts, found = [], []
        for i, entity in enumerate(chain):
            target_id, target, stated_in = self.world.target(entity, relation)
            key = self._key(entity, relation)
            need = self.pick(T.NEED[key]).format(n=names[i])
            if i == 0:
                thought = self.pick(T.COMPARE_START).format(attr=noun, a=names[0], b=names[1], need=need)
            else:
                thought = self.checked(session, self.moving_on(T.COMPARE_NEXT, T.COMPARE_NEXT_AFTER_OPENER,
                                                               fact=facts[0], need=need, b=names[1]), facts[0])
            read = not (i and self._known(session, entity, names[i], target, stated_in))
            if read:
                self._read(session, entity, names[i], key, target, stated_in, gold[i:i + 1], thought, need)
            facts.append(T.FACT[key].format(n=names[i], o=target))
            found.append(target_id or self.world.facts[(entity, relation)]["value"])
        lead = cap(self.pick(T.PAIR_END).format(fa=facts[0], fb=facts[1]))
        lead = self.checked(session, lead, facts[1] if read else "; ".join(facts))
        if question["type"] == "yesno":
            same = found[0] == found[1]
            return ("yes" if same else "no"), f"{lead} {self.pick(T.SAME if same else T.DIFFERENT)} "
        answer = question["answers"][0]  # which end (min or max) is asked is in the wording
        won = [i for i, e in enumerate(chain)
               if best_em(answer, [names[i], self.world.entities[e]["name"], *self.world.entities[e]["aliases"]])]
        if len(won) != 1 or found[0] == found[1]:
            raise Drop("answer_mismatch" if len(won) != 1 else "comparison_tie")
        low = found[won[0]] < found[1 - won[0]]
        adj = ("earlier" if low else "later") if relation in YEAR_ATTRS else ("smaller" if low else "larger")
        return answer, f"{lead} {self.pick(T.WINNER).format(a=names[won[0]], adj=adj, noun=noun[4:])} "

    # ---- one hop: search (again, on a miss), then make the fact visible ---------------------------
    def _read(self, session: Session, known: str, surface: str, key: str, target: str, stated_in: list,
              gold: list, thought: str, need: str, question: str | None = None, plan: str = "") -> None:
        """Find a page stating the fact that links the `known` entity (the one the agent can name)
        to `target`, and read until the target shows. On a first hop the whole `question` is now
        and then the first query (a common habit that often misses); `plan` ends its first thought."""
        entity, queries = self.world.entities[known], []
        shows, session.need = self._shows(known, surface, target), need
        query = self._first_query(surface, key, stated_in, shows)
        if question and not (self.tight or self.canonical) and self.rng.random() < self.p_question:
            query, thought = question, self.pick(T.START_QUESTION)
        thought += plan
        for attempt in range(3):
            queries.append(query)
            lines = hit_lines(session.call(thought, "search", query=query))
            found = [d for d in lines if d in stated_in]
            seen = any(shows(d, lines[d]) for d in found)
            missed = attempt == 0 and self._find_miss(session, known, key, target, stated_in, lines, need, seen)
            session.missed_find |= missed
            if found:
                session.recovered |= attempt > 0
                doc = min(found, key=lambda d: (not shows(d, lines[d]), d not in gold, d != known))
                fact, output_at = T.FACT[key].format(n=surface, o=target), len(session.messages) - 1
                self._fact_in(session, doc, lines[doc], known, surface, key, need, fact, shows, missed)
                if not missed and len(session.messages) == output_at + 1:  # the snippet was all it read
                    session.snippet_reads.append({"output": session.messages[output_at], "known": known,
                                                  "surface": surface, "key": key, "stated_in": list(stated_in),
                                                  "need": need})
                return
            query, thought = self._reformulate(entity, surface, key, lines, stated_in, queries, need)
            if missed:
                thought = self.pick(T.FIND_MISS_SEARCH).format(own=known, need=need, n=surface)
            thought = self.checked(session, thought)
        raise Drop("search_miss")

    def _find_miss(self, session: Session, known: str, key: str, target: str, stated_in: list, lines: dict,
                   need: str, seen: bool) -> bool:
        """Now and then look for the fact in the known entity's own page when only other pages state
        it: the find shows nothing useful, and the next thought says so and reads elsewhere. The
        model's own habit is this find; without such examples it repeats it instead of moving on."""
        if known not in lines or known in stated_in or self.tight or self.rng.random() >= self.p_find_miss:
            return False
        texts = self._find_texts(key)
        self.shuffle(texts)
        # a miss shows sentences of the page (a "no sentence matches" reply would be a wasted call)
        miss = self._first_find(known, texts, lambda text: text and not visible(target, text))
        if miss is None or (self.check_first and seen):  # seen: a snippet shows it (draws so far as without)
            return False
        thought = self.checked(session, self.pick(T.FIND_NEEDED).format(need=need, d=known, t=miss))
        session.call(thought, "find", doc_id=known, text=miss)
        return True

    def _known(self, session: Session, known: str, surface: str, target: str, stated_in: list) -> bool:
        """Has an earlier tool output (a page, a find, a snippet) already shown this fact?"""
        shows = self._shows(known, surface, target)
        return any(shows(d, session.read[d]) for d in stated_in if d in session.read)

    def _shows(self, known: str, surface: str, target: str):
        """shows(doc, line, text=None): is the fact visible in `text` (default: the search line) read
        from `doc`? On the known entity's own page the target must show; on another page the known
        entity's name must show, and the target in the text or in the page's title."""
        name = self.world.entities[known]["name"]

        def shows(doc: str, line: str, text: str | None = None) -> bool:
            seen = line if text is None else text
            if doc == known:
                return visible(target, seen)
            return (visible(name, seen) or visible(surface, seen)) and visible(target, line + "\n" + seen)
        return shows

    def _first_query(self, surface: str, key: str, stated_in: list, shows) -> str:
        """A query in one of several styles; when the budget is tight, one whose snippet shows the fact."""
        words, asks = T.REL_WORDS[key], T.QUESTION_QUERIES[key]
        if self.tight:
            for query in [f"{surface} {w}" for w in words] + [q.format(n=surface) for q in asks]:
                if any(h.doc_id in stated_in and shows(h.doc_id, f"[{h.doc_id}] {h.title}: {h.snippet}")
                       for h in self.retriever.search(query, self.k, self.method)):
                    return query
        if self.canonical:
            return f"{surface} {words[0]}"
        x = self.rng.random()
        if x < 0.3:
            return surface
        if x < 0.75:
            word = self.pick(words)
            return f"{surface} {word}" if self.rng.random() < 0.7 else f"{word} {surface}"
        return self.pick(asks).format(n=surface)

    def _reformulate(self, entity: dict, surface: str, key: str, lines: dict, stated_in: list,
                     tried: list, need: str) -> tuple[str, str]:
        """The next query (one that finds a page stating the fact) and a thought saying why."""
        noun = T.NOUN.get(entity["type"])
        words = {w.lower() for w in re.findall(r"\w+", entity["name"]) if len(w) > 3}
        if entity["id"] in lines:  # its own page came up but does not state the fact
            kind, extra = "silent", [f"{surface} {w}" for w in T.INVERSE_WORDS.get(key, [])]
        elif any(d in entity.get("confusable_with", []) or words & set(re.findall(r"\w+", line.lower()))
                 for d, line in lines.items()):
            kind, extra = "other", [f"{surface} {noun}", f"{surface} {noun} {T.REL_WORDS[key][0]}"] if noun else []
        else:
            kind, extra = "none", []
        candidates = extra + [f"{surface} {w}" for w in T.REL_WORDS[key]]
        candidates += [q.format(n=surface) for q in T.QUESTION_QUERIES[key]]
        if any(f"] {entity['name']} (" in line for line in lines.values()):  # titles with qualifiers seen
            candidates.append(entity["title"])
        for query in dict.fromkeys(candidates):
            if query not in tried and any(h.doc_id in stated_in for h in self.retriever.search(query, self.k, self.method)):
                break
        else:
            raise Drop("search_miss")
        if kind == "other" and noun and noun in query:
            return query, self.pick(T.MISS_OTHER).format(n=surface, noun=noun)
        if kind == "silent":
            return query, self.pick(T.MISS_SILENT).format(n=surface, need=need)
        return query, self.pick(T.MISS_NONE).format(n=surface)

    def _fact_in(self, session: Session, doc: str, line: str, known: str, surface: str, key: str,
                 need: str, fact: str, shows, after_miss: bool = False) -> None:
        """Make the fact visible in what the agent read: the snippet, a find, or opened pages.
        After a find that missed in the known entity's own page (`after_miss`), always read `doc`."""
        seen = shows(doc, line)
        if seen and not after_miss and self.rng.random() >= self.extra:
            return
        shown = fact if seen and not after_miss else None  # what the check of each thought below reports
        # on its own page: the page's words, or the asker's ones (find also ranks by meaning)
        texts = self._find_texts(key) if doc == known else [self.world.entities[known]["name"]]
        self.shuffle(texts)
        good = self._first_find(doc, texts, lambda text: shows(doc, line, text))
        if good is not None and (after_miss or self.canonical or self.rng.random() < 0.5):
            thoughts = T.FIND_MISS_OTHER if after_miss else T.FIND_EXTRA if seen else T.FIND_NEEDED
            thought = self.checked(session, self.pick(thoughts).format(need=need, d=doc, t=good, n=surface, own=known),
                                   shown)
            if shows(doc, line, session.call(thought, "find", doc_id=doc, text=good)):
                return
        thoughts = T.OPEN_MISS_OTHER if after_miss and good is None else T.OPEN_EXTRA if seen else T.OPEN_NEEDED
        thought = self.checked(session, self.pick(thoughts).format(need=need, d=doc, n=surface, own=known), shown)
        page = 1
        while True:
            output = session.call(thought, "open", **({"doc_id": doc} if page == 1 else {"doc_id": doc, "page": page}))
            if shows(doc, line, output):
                return
            pages = re.search(r"\(page \d+ of (\d+)\)", output.split("\n", 1)[0])
            if not pages or page >= int(pages.group(1)):
                raise Drop("fact_not_visible")
            page += 1
            thought = self.checked(session, self.pick(T.NEXT_PAGE).format(p0=page - 1, p=page), shown)

    # ---- helpers -------------------------------------------------------------------------------
    @staticmethod
    def _find_texts(key: str) -> list[str]:
        """Words to find a relation's sentence with in a page: the page's words, then the asker's."""
        return list(dict.fromkeys(T.FIND_WORDS.get(key, []) + T.REL_WORDS[key]))

    def _first_find(self, doc: str, texts: list[str], wanted) -> str | None:
        """The first text whose find output in `doc` is `wanted` (finds run only until one is)."""
        return next((t for t in texts if wanted("\n".join(self.retriever.find(doc, t)))), None)

    def _key(self, subject: str, relation: str) -> str:
        return word_key(self.world, subject, relation)

    def _surface_in_question(self, entity_id: str, text: str) -> str:
        return surface_in(self.world.entities[entity_id], text)

    def moving_on(self, plain: list[str], after_opener: list[str], **fields) -> str:
        """The thought before the next hop's first call: with next_opener, that word and then a
        template opening with the fact."""
        if not self.next_opener:
            return self.pick(plain).format(**fields)
        return f"{self.next_opener} {self.pick(after_opener).format(**fields)}"

    def checked(self, session: Session, thought: str, fact: str | None = None) -> str:
        """With check_first, a turn after a tool output opens with the check of the hop being read:
        its need and the fact, or T.NOT_SHOWN while no output has shown it."""
        if not self.check_first or session.need is None:
            return thought
        return f"{T.CHECK.format(need=session.need, fact=fact or T.NOT_SHOWN)} {cap(thought)}"

    def pick(self, options: list, rng: random.Random | None = None):
        """One of the options: the first in canonical wording, else drawn from `rng` (the walk's own
        stream unless a part of the trajectory draws from a stream of its own)."""
        return options[0] if self.canonical else options[int((rng or self.rng).random() * len(options))]

    def shuffle(self, options: list) -> None:
        if not self.canonical:
            self.rng.shuffle(options)
