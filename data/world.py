"""Synthetic research world: a fictional encyclopedia whose facts no model saw in pretraining.

    python -m data.world --out runs/data/world --docs 3000 --seed 0

Writes into --out (built in `<out>.partial`, renamed when complete):
  corpus.jsonl    {"id","title","text"}: one passage-sized document per entity, ids w-000123
  entities.jsonl  {"id","type","name","title","attrs","relations","aliases","confusable_with"}
  facts.jsonl     {"subject","relation","object","stated_in"} or
                  {"subject","relation","value","surface","stated_in"}: the fact graph; every
                  listed document literally contains the subject's name and the object's name
                  (or the value's `surface` string, e.g. "12,400")
  manifest.json   version, seed, n_docs, counts by type, facts, confusable pairs, corpus sha256

Entity types and their facts are listed in ATTRIBUTES and RELATIONS of data/world_plan.py;
relations chain (work -created_by-> person -works_for-> organisation -founded_by-> person
-born_in-> city -located_in-> country), so 1-4 hop questions exist. Some relation facts are
stated only in the object's document (a university lists its alumni, whose own pages are silent
about it).

Aliases: a short name (a person's surname, a company's first word, a title without "The") is an
alias only when no other entity has it as name or alias, so an answer alias is never ambiguous.
Confusables (about `confusable_rate` of entities): names one letter apart (Marrow / Marlow),
shared words (Varnholt Industries / Varnholt College, two persons with one surname) and the same
name across types (a city and a company, a film named after a person); such titles get a
Wikipedia-style qualifier, "Kestrel (city)" / "Kestrel (company)".

Python API: generate_world(n_docs, seed) -> World (in memory) and write_world(out, n_docs, seed)
(streaming, for 1M documents). Same seed and size give byte-identical files.
"""
import argparse
import gc
import hashlib
import json
import random
import sys
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from common.errors import cli_main
from common.io import atomic_dir, atomic_write_json, config_hash, read_manifest
from common.paths import runs_dir
from data import world_names as N
from data import world_text as T
from data.world_plan import BIT, YEAR_ATTRS, Entity, Plan, plan_world

GENERATOR_VERSION = "world-2"
COMBOS = {"person": ("born_in", "birth_year"), "organisation": ("founded_by", "founded_year"),
          "event": ("held_in", "year")}  # relation + attribute said in one sentence


@dataclass
class World:
    entities: list  # rows of entities.jsonl
    facts: list  # rows of facts.jsonl
    documents: list  # rows of corpus.jsonl
    manifest: dict


def a_an(word: str) -> str:
    return ("an " if word[0] in "aeiou" else "a ") + word


def surface(attr: str, value) -> str:
    """How a value is written in the text; years plain, counts with thousands separators."""
    if isinstance(value, str) or attr in YEAR_ATTRS:
        return str(value)
    return f"{value:,}"


# --- prose --------------------------------------------------------------------------------
def _refs(e: Entity) -> list:
    """(sentence-initial, mid-sentence) ways to refer to e inside its own document."""
    if e.type == "person":
        return [(e.name, e.name), (e.root, e.root), (e.root, e.root)]
    if e.type == "event":
        noun = e.attrs["category"]
        return [("The " + e.name, "the " + e.name)] * 2 + [("The " + noun, "the " + noun)]
    noun = e.attrs["kind"] if e.type == "work" else N.TYPE_NOUN[e.type]
    refs = [(e.name, e.name)] * 2 + [("The " + noun, "the " + noun)]
    if e.type == "organisation" and e.aliases:
        refs.append((e.aliases[0], e.aliases[0]))
    return refs


def _work_words(work: Entity) -> dict:
    kind = work.attrs["kind"]
    verb, part = N.WORK_VERB[kind]
    return {"k": kind, "ak": a_an(kind), "verb": verb, "part": part}


def _join(names: list) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


class Writer:
    """Turns planned entities into documents; one rng, used in id order, for determinism."""

    def __init__(self, plan: Plan):
        self.ents = plan.ents
        self.x = random.Random(plan.seed * 1_000_003 + 2).random

    def pick(self, seq):
        return seq[int(self.x() * len(seq))]

    def say(self, templates: list, refs: list, **kw) -> str:
        x = self.x  # inlined picks: this runs ten times per document
        big, small = refs[int(x() * len(refs))]
        return templates[int(x() * len(templates))].format(S=big, s=small, **kw)

    def shuffle(self, items: list) -> None:
        x = self.x  # Fisher-Yates on the one rng; random.shuffle's getrandbits path is slower
        for i in range(len(items) - 1, 0, -1):
            j = int(x() * (i + 1))
            items[i], items[j] = items[j], items[i]

    def own_sentences(self, e: Entity, refs: list) -> list:
        out, skip = [], {T.OPENING_ATTR.get(e.type)}
        combo = COMBOS.get(e.type)
        if combo and combo[0] in e.rels and not e.hidden & BIT[combo[0]] and self.x() < 0.5:
            rel, attr = combo
            out.append(self.say(T.OWN[(e.type, f"{rel}+{attr}")], refs,
                                o=self.ents[e.rels[rel]].name, v=surface(attr, e.attrs[attr])))
            skip.update(combo)
        for attr, value in e.attrs.items():
            if attr not in skip:
                out.append(self.say(T.OWN[(e.type, attr)], refs, v=surface(attr, value)))
        extra = _work_words(e) if e.type == "work" else {}
        for rel, obj in e.rels.items():
            if rel not in skip and not e.hidden & BIT[rel]:
                out.append(self.say(T.OWN[(e.type, rel)], refs, o=self.ents[obj].name, **extra))
        return out

    def inverse_sentences(self, e: Entity, refs: list) -> list:
        out = []
        for rel, subjects in (e.inv or {}).items():
            first = self.ents[subjects[0]]
            key = "uni_located_in" if first.type == "university" else rel
            if key in T.INV_LIST:
                names = _join([self.ents[i].name for i in subjects])
                out.append(self.say(T.INV_LIST[key], refs, l=names))
                continue
            for i in subjects:
                sub = self.ents[i]
                extra = _work_words(sub) if sub.type == "work" else {}
                out.append(self.say(T.INV_ONE[key], refs, o=sub.name, **extra))
        return out

    def document(self, e: Entity, doc_id: str) -> dict:
        refs = _refs(e)
        value = e.attrs.get(T.OPENING_ATTR.get(e.type), "")
        opening = self.pick(T.OPENING[e.type]).format(n=e.name, v=value,
                                                      av=a_an(value) if value else "")
        body = self.own_sentences(e, refs) + self.inverse_sentences(e, refs)
        words = opening.count(" ") + 1 + sum(s.count(" ") + 1 for s in body)
        fillers = T.FILLERS[e.type] + T.FILLERS["any"]
        used, want = set(), self.x() < 0.7
        while (want or words < 40) and len(used) < len(fillers):  # pad to passage size
            template = self.pick(fillers)
            if template not in used:
                used.add(template)
                big, small = self.pick(refs)
                body.append(template.format(S=big, s=small))
                words += body[-1].count(" ") + 1
                want = False
        self.shuffle(body)
        return {"id": doc_id, "title": e.title, "text": " ".join([opening] + body)}


# --- rows and files ---------------------------------------------------------------------------
def entity_row(plan: Plan, e: Entity) -> dict:
    ids = plan.ids
    return {"id": ids[e.idx], "type": e.type, "name": e.name, "title": e.title,
            "attrs": e.attrs, "relations": {r: ids[o] for r, o in e.rels.items()},
            "aliases": e.aliases, "confusable_with": [ids[i] for i in e.sibs or ()]}


def fact_lines(plan: Plan, e: Entity) -> str:
    """e's facts as JSON lines (the rows of facts.jsonl), formatted directly: json.dumps took
    a third of the run at 1M documents. Ids, relations and numbers need no escaping; strings
    get it."""
    ids = plan.ids
    sid = ids[e.idx]
    out = []
    for attr, value in e.attrs.items():
        if isinstance(value, str):
            text = shown = json.dumps(value)
        else:
            text, shown = str(value), f'"{surface(attr, value)}"'
        out.append(f'{{"subject": "{sid}", "relation": "{attr}", "value": {text}, '
                   f'"surface": {shown}, "stated_in": ["{sid}"]}}\n')
    for rel, obj in e.rels.items():
        bit, oid = BIT[rel], ids[obj]
        stated = ([] if e.hidden & bit else [sid]) + ([oid] if e.mentioned & bit else [])
        where = ", ".join(f'"{i}"' for i in stated)
        out.append(f'{{"subject": "{sid}", "relation": "{rel}", "object": "{oid}", '
                   f'"stated_in": [{where}]}}\n')
    return "".join(out)


def _progress(ents: list, show: bool):
    return tqdm(ents, desc="world", unit="doc", disable=not show, mininterval=1.0)


def iter_rows(plan: Plan, progress: bool = False):
    """(document, entity row, fact rows) per entity, in id order."""
    writer = Writer(plan)
    for e in _progress(plan.ents, progress):
        facts = [json.loads(line) for line in fact_lines(plan, e).splitlines()]
        yield writer.document(e, plan.ids[e.idx]), entity_row(plan, e), facts


def _fact_stats(plan: Plan) -> Counter:
    stats = Counter()
    for e in plan.ents:
        stats.update(e.attrs.keys())
        stats.update(e.rels.keys())
        stats["_elsewhere"] += e.hidden.bit_count()  # hidden: stated only in the object's doc
    return stats


def _config(n_docs: int, seed: int, confusable_rate: float) -> dict:
    return {"version": GENERATOR_VERSION, "n_docs": n_docs, "seed": seed,
            "confusable_rate": confusable_rate}


def _manifest(plan: Plan, corpus_sha: str, fact_stats: Counter) -> dict:
    config = _config(plan.n_docs, plan.seed, plan.confusable_rate)
    return {
        "generator": "data.world", **config, "config_hash": config_hash(config),
        "counts_by_type": dict(Counter(e.type for e in plan.ents)),
        "n_facts": sum(fact_stats.values()) - fact_stats["_elsewhere"],
        "n_facts_stated_only_elsewhere": fact_stats.pop("_elsewhere"),
        "facts_by_relation": dict(sorted(fact_stats.items())),
        "confusable_pairs": dict(Counter(kind for _, _, kind in plan.pairs)),
        "n_confusable_pairs": len(plan.pairs),
        "entities_with_confusable": sum(1 for e in plan.ents if e.sibs),
        "corpus_sha256": corpus_sha,
        "files": ["corpus.jsonl", "entities.jsonl", "facts.jsonl", "manifest.json"],
    }


@contextmanager
def _gc_paused():
    """The world is millions of small acyclic objects: the cycle collector would rescan them
    over and over (it doubled the run time) and never free anything refcounting does not."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def generate_world(n_docs: int = 3000, seed: int = 0, confusable_rate: float = 0.1) -> World:
    """The whole world in memory (fine up to ~100K documents)."""
    with _gc_paused():
        plan = plan_world(n_docs, seed, confusable_rate)
        rows = list(iter_rows(plan))
    docs = [doc for doc, _, _ in rows]
    corpus = "".join(json.dumps(doc) + "\n" for doc in docs).encode()
    manifest = _manifest(plan, hashlib.sha256(corpus).hexdigest(), _fact_stats(plan))
    return World([row for _, row, _ in rows], [f for _, _, facts in rows for f in facts], docs,
                 manifest)


def write_world(out: Path, n_docs: int = 3000, seed: int = 0, confusable_rate: float = 0.1,
                progress: bool | None = None) -> dict:
    """Stream the world into `out` (atomically); return the manifest."""
    progress = n_docs >= 50_000 if progress is None else progress
    if progress:
        print(f"planning a world of {n_docs:,} documents...", file=sys.stderr)
    digest = hashlib.sha256()
    with _gc_paused():
        plan = plan_world(n_docs, seed, confusable_rate)
        writer, ids = Writer(plan), plan.ids
        with atomic_dir(Path(out)) as tmp:
            with open(tmp / "corpus.jsonl", "w", buffering=1 << 20) as corpus, \
                    open(tmp / "entities.jsonl", "w", buffering=1 << 20) as entities, \
                    open(tmp / "facts.jsonl", "w", buffering=1 << 20) as facts:
                for e in _progress(plan.ents, progress):
                    line = json.dumps(writer.document(e, ids[e.idx])) + "\n"
                    corpus.write(line)
                    digest.update(line.encode())
                    entities.write(json.dumps(entity_row(plan, e)) + "\n")
                    facts.write(fact_lines(plan, e))
            manifest = _manifest(plan, digest.hexdigest(), _fact_stats(plan))
            atomic_write_json(tmp / "manifest.json", manifest)
    return manifest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=runs_dir() / "data" / "world")
    parser.add_argument("--docs", type=int, default=3000, help="number of documents (entities)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--confusable-rate", type=float, default=0.1,
                        help="about this fraction of entities gets a confusable sibling")
    parser.add_argument("--force", action="store_true", help="rebuild even if up to date")
    args = parser.parse_args()
    config = _config(args.docs, args.seed, args.confusable_rate)
    old = read_manifest(args.out)
    if old and old.get("config_hash") == config_hash(config) and not args.force:
        print(f"{args.out} is up to date ({args.docs} documents, seed {args.seed}); "
              "--force rebuilds it")
        return
    manifest = write_world(args.out, args.docs, args.seed, args.confusable_rate)
    print(f"wrote {args.docs:,} documents and {manifest['n_facts']:,} facts to {args.out}")


if __name__ == "__main__":
    cli_main(main)
