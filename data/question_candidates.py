"""Candidate questions from the synthetic world's fact graph (data/questions.py): the Graph, the
Cand record, the head-entity buckets, and the candidates of each question type (lookup,
hidden_fact, bridge, chain, inverse, comparison, yesno), before any filter or phrasing.

Separate from data/questions.py (filters, phrasing, splits and the command) so what can be asked
is read apart from which questions are kept and where they go.
"""
from __future__ import annotations

import hashlib
import json
import random
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from common.errors import UserError
from data import phrasings as P
from data.leakage import PAIRED, contains_path
from data.world_plan import YEAR_ATTRS

BUCKETS = (("train", 70), ("dev", 10), ("test", 10), ("heldout", 10))  # percent of heads
CAPS = {3: 12, 4: 8}  # chains kept per head entity at 3 and 4 hops (all 1-2 hop chains are kept)


class Graph:
    """The fact graph: entities by id, facts by (subject, relation), names, inverse edges."""

    def __init__(self, entities: list, facts: list):
        self.ents = {e["id"]: e for e in entities}
        self.fact = {(f["subject"], f["relation"]): f for f in facts}
        self.by_name, self.inverse = defaultdict(list), defaultdict(list)
        for e in entities:
            self.by_name[e["name"]].append(e["id"])
            for rel, obj in e["relations"].items():
                self.inverse[(obj, rel)].append(e["id"])

    @classmethod
    def load(cls, folder: Path) -> "Graph":
        rows = {}
        for name in ("entities", "facts"):
            path = Path(folder) / f"{name}.jsonl"
            if not path.exists():
                raise UserError(f"{path} not found; build the world first with `make world`")
            with open(path) as handle:
                try:
                    rows[name] = [json.loads(line) for line in handle]
                except json.JSONDecodeError as exc:
                    raise UserError(f"{path} has a corrupt line ({exc}); rebuild it with `make world`")
        return cls(rows["entities"], rows["facts"])

    def name(self, eid: str) -> str:
        return self.ents[eid]["name"]

    def mention(self, eid: str) -> str:
        """The name as a question uses it: events take "the" ("the Kelmar Summit")."""
        return ("the " if self.ents[eid]["type"] == "event" else "") + self.ents[eid]["name"]

    def type(self, eid: str) -> str:
        return self.ents[eid]["type"]

    def answers(self, eid: str) -> list:
        return entity_answers(self.ents[eid])


def entity_answers(entity: dict) -> list:
    """An entity's answer aliases, its name first."""
    return [entity["name"]] + [alias for alias in entity["aliases"] if alias != entity["name"]]


def value_answers(attr: str, value, surface: str) -> list:
    if attr in YEAR_ATTRS:
        return [surface, f"in {surface}"]
    if isinstance(value, int):
        return list(dict.fromkeys([surface, str(value)]))
    return [surface]


@dataclass
class Cand:
    type: str
    chain: tuple  # entity ids
    relations: tuple  # one per hop
    hops_q: tuple  # per hop: (entity searched for, fact key (subject, relation), kind own|hidden|inverse)
    spec: tuple  # how to phrase it
    answers: list | None  # None for comparisons until the phrasing fixes the direction
    answer_entity: str | None
    heads: tuple
    gold: list | None = None

    @property
    def hops(self) -> int:
        return len(self.relations)

    @property
    def hidden(self) -> bool:
        return any(kind == "hidden" for _, _, kind in self.hops_q)

    @property
    def key(self) -> tuple:
        chain = tuple(sorted(self.chain)) if self.type in PAIRED else self.chain
        return chain, self.relations

    def cell(self) -> tuple:
        if self.hops == 4:
            return ("chain", 4)
        if self.type in ("bridge", "chain") and contains_path(self.relations):
            return ("withheld", 0)
        return (self.type, self.hops)


# --- candidates ---------------------------------------------------------------------------
def bucket(seed: int, eid: str) -> str:
    h = int(hashlib.sha256(f"{seed}:{eid}".encode()).hexdigest()[:8], 16) % 100
    for name, share in BUCKETS:
        if h < share:
            return name
        h -= share
    return BUCKETS[-1][0]


def _paths(g: Graph, head: str, max_hops: int) -> list:
    """(chain, steps, subject types) of every forward path from head: relations, then one ask."""
    out = []

    def walk(eid, chain, steps, types):
        e = g.ents[eid]
        for attr in e["attrs"]:
            if P.has("ask", e["type"], attr):
                out.append((chain, steps + (attr,), types + (e["type"],)))
        for rel, obj in e["relations"].items():
            if obj in chain:
                continue
            if P.has("ask", e["type"], rel):
                out.append((chain + (obj,), steps + (rel,), types + (e["type"],)))
            if len(steps) + 2 <= max_hops and P.has("np", e["type"], rel):
                walk(obj, chain + (obj,), steps + (rel,), types + (e["type"],))

    walk(head, (head,), (), ())
    return out


def _chain_cand(g: Graph, chain: tuple, steps: tuple, types: tuple) -> Cand:
    hops_q = []
    for i, rel in enumerate(steps):
        fact = g.fact[(chain[i], rel)]
        hops_q.append((chain[i], (chain[i], rel), "own" if chain[i] in fact["stated_in"] else "hidden"))
    last = g.fact[(chain[len(steps) - 1], steps[-1])]
    if "object" in last:
        answers, entity = g.answers(last["object"]), last["object"]
    else:
        answers, entity = value_answers(steps[-1], last["value"], last["surface"]), None
    n = len(steps)
    kind = "bridge" if n == 2 else "chain" if n > 2 else \
        "hidden_fact" if hops_q[0][2] == "hidden" else "lookup"
    return Cand(kind, chain, steps, tuple(hops_q), ("chain", tuple(zip(types, steps))), answers,
                entity, (chain[0],))


def chain_candidates(g: Graph, seed: int) -> list:
    out = []
    for head in g.ents:
        where = bucket(seed, head)
        rng = random.Random(f"{seed}|{head}")
        by_hops = defaultdict(list)
        for chain, steps, types in _paths(g, head, 3 if where == "train" else 4):
            withheld = len(steps) < 4 and contains_path(steps)
            if withheld and where == "train":
                continue  # never asked in train: no need to make it
            by_hops["w" if withheld else len(steps)].append((chain, steps, types))
        for hops, paths in sorted(by_hops.items(), key=str):
            if hops in CAPS and len(paths) > CAPS[hops]:
                paths = rng.sample(paths, CAPS[hops])
            out.extend(_chain_cand(g, *p) for p in paths)
    return out


def inverse_candidates(g: Graph) -> list:
    out = []
    for (obj, rel), subjects in sorted(g.inverse.items()):
        for typ in sorted({g.type(s) for s in subjects}):
            if not P.has("inv", typ, rel):
                continue
            subj = next(s for s in subjects if g.type(s) == typ)
            hop = (obj, (subj, rel), "inverse")
            out.append(Cand("inverse", (obj, subj), (f"inv:{rel}",), (hop,), ("inv", typ, rel),
                            g.answers(subj), subj, (obj,)))
    return out


def pair_candidates(g: Graph, seed: int) -> list:
    """Comparisons and yes/no pairs, both entities from one bucket."""
    groups = defaultdict(list)
    for eid, e in g.ents.items():
        groups[(bucket(seed, eid), e["type"])].append(eid)
    out = []
    for (where, typ), ids in sorted(groups.items()):
        rng = random.Random(f"{seed}|pairs|{where}|{typ}")
        for key in [k for (kind, t, k) in P.TABLE if kind == "cmp" and t in (typ, "*")]:
            have = [i for i in ids if key in g.ents[i]["attrs"]]
            pairs = set()
            for _ in range(3):
                rng.shuffle(have)
                pairs.update(zip(have[0::2], have[1::2]))
            out.extend(_pair(g, "comparison", a, b, typ, key) for a, b in sorted(pairs))
        for key in [k for (kind, t, k) in P.TABLE if kind == "same" and t == typ]:
            have = [i for i in ids if key in g.ents[i]["relations"]]
            by_obj = defaultdict(list)
            for i in have:
                by_obj[g.ents[i]["relations"][key]].append(i)
            yes = {tuple(rng.sample(m, 2)) for m in by_obj.values() if len(m) > 1 for _ in range(2)}
            rng.shuffle(have)
            no = {(a, b) for a, b in zip(have[0::2], have[1::2])
                  if g.ents[a]["relations"][key] != g.ents[b]["relations"][key]}
            out.extend(_pair(g, "yesno", a, b, typ, key) for a, b in sorted(yes | no))
    return out


def _pair(g: Graph, kind: str, a: str, b: str, typ: str, key: str) -> Cand:
    hops = []
    for x in (a, b):
        fact = g.fact[(x, key)]
        hops.append((x, (x, key), "own" if x in fact["stated_in"] else "hidden"))
    if kind == "comparison":
        spec = ("cmp", typ, key, g.ents[a]["attrs"][key], g.ents[b]["attrs"][key])
        answers = None
    else:
        spec = ("same", typ, key)
        same = g.ents[a]["relations"][key] == g.ents[b]["relations"][key]
        answers = ["yes"] if same else ["no"]
    return Cand(kind, (a, b), (key, key), tuple(hops), spec, answers, None, (a, b))
