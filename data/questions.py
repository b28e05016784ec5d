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
eval questions start at entities no train question starts at. train_sft: sft pool (sft + rl pools
with --train-sft-pools sft,rl), 1-2 hops and comparisons; train_rl, dev, test: sft + rl pools, 1-3
hops; test_heldout: heldout pool, 1-3 hops; test_ood: 4 hops and the paths of
data.leakage.WITHHELD_PATHS (in no train split).
API: build(world, datastore, out, QuestionConfig(...)); synthesize(Graph.load(world), Searcher(store),
cfg) -> (splits, report); check_leakage(splits) (data.leakage, with the retrieval checks). The
Graph and the candidates of each type: data/question_candidates.py.
"""
from __future__ import annotations

import argparse
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
from data.leakage import (K, PAIRED, WITHHELD_PATHS, Searcher, check_leakage, count_table, drop_table,
                          name_search_by_entity_type, question_search_rates, render_report, retrieve)
from data.question_candidates import (BUCKETS, CAPS, Cand, Graph, bucket, chain_candidates,
                                      inverse_candidates, pair_candidates)
from eval.metrics import normalize_answer

VERSION = "questions-1"
SPLITS = ("train_sft", "train_rl", "dev", "test", "test_heldout", "test_ood")
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


@dataclass
class QuestionConfig:
    seed: int = 0
    train_sft: int = 3000
    train_rl: int = 3000
    eval: int = 500
    qtext_sample: int = 200  # candidates per type whose question text is searched (report only)
    train_sft_pools: tuple = ("sft",)  # train_sft's phrasing pools, in equal shares (stop 61: ("sft", "rl"))

    def __post_init__(self):
        if not self.train_sft_pools or not set(self.train_sft_pools) <= {"sft", "rl"}:
            raise UserError(f"train_sft's phrasing pools {','.join(self.train_sft_pools) or '(none)'}: name sft, rl "
                            f"or both (--train-sft-pools sft,rl); the heldout pool stays out of training")

    def pool_mix(self) -> dict:
        return {**POOL_MIX, "train_sft": {p: 1 / len(self.train_sft_pools) for p in self.train_sft_pools}}

    def sizes(self) -> dict:
        return {"train_sft": self.train_sft, "train_rl": self.train_rl,
                **{s: self.eval for s in SPLITS[2:]}}


def answer_in_question(text: str, answers: list) -> bool:
    """Some answer alias occurs in the text as whole words, after normalization."""
    norm = f" {normalize_answer(text)} "
    return any(a and f" {a} " in norm for a in map(normalize_answer, answers))


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


def make_split(g: Graph, split: str, n: int, pool_cands: dict, used: set, seed: int, drops: Counter,
               pool_mix: dict) -> list:
    rng = random.Random(f"{seed}|{split}")
    rows = []
    for cell, quota in sorted(_quotas(n, MIX[split]).items()):
        if not quota:
            continue
        pools = [p for p, k in _quotas(quota, pool_mix).items() for _ in range(k)]
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
        splits[split] = make_split(g, split, n, pool_cands, used, cfg.seed, drops, cfg.pool_mix()[split])
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
    # the pools enter as the mix they make, so the default's hash (and every built split) is unchanged
    knobs = {k: v for k, v in asdict(cfg).items() if k != "train_sft_pools"}
    return {"version": VERSION, **knobs, "method": method, "k": K,
            "phrasings": P.FINGERPRINT, "withheld_paths": [list(p) for p in WITHHELD_PATHS],
            "buckets": dict(BUCKETS), "mix": {s: {f"{t}/{h}": v for (t, h), v in m.items()} for s, m in MIX.items()},
            "pool_mix": cfg.pool_mix(), "caps": CAPS}


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
    parser.add_argument("--train-sft-pools", default="sft",
                        help="train_sft's phrasing pools, comma-separated, in equal shares: sft (default) or sft,rl")
    parser.add_argument("--force", action="store_true", help="rebuild even if up to date")
    args = parser.parse_args()
    if min(args.train_sft, args.train_rl, args.eval) < 1:
        raise UserError("--train-sft, --train-rl and --eval must be at least 1")
    pools = tuple(dict.fromkeys(p.strip() for p in args.train_sft_pools.split(",") if p.strip()))
    cfg = QuestionConfig(args.seed, args.train_sft, args.train_rl, args.eval, args.qtext_sample, pools)
    build(args.world, args.datastore, args.out or args.world / "questions", cfg, args.method, args.force)


if __name__ == "__main__":
    cli_main(main)
