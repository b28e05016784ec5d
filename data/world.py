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

Entity types and their facts are listed in ATTRIBUTES and RELATIONS below; relations chain
(work -created_by-> person -works_for-> organisation -founded_by-> person -born_in-> city
-located_in-> country), so 1-4 hop questions exist. Some relation facts are stated only in the
object's document (a university lists its alumni, whose own pages are silent about it).

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
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from common.errors import UserError, cli_main
from common.io import atomic_dir, atomic_write_json, config_hash, read_manifest
from common.paths import runs_dir
from data import world_text as T

GENERATOR_VERSION = "world-2"
MIN_DOCS = 20
TYPE_SHARES = [("person", 0.38), ("work", 0.18), ("organisation", 0.14), ("city", 0.12),
               ("event", 0.09), ("university", 0.06), ("country", 0.03)]
TYPES = [t for t, _ in TYPE_SHARES]
ATTRIBUTES = {  # type -> attribute -> value type
    "person": {"occupation": "str", "birth_year": "int"},
    "city": {"population": "int", "founded_year": "int"},
    "country": {"currency": "str", "population": "int", "founded_year": "int"},
    "organisation": {"industry": "str", "founded_year": "int", "employees": "int"},
    "university": {"founded_year": "int", "students": "int"},
    "work": {"kind": "str", "release_year": "int"},
    "event": {"category": "str", "year": "int", "attendance": "int"},
}
RELATIONS = {  # (subject type, relation) -> object type; every relation has one object
    ("person", "born_in"): "city", ("person", "works_for"): "organisation",
    ("person", "studied_at"): "university", ("person", "spouse"): "person",
    ("city", "located_in"): "country", ("country", "capital"): "city",
    ("organisation", "founded_by"): "person", ("organisation", "headquartered_in"): "city",
    ("university", "located_in"): "city", ("work", "created_by"): "person",
    ("work", "published_by"): "organisation", ("event", "held_in"): "city",
    ("event", "organised_by"): "organisation",
}
BIT = {rel: 1 << i for i, rel in enumerate(sorted({r for _, r in RELATIONS}))}
YEAR_ATTRS = {"birth_year", "founded_year", "release_year", "year"}
COMBOS = {"person": ("born_in", "birth_year"), "organisation": ("founded_by", "founded_year"),
          "event": ("held_in", "year")}  # relation + attribute said in one sentence
# new entity type -> (source type, kind) it may be made confusable with
CONFUSE_MODES = {
    "person": [("person", "one_letter"), ("person", "shared_word")],
    "city": [("city", "one_letter")], "country": [("country", "one_letter")],
    "organisation": [("organisation", "one_letter"), ("city", "same_name"),
                     ("city", "shared_word")],
    "university": [("organisation", "shared_word"), ("university", "one_letter")],
    "work": [("person", "same_name"), ("work", "one_letter")],
    "event": [("event", "shared_word"), ("city", "shared_word")],
}


@dataclass(slots=True, eq=False)
class Entity:
    idx: int
    type: str
    name: str = ""
    root: str = ""  # the invented word in the name; confusables and short aliases derive from it
    title: str = ""
    attrs: dict = field(default_factory=dict)
    rels: dict = field(default_factory=dict)
    aliases: list = field(default_factory=list)
    sibs: list | None = None  # confusable siblings (entity indices)
    inv: dict | None = None  # relation -> subjects whose fact this document also states
    hidden: int = 0  # BIT of relations NOT stated in this entity's own document
    mentioned: int = 0  # BIT of relations also stated in the object's document


@dataclass
class Plan:
    n_docs: int
    seed: int
    confusable_rate: float
    ents: list
    ids: list
    pairs: list  # (source idx, new idx, kind)


@dataclass
class World:
    entities: list  # rows of entities.jsonl
    facts: list  # rows of facts.jsonl
    documents: list  # rows of corpus.jsonl
    manifest: dict


def type_counts(n_docs: int) -> dict:
    if n_docs < MIN_DOCS:
        raise UserError(f"--docs must be at least {MIN_DOCS} (got {n_docs})")
    counts = {t: max(1, int(n_docs * share)) for t, share in TYPE_SHARES}
    counts["person"] += n_docs - sum(counts.values())
    return counts


def a_an(word: str) -> str:
    return ("an " if word[0] in "aeiou" else "a ") + word


def surface(attr: str, value) -> str:
    """How a value is written in the text; years plain, counts with thousands separators."""
    if isinstance(value, str) or attr in YEAR_ATTRS:
        return str(value)
    return f"{value:,}"


def _name_all(namer: T.Namer, ents: list, rate: float) -> list:
    """Name every entity; about `rate` of them share a confusable name with a sibling."""
    seen = {t: [] for t in TYPES}  # entities named so far, by type
    taken = {t: set() for t in TYPES}  # names are unique within a type
    pairs = []
    for e in ents:
        src = kind = got = None
        if namer.x() < rate / 2:  # each pair gives two entities a sibling
            src_type, kind = namer.pick(CONFUSE_MODES[e.type])
            src = namer.pick(seen[src_type]) if seen[src_type] else None
            got = namer.derive(e, src, kind) if src else None
        if got is None or got[0] in taken[e.type]:
            got, src = namer.fresh(e), None
            while got[0] in taken[e.type]:  # only titles without an invented word can repeat
                got = namer.fresh(e)
        e.name, e.root, e.attrs = got
        if e.type == "country":
            e.attrs["currency"] = namer.currency()
        taken[e.type].add(e.name)
        seen[e.type].append(e)
        if src is not None:
            pairs.append((src.idx, e.idx, kind))
            src.sibs = (src.sibs or []) + [e.idx]
            e.sibs = [src.idx]
    return pairs


# --- relations and attributes ------------------------------------------------------------------
def _mention(subj: Entity, rel: str, obj: Entity, cap: int, p_hide: float, x) -> None:
    """Let obj's document state (subj, rel, obj) too, up to cap subjects per relation;
    with p_hide the subject's own document then stays silent about it."""
    if obj.inv is None:
        obj.inv = {}
    listed = obj.inv.setdefault(rel, [])
    if len(listed) < cap:
        listed.append(subj.idx)
        subj.mentioned |= BIT[rel]
        if x() < p_hide:
            subj.hidden |= BIT[rel]


class Relater:
    def __init__(self, rng: random.Random, by: dict):
        self.x, self.by = rng.random, by

    def pick(self, seq):
        return seq[int(self.x() * len(seq))]

    def between(self, lo: int, hi: int) -> int:
        return lo + int(self.x() * (hi - lo + 1))

    def log_uniform(self, lo: int, hi: int) -> int:
        return int(lo * (hi / lo) ** self.x())

    def geography(self) -> None:
        countries, totals = self.by["country"], Counter()
        for i, city in enumerate(self.by["city"]):
            country = countries[i] if i < len(countries) else self.pick(countries)
            is_capital = i < len(countries)  # every country gets one city, its capital
            pop = self.log_uniform(150_000, 4_000_000) if is_capital \
                else self.log_uniform(2_000, 900_000)
            city.attrs.update(population=pop, founded_year=self.between(700, 1900))
            city.rels["located_in"] = country.idx
            _mention(city, "located_in", country, 3, 0.3, self.x)
            if is_capital:
                country.rels["capital"] = city.idx
                _mention(country, "capital", city, 1, 0.0, self.x)
            totals[country.idx] += pop
        for country in countries:
            country.attrs["population"] = int(totals[country.idx] * (1.5 + 2.5 * self.x()))
            country.attrs["founded_year"] = self.between(1400, 1995)

    def people(self) -> None:
        x, orgs, unis = self.x, self.by["organisation"], self.by["university"]
        for p in self.by["person"]:
            p.attrs["birth_year"] = self.between(1850, 2000)
            p.attrs["occupation"] = self.pick(T.OCCUPATIONS)
            self.link(p, "born_in", self.pick(self.by["city"]), 2, 0.2)
            if x() < 0.8:
                self.link(p, "works_for", self.pick(orgs), 2, 0.35)
            if x() < 0.7:
                self.link(p, "studied_at", self.pick(unis), 3, 0.5)
        married = [p for p in self.by["person"] if x() < 0.2]
        for a, b in zip(married[0::2], married[1::2]):
            a.rels["spouse"], b.rels["spouse"] = b.idx, a.idx
            hide_a, hide_b = x() < 0.3, x() < 0.3
            hide_a = hide_a and not hide_b  # at least one of the two pages tells
            bit = BIT["spouse"]
            a.hidden |= bit if hide_a else 0
            b.hidden |= bit if hide_b else 0
            a.mentioned |= 0 if hide_b else bit  # b's sentence names a too
            b.mentioned |= 0 if hide_a else bit

    def link(self, subj: Entity, rel: str, obj: Entity, cap: int, p_hide: float) -> None:
        subj.rels[rel] = obj.idx
        _mention(subj, rel, obj, cap, p_hide, self.x)

    def institutions(self) -> None:
        persons, cities = self.by["person"], self.by["city"]
        for org in self.by["organisation"]:
            founder = self.pick(persons)
            born = founder.attrs["birth_year"]
            org.attrs["founded_year"] = min(2023, born + self.between(22, 60))
            org.attrs["employees"] = self.log_uniform(12, 250_000)
            self.link(org, "founded_by", founder, 1, 0.3)
            self.link(org, "headquartered_in", self.pick(cities), 2, 0.2)
        for uni in self.by["university"]:
            uni.attrs["founded_year"] = self.between(1500, 1990)
            uni.attrs["students"] = self.log_uniform(800, 60_000)
            self.link(uni, "located_in", self.pick(cities), 1, 0.2)

    def works_and_events(self) -> None:
        orgs = self.by["organisation"]
        publishers = {}
        for org in orgs:
            publishers.setdefault(org.attrs["industry"], []).append(org)
        for work in self.by["work"]:
            creator = self.pick(self.by["person"])
            born = creator.attrs["birth_year"]
            work.attrs["release_year"] = min(2024, born + self.between(20, 65))
            self.link(work, "created_by", creator, 2, 0.3)
            pool = publishers.get(T.PUBLISHER_INDUSTRY[work.attrs["kind"]]) or orgs
            self.link(work, "published_by", self.pick(pool), 2, 0.1)
        for event in self.by["event"]:
            org = self.pick(orgs)
            first = min(2024, max(1900, org.attrs["founded_year"] + 1))
            event.attrs["year"] = self.between(first, 2024)
            event.attrs["attendance"] = self.log_uniform(150, 400_000)
            self.link(event, "held_in", self.pick(self.by["city"]), 1, 0.2)
            self.link(event, "organised_by", org, 1, 0.2)


def _label(e: Entity) -> str:
    """Wikipedia-style qualifier for a title shared by several entities."""
    if e.type == "person":
        return e.attrs["occupation"]
    if e.type in ("work", "event"):
        return e.attrs["kind" if e.type == "work" else "category"]
    return T.TYPE_NOUN[e.type]


def _short_name(e: Entity) -> str | None:
    if e.type in ("person", "organisation", "university"):
        return e.root if e.root != e.name else None
    if e.type == "work" and e.name.startswith("The ") and " " in e.name[4:]:
        return e.name[4:]
    return None


def _titles_and_aliases(ents: list) -> None:
    name_count = Counter(e.name for e in ents)
    used = set()
    for e in ents:
        title = e.name if name_count[e.name] == 1 else f"{e.name} ({_label(e)})"
        if title in used:  # two same-named entities with one label: add the index
            title = f"{e.name} ({_label(e)} {e.idx})"
        used.add(title)
        e.title = title
    shorts = [_short_name(e) for e in ents]
    short_count = Counter(s for s in shorts if s)
    for e, short in zip(ents, shorts):
        if short and short_count[short] == 1 and short not in name_count:
            e.aliases = [short]


def plan_world(n_docs: int, seed: int, confusable_rate: float = 0.1) -> Plan:
    """Entities, names, attributes and relations: the world without its prose."""
    if not 0.0 <= confusable_rate <= 1.0:
        raise UserError(f"--confusable-rate must be within [0, 1] (got {confusable_rate})")
    rng = random.Random(seed * 1_000_003 + 1)
    types = [t for t, c in type_counts(n_docs).items() for _ in range(c)]
    rng.shuffle(types)  # ids do not give away an entity's type
    ents = [Entity(i, t) for i, t in enumerate(types)]
    pairs = _name_all(T.Namer(rng), ents, confusable_rate)
    by = {t: [e for e in ents if e.type == t] for t in TYPES}
    relater = Relater(rng, by)
    relater.geography()
    relater.people()
    relater.institutions()
    relater.works_and_events()
    _titles_and_aliases(ents)
    width = max(6, len(str(n_docs - 1)))
    ids = [f"w-{i:0{width}d}" for i in range(n_docs)]
    return Plan(n_docs, seed, confusable_rate, ents, ids, pairs)


# --- prose --------------------------------------------------------------------------------
def _refs(e: Entity) -> list:
    """(sentence-initial, mid-sentence) ways to refer to e inside its own document."""
    if e.type == "person":
        return [(e.name, e.name), (e.root, e.root), (e.root, e.root)]
    if e.type == "event":
        noun = e.attrs["category"]
        return [("The " + e.name, "the " + e.name)] * 2 + [("The " + noun, "the " + noun)]
    noun = e.attrs["kind"] if e.type == "work" else T.TYPE_NOUN[e.type]
    refs = [(e.name, e.name)] * 2 + [("The " + noun, "the " + noun)]
    if e.type == "organisation" and e.aliases:
        refs.append((e.aliases[0], e.aliases[0]))
    return refs


def _work_words(work: Entity) -> dict:
    kind = work.attrs["kind"]
    verb, part = T.WORK_VERB[kind]
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
