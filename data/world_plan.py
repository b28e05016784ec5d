"""The plan of the synthetic world (data/world.py): entity types, attributes and relations,
names, confusable pairs, titles and aliases; the world without its prose.

Separate from data/world.py (documents, files and the command) so the fact graph's rules can be
read apart from the prose that states them. Uses the name pools of data/world_names.py.
"""
import random
from collections import Counter
from dataclasses import dataclass, field

from common.errors import UserError
from data import world_names as N

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


def type_counts(n_docs: int) -> dict:
    if n_docs < MIN_DOCS:
        raise UserError(f"--docs must be at least {MIN_DOCS} (got {n_docs})")
    counts = {t: max(1, int(n_docs * share)) for t, share in TYPE_SHARES}
    counts["person"] += n_docs - sum(counts.values())
    return counts


def _name_all(namer: N.Namer, ents: list, rate: float) -> list:
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
            p.attrs["occupation"] = self.pick(N.OCCUPATIONS)
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
            pool = publishers.get(N.PUBLISHER_INDUSTRY[work.attrs["kind"]]) or orgs
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
    return N.TYPE_NOUN[e.type]


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
    pairs = _name_all(N.Namer(rng), ents, confusable_rate)
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
