"""Multi-hop questions synthesized from the synthetic world's fact graph, with leak-free splits.

    python -m data.questions --world runs/data/world --datastore world --out runs/data/world/questions --seed 0 [--train-sft 3000 --train-rl 3000 --eval 500]

Writes into --out, atomically (skipped when its manifest matches the inputs and config):
{train_sft,train_rl,dev,test,test_heldout,test_ood}.jsonl, report.json, report.md, manifest.json.
A record: {id, question, answers (aliases), hops, type, gold_doc_ids (one per hop, in order; a
fact stated only on another entity's page points there), split, source: "world", pool (sft|rl|
heldout), template (phrasing ids joined by "+"), relations (one per hop; "inv:r" = backwards),
chain (entity ids), answer_entity (id or null), hidden_fact, in_sft_dist (sft pool, <= 2 hops)}.
Types: lookup, hidden_fact (the fact is only on another entity's page), inverse ("Which company
did X found?"), bridge (2 hops), chain (3-4 hops), comparison, yesno. Phrasings: data/phrasings.py.
Filters (counted in the report): non_unique (a same-named entity or a second answer or a tie),
answer_in_question (an alias inside the names or the text), not_retrievable (a hop's gold
document is not in the top 5 when searching the hop's entity by name with the datastore's default
method; a hop whose fact sits on another page may add a relation word: "X founder").
Splits: chain heads are bucketed by a hash of (seed, entity id) into train/dev/test/heldout, so
eval questions start at entities no train question starts at. train_sft: sft pool, 1-2 hops and
comparisons; train_rl, dev, test: sft + rl pools, 1-3 hops; test_heldout: heldout pool, 1-3 hops;
test_ood: 4 hops and the paths of data.leakage.WITHHELD_PATHS (in no train split).
API: build(world, datastore, out, QuestionConfig(...)); synthesize(Graph.load(world), Searcher(store),
cfg) -> (splits, report); check_leakage(splits) (data.leakage, with the retrieval checks).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass
from itertools import zip_longest
from pathlib import Path

from common.errors import UserError, cli_main
from common.io import (atomic_dir, atomic_write_json, atomic_write_text, config_hash, file_sha256,
                       read_manifest, write_jsonl)
from common.paths import runs_dir
from data import phrasings as P
from data.leakage import (K, PAIRED, WITHHELD_PATHS, Searcher, check_leakage, contains_path, count_table,
                          drop_table, name_search_by_entity_type, question_search_rates, render_report,
                          retrieve)
from data.world import YEAR_ATTRS
from eval.metrics import normalize_answer

VERSION = "questions-1"
SPLITS = ("train_sft", "train_rl", "dev", "test", "test_heldout", "test_ood")
BUCKETS = (("train", 70), ("dev", 10), ("test", 10), ("heldout", 10))  # percent of heads
SPLIT_BUCKETS = {"train_sft": ("train",), "train_rl": ("train",), "dev": ("dev",), "test": ("test",),
                 "test_heldout": ("heldout",), "test_ood": ("dev", "test", "heldout")}
_WIDE = {("lookup", 1): .14, ("hidden_fact", 1): .05, ("inverse", 1): .05, ("bridge", 2): .28,
         ("chain", 3): .28, ("comparison", 2): .10, ("yesno", 2): .10}
MIX = {"train_sft": {("lookup", 1): .30, ("hidden_fact", 1): .06, ("inverse", 1): .06,
                     ("bridge", 2): .38, ("comparison", 2): .10, ("yesno", 2): .10},
       "train_rl": _WIDE, "dev": _WIDE, "test": _WIDE, "test_heldout": _WIDE,
       "test_ood": {("chain", 4): .5, ("withheld", 0): .5}}
POOL_MIX = {"train_sft": {"sft": 1.0}, "train_rl": {"sft": .5, "rl": .5}, "dev": {"sft": .5, "rl": .5},
            "test": {"sft": .5, "rl": .5}, "test_heldout": {"heldout": 1.0},
            "test_ood": {"sft": .5, "rl": .5}}
CAPS = {3: 12, 4: 8}  # chains kept per head entity at 3 and 4 hops (all 1-2 hop chains are kept)


@dataclass
class QuestionConfig:
    seed: int = 0
    train_sft: int = 3000
    train_rl: int = 3000
    eval: int = 500
    qtext_sample: int = 200  # candidates per type whose question text is searched (report only)

    def sizes(self) -> dict:
        return {"train_sft": self.train_sft, "train_rl": self.train_rl,
                **{s: self.eval for s in SPLITS[2:]}}


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
        e = self.ents[eid]
        return [e["name"]] + [a for a in e["aliases"] if a != e["name"]]


def value_answers(attr: str, value, surface: str) -> list:
    if attr in YEAR_ATTRS:
        return [surface, f"in {surface}"]
    if isinstance(value, int):
        return list(dict.fromkeys([surface, str(value)]))
    return [surface]


def answer_in_question(text: str, answers: list) -> bool:
    """Some answer alias occurs in the text as whole words, after normalization."""
    norm = f" {normalize_answer(text)} "
    return any(a and f" {a} " in norm for a in map(normalize_answer, answers))


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


# --- filters ------------------------------------------------------------------------------
def _walk(g: Graph, eid: str, steps: tuple):
    for i, step in enumerate(steps):
        e = g.ents[eid]
        if i == len(steps) - 1:
            if step in e["relations"]:
                return normalize_answer(g.name(e["relations"][step]))
            return e["attrs"].get(step)
        if step not in e["relations"]:
            return None
        eid = e["relations"][step]
    return None


def is_unique(g: Graph, c: Cand) -> bool:
    """Exactly one answer in the world, whichever same-named entity the question means."""
    if c.type == "inverse":
        _, typ, rel = c.spec
        obj_name = g.name(c.chain[0])
        subjects = {s for o in g.by_name[obj_name] for s in g.inverse[(o, rel)] if g.type(s) == typ}
        return len(subjects) == 1
    steps = c.relations[:1] if c.type in PAIRED else c.relations
    for head in c.heads:
        found = {_walk(g, h, steps) for h in g.by_name[g.name(head)]} - {None}
        if len(found) > 1:
            return False
    return c.type != "comparison" or c.spec[3] != c.spec[4]


def answer_in_names(g: Graph, c: Cand) -> bool:
    """The answer shows in the names the question must use (checked again on the final text)."""
    if c.type == "yesno":
        return False
    if c.type == "comparison":
        a, b = c.chain
        return answer_in_question(g.name(b), g.answers(a)) or answer_in_question(g.name(a), g.answers(b))
    return answer_in_question(g.name(c.heads[0]), c.answers)


# --- phrasing and splits ------------------------------------------------------------------
def phrase(g: Graph, c: Cand, pool: str, rng: random.Random) -> tuple:
    """(question, template id, answers, answer entity) in one pool's wording."""
    names = [g.mention(e) for e in (c.chain[:2] if c.type in PAIRED else c.chain[:1])]
    text, tid, direction = P.render(rng, pool, c.spec, names)
    if c.type != "comparison":
        return text, tid, c.answers, c.answer_entity
    (a, b), (va, vb) = c.chain, c.spec[3:5]
    winner = a if (va < vb) == (direction == "min") else b
    return text, tid, g.answers(winner), winner


def _quotas(total: int, shares: dict) -> dict:
    """Largest-remainder rounding of total * share, so the quotas sum to total."""
    raw = {k: total * v / sum(shares.values()) for k, v in shares.items()}
    out = {k: int(v) for k, v in raw.items()}
    for k in sorted(raw, key=lambda k: (out[k] - raw[k], str(k)))[:total - sum(out.values())]:
        out[k] += 1
    return out


def _round_robin(cands: list, rng: random.Random, by_answer: bool = True):
    """Candidates alternating over relation paths (yes/no: over answers, then paths)."""
    if by_answer and cands and cands[0].type == "yesno":
        streams = [_round_robin([c for c in cands if c.answers == [a]], rng, False) for a in ("yes", "no")]
        for pair in zip_longest(*streams):
            yield from (c for c in pair if c is not None)
        return
    groups = defaultdict(list)
    for c in cands:
        groups[c.spec[:3] if c.type in PAIRED else c.relations].append(c)
    order = [groups[k] for k in sorted(groups, key=str)]
    rng.shuffle(order)
    for group in order:
        rng.shuffle(group)
    for i in range(max(map(len, order), default=0)):
        for group in order:
            if i < len(group):
                yield group[i]


def make_split(g: Graph, split: str, n: int, pool_cands: dict, used: set, seed: int, drops: Counter) -> list:
    rng = random.Random(f"{seed}|{split}")
    rows = []
    for cell, quota in sorted(_quotas(n, MIX[split]).items()):
        if not quota:
            continue
        pools = [p for p, k in _quotas(quota, POOL_MIX[split]).items() for _ in range(k)]
        rng.shuffle(pools)
        available = [c for c in pool_cands.get(cell, []) if c.key not in used]
        got = []
        for c in _round_robin(available, rng):
            if len(got) == quota:
                break
            text, tid, answers, entity = phrase(g, c, pools[len(got)], rng)
            if c.type not in PAIRED and answer_in_question(text, answers):
                drops[(c.type, "answer_in_question_text")] += 1
                continue
            used.add(c.key)
            got.append((c, text, tid, answers, entity, pools[len(got)]))
        if len(got) < quota:  # candidates grow about linearly with the world's size
            docs = -(-int(1.3 * len(g.ents) * quota / max(len(got), 1)) // 1000) * 1000
            raise UserError(
                f"split {split} needs {quota} {cell[0]} questions ({cell[1] or '2-3'} hops) but only "
                f"{len(got)} about its own entities pass the filters; build a bigger world (python -m "
                f"data.world --docs {docs}) or ask for fewer (--eval / --train-sft / --train-rl)")
        rows.extend(got)
    rng.shuffle(rows)
    return [{"id": f"world-{split}-{i:05d}", "question": text, "answers": answers, "hops": c.hops,
             "type": c.type, "gold_doc_ids": list(c.gold), "split": split, "source": "world",
             "pool": pool, "template": tid, "relations": list(c.relations), "chain": list(c.chain),
             "answer_entity": entity, "hidden_fact": c.hidden,
             "in_sft_dist": pool == "sft" and c.hops <= 2 and c.cell()[0] != "withheld"}
            for i, (c, text, tid, answers, entity, pool) in enumerate(rows)]


def synthesize(g: Graph, searcher: Searcher, cfg: QuestionConfig, progress: bool = True) -> tuple:
    """(splits {name: [records]}, report dict)."""
    say = (lambda msg: print(msg, file=sys.stderr)) if progress else (lambda msg: None)
    timing, t0 = {}, time.perf_counter()
    say(f"questions: walking the fact graph of {len(g.ents):,} entities...")
    cands = chain_candidates(g, cfg.seed) + inverse_candidates(g) + pair_candidates(g, cfg.seed)
    timing["candidates_s"] = round(time.perf_counter() - t0, 2)
    t = time.perf_counter()
    report = {"candidates": dict(Counter(c.type for c in cands))}
    report["retrieval"] = {"k": searcher.k, "method": searcher.method,
                           "entity_name": name_search_by_entity_type(g, searcher),
                           "hop_name_search": retrieve(g, searcher, cands)}
    if cfg.qtext_sample:
        report["retrieval"]["question_text_first_search"] = question_search_rates(
            g, searcher, cands, phrase, cfg.qtext_sample, cfg.seed)
    timing["retrieval_s"] = round(time.perf_counter() - t, 2)
    drops, kept = Counter(), []
    for c in cands:
        reason = ("non_unique" if not is_unique(g, c) else "answer_in_question" if answer_in_names(g, c)
                  else "not_retrievable" if c.gold is None else None)
        if reason:
            drops[(c.type, reason)] += 1
        else:
            kept.append(c)
    say(f"questions: {len(cands):,} candidates, {len(kept):,} pass the filters")
    cells = defaultdict(lambda: defaultdict(list))  # bucket -> cell -> candidates
    for c in kept:
        where = {bucket(cfg.seed, h) for h in c.heads}
        if len(where) == 1:
            cells[where.pop()][c.cell()].append(c)
    splits, used = {}, set()
    for split, n in cfg.sizes().items():
        pool_cands = defaultdict(list)
        for where in SPLIT_BUCKETS[split]:
            for cell, cs in cells[where].items():
                pool_cands[cell].extend(cs)
        splits[split] = make_split(g, split, n, pool_cands, used, cfg.seed, drops)
        say(f"questions: {split}: {len(splits[split])}")
    timing["total_s"] = round(time.perf_counter() - t0, 2)
    report["filters"] = drop_table(report["candidates"], drops)
    report["counts"] = count_table(splits)
    report["leakage"] = check_leakage(splits)
    report["seconds"] = timing
    return splits, report


# --- the command --------------------------------------------------------------------------
def _inputs(world: Path, store) -> dict:
    manifest = read_manifest(world)
    if manifest is None:
        raise UserError(f"no world at {world} (manifest.json missing); build it with `make world`")
    corpus = [i.get("sha256") for i in store.manifest.get("inputs", [])]
    if manifest.get("corpus_sha256") not in corpus:
        raise UserError(f"datastore {store.name} was not built from the corpus of {world}; "
                        f"rebuild it with `make datastore` (or pass --datastore for this world)")
    return {"world_corpus_sha256": manifest["corpus_sha256"],
            "entities_sha256": file_sha256(world / "entities.jsonl"),
            "facts_sha256": file_sha256(world / "facts.jsonl"),
            "datastore": store.name, "datastore_retrievers": store.retrievers}


def _config(cfg: QuestionConfig, method: str) -> dict:
    return {"version": VERSION, **asdict(cfg), "method": method, "k": K,
            "phrasings": P.FINGERPRINT, "withheld_paths": [list(p) for p in WITHHELD_PATHS],
            "buckets": dict(BUCKETS), "mix": {s: {f"{t}/{h}": v for (t, h), v in m.items()} for s, m in MIX.items()},
            "pool_mix": POOL_MIX, "caps": CAPS}


def build(world: Path, datastore: str, out: Path, cfg: QuestionConfig, method: str | None = None,
          force: bool = False, progress: bool = True) -> dict:
    """Synthesize the splits into `out` (atomically) unless its manifest matches; return the manifest."""
    from datastore.retriever import Datastore

    start = time.perf_counter()
    world, out = Path(world), Path(out)
    store = Datastore.load(datastore)
    searcher = Searcher(store, method, progress=progress)
    inputs, config = _inputs(world, store), _config(cfg, searcher.method)
    old = read_manifest(out)
    if not force and old and old.get("inputs") == inputs and old.get("config_hash") == config_hash(config):
        print(f"questions at {out} are up to date; --force rebuilds them")
        return old
    splits, report = synthesize(Graph.load(world), searcher, cfg, progress)
    leak = report["leakage"]
    if leak["problems"]:
        raise UserError("leakage check failed, nothing written: " + "; ".join(leak["problems"]))
    report["config"] = config
    report["seconds"]["wall_s"] = round(time.perf_counter() - start, 2)
    manifest = {"generator": "data.questions", "inputs": inputs, "config": config,
                "config_hash": config_hash(config), "counts": report["counts"]["total"],
                "leakage": {"counts": leak["counts"], "problems": leak["problems"]},
                "withheld_paths": config["withheld_paths"],
                "pool_mix": report["counts"]["by_pool"], "in_sft_dist": report["counts"]["in_sft_dist"],
                "files": [f"{s}.jsonl" for s in SPLITS] + ["report.json", "report.md", "manifest.json"]}
    with atomic_dir(out) as tmp:
        for split, rows in splits.items():
            write_jsonl(tmp / f"{split}.jsonl", rows)
        atomic_write_json(tmp / "report.json", report)
        atomic_write_text(tmp / "report.md", render_report(report))
        atomic_write_json(tmp / "manifest.json", manifest)
    print(f"wrote {sum(map(len, splits.values())):,} questions to {out} in {report['seconds']['wall_s']} s "
          f"({', '.join(f'{s} {len(r)}' for s, r in splits.items())})")
    return manifest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--world", type=Path, default=runs_dir() / "data" / "world")
    parser.add_argument("--datastore", default="world", help="datastore name or folder, built from the world's corpus")
    parser.add_argument("--out", type=Path, help="default: <world>/questions")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train-sft", type=int, default=3000)
    parser.add_argument("--train-rl", type=int, default=3000)
    parser.add_argument("--eval", type=int, default=500, help="size of dev, test, test_heldout and test_ood each")
    parser.add_argument("--method", choices=["bm25", "dense", "hybrid"], help="default: the datastore's default")
    parser.add_argument("--qtext-sample", type=int, default=200, help="questions per type searched by their text (report)")
    parser.add_argument("--force", action="store_true", help="rebuild even if up to date")
    args = parser.parse_args()
    if min(args.train_sft, args.train_rl, args.eval) < 1:
        raise UserError("--train-sft, --train-rl and --eval must be at least 1")
    cfg = QuestionConfig(args.seed, args.train_sft, args.train_rl, args.eval, args.qtext_sample)
    build(args.world, args.datastore, args.out or args.world / "questions", cfg, args.method, args.force)


if __name__ == "__main__":
    cli_main(main)
