"""Checks on synthesized questions (data/questions.py): leakage between splits (fails the
build), retrievability of each hop's gold document, and the report tables.

    from data.leakage import check_leakage
    result = check_leakage({"train_sft": [...], "train_rl": [...], "test": [...], ...})
    result["problems"]   # [] when clean; else one line per kind of leak, with an example
    result["counts"]     # every count below, leaks or not
    result["ngrams"]     # per eval split: how much of its wording train has seen

Splits whose name starts with "train" are train splits; every other split is an eval split.
Leaks (each a count; any non-zero one is a problem):
  exact_duplicates          a normalized question text in two splits
  near_duplicates           two splits ask about the same entity chain with the same template
                            (templated questions that differ only in the entity names are
                            expected and are not leaks; other wordings of the same facts count
                            under shared_fact_paths)
  shared_fact_paths         two splits ask about the same facts (same chain and relation path)
  shared_chains             a full entity chain in both a train and an eval split
  eval_heads_in_train       an eval question starts at an entity that heads a train question
  heldout_templates_in_train  a train question with a heldout-pool phrasing (pool or template id)
  withheld_paths_in_train   a train question with 4+ hops or a withheld relation path in its path
Retrievability: `Searcher` (cached batched top-5 searches), `retrieve` (sets each candidate's
gold documents, returns rates per type), `question_search_rates`, `name_search_by_entity_type`.
`count_table`, `drop_table` and `render_report` make report.json's tables and report.md.
Statistics (not leaks): for each eval split, the share of its word 5-grams found in train
questions, raw and with names and numbers masked (the masked share measures how familiar the
wording is: ~1 for train-pool phrasings, low for heldout ones), and the largest 5-gram
Jaccard between an eval question and a train question about the same chain.
"""
from __future__ import annotations

import random
import re
import sys
from collections import Counter, defaultdict

from tqdm import tqdm

from data.phrasings import POOLS, TEMPLATES
from eval.metrics import normalize_answer

NGRAM = 5
K = 5
# Relation paths never used in any train split (as a contiguous part of a path); test_ood asks them.
WITHHELD_PATHS = (
    ("spouse", "born_in"),
    ("created_by", "studied_at"),
    ("held_in", "located_in"),
    ("published_by", "founded_by", "birth_year"),
    ("works_for", "headquartered_in", "located_in"),
)
PAIRED = ("comparison", "yesno")  # types about two named entities
_NAME = re.compile(r"(?<!^)(?<![.?!:] )\b([A-Z][\w'-]*|\d[\d,]*)")


def contains_path(relations, paths=WITHHELD_PATHS) -> tuple | None:
    """The first withheld path that occurs contiguously in `relations`, or None."""
    rels = tuple(relations)
    for path in paths:
        n = len(path)
        if any(rels[i:i + n] == path for i in range(len(rels) - n + 1)):
            return path
    return None


def heads(record: dict) -> set:
    chain = record.get("chain") or []
    return set(chain[:2] if record.get("type") in PAIRED else chain[:1])


def shingles(text: str, n: int = NGRAM) -> set:
    words = normalize_answer(text).split()
    n = min(n, len(words)) or 1
    return {" ".join(words[i:i + n]) for i in range(max(1, len(words) - n + 1))}


def masked(text: str) -> str:
    """Names and numbers replaced by one placeholder (a statistic's heuristic, not exact)."""
    text = _NAME.sub("ENT", text)
    return re.sub(r"ENT(\s+(of|for|from)?\s*ENT)+", "ENT", text)


def jaccard(a: set, b: set) -> float:
    return len(a & b) / len(a | b) if a or b else 0.0


def _template_pools(record: dict) -> set:
    pools = {record.get("pool")}
    for part in str(record.get("template", "")).split("+"):
        if part in TEMPLATES:
            pools.add(TEMPLATES[part].pool)
    return pools


def _example(record: dict) -> str:
    return f"{record.get('id')}: {record.get('question', '')[:90]!r}"


def check_leakage(splits: dict, withheld=WITHHELD_PATHS) -> dict:
    names = list(splits)
    train = [s for s in names if s.startswith("train")]
    evals = [s for s in names if s not in train]
    counts, problems, examples = defaultdict(int), [], {}

    def leak(kind: str, record: dict, other: str = "") -> None:
        counts[kind] += 1
        examples.setdefault(kind, f"{_example(record)}{' (also in ' + other + ')' if other else ''}")

    # questions seen per text, per chain, per fact path; across splits
    by_text, by_chain, by_path = defaultdict(dict), defaultdict(dict), defaultdict(dict)
    within = 0
    for split in names:
        seen = set()
        for r in splits[split]:
            text = normalize_answer(r["question"])
            within += text in seen
            seen.add(text)
            by_text[text].setdefault(split, r)
            chain = tuple(r.get("chain") or ())
            chain = tuple(sorted(chain)) if r.get("type") in PAIRED else chain  # A vs B = B vs A
            by_chain[chain].setdefault(split, []).append(r)
            by_path[(chain, tuple(r.get("relations") or ()))].setdefault(split, r)
    counts["duplicates_within_split"] = within
    for groups, kind in ((by_text, "exact_duplicates"), (by_path, "shared_fact_paths")):
        for per_split in groups.values():
            if len(per_split) > 1:
                first, *rest = per_split
                leak(kind, per_split[rest[0]], first)
    near_max = {s: 0.0 for s in evals}
    for chain, per_split in by_chain.items():
        if len(per_split) < 2 or not chain:
            continue
        in_train = [s for s in per_split if s in train]
        if in_train and any(s in evals for s in per_split):
            leak("shared_chains", next(r for s in per_split if s in evals for r in per_split[s]),
                 in_train[0])
        splits_here = list(per_split)
        for i, a in enumerate(splits_here):
            for b in splits_here[i + 1:]:
                for ra in per_split[a]:
                    grams_a = shingles(ra["question"])
                    for rb in per_split[b]:
                        score = jaccard(grams_a, shingles(rb["question"]))
                        for s in (a, b):
                            if s in near_max and (a in train or b in train):
                                near_max[s] = max(near_max[s], score)
                        if ra.get("template") == rb.get("template"):
                            leak("near_duplicates", rb, a)
    train_heads = set().union(*(heads(r) for s in train for r in splits[s])) if train else set()
    for split in evals:
        for r in splits[split]:
            if heads(r) & train_heads:
                leak("eval_heads_in_train", r, "a train split as a head")
    for split in train:
        for r in splits[split]:
            if "heldout" in _template_pools(r):
                leak("heldout_templates_in_train", r)
            rels = [x for x in r.get("relations") or () if not str(x).startswith("inv:")]
            if r.get("type") not in PAIRED and (int(r.get("hops", 0)) >= 4 or contains_path(rels, withheld)):
                leak("withheld_paths_in_train", r)
    kinds = ("exact_duplicates", "near_duplicates", "shared_fact_paths", "shared_chains",
             "eval_heads_in_train", "heldout_templates_in_train", "withheld_paths_in_train")
    for kind in kinds:
        counts[kind] += 0
        if counts[kind]:
            problems.append(f"{kind}: {counts[kind]} (e.g. {examples[kind]})")
    return {"counts": dict(counts), "problems": problems, "ngrams": _ngram_stats(splits, train, evals, near_max),
            "train_splits": train, "eval_splits": evals}


def _ngram_stats(splits: dict, train: list, evals: list, near_max: dict) -> dict:
    raw, mask = set(), set()
    for split in train:
        for r in splits[split]:
            raw |= shingles(r["question"])
            mask |= shingles(masked(r["question"]))
    stats = {}
    for split in evals:
        rows = splits[split]
        if not rows:
            continue
        seen_raw = [_share(shingles(r["question"]), raw) for r in rows]
        seen_mask = [_share(shingles(masked(r["question"])), mask) for r in rows]
        stats[split] = {"n": len(rows),
                        "raw_5gram_seen_in_train": round(sum(seen_raw) / len(rows), 4),
                        "masked_5gram_seen_in_train": round(sum(seen_mask) / len(rows), 4),
                        "max_jaccard_same_chain": round(near_max.get(split, 0.0), 4)}
    return stats


def _share(grams: set, seen: set) -> float:
    return sum(g in seen for g in grams) / len(grams) if grams else 0.0


# --- retrievability ------------------------------------------------------------------------
# words a sensible agent adds to a name when the fact may sit on another entity's page
KEYWORD = {"born_in": "birthplace", "works_for": "employer", "studied_at": "alma mater",
           "spouse": "spouse", "located_in": "located", "capital": "capital",
           "founded_by": "founder", "headquartered_in": "headquarters", "created_by": "creator",
           "published_by": "publisher", "held_in": "host city", "organised_by": "organiser"}
INV_KEYWORD = {"founded_by": "founded", "created_by": "created", "capital": "capital",
               "located_in": "cities", "held_in": "hosted", "organised_by": "organised",
               "headquartered_in": "headquarters", "published_by": "released"}


class Searcher:
    """Top-k document ids per query, searched in batches and cached."""

    def __init__(self, store, method: str | None = None, k: int = K, progress: bool = True):
        self.store, self.method, self.k, self.progress = store, method or store.default_method, k, progress
        self.cache = {}

    def run(self, queries, desc: str = "search") -> None:
        todo = sorted({q for q in queries if q not in self.cache})
        bar = tqdm(total=len(todo), desc=desc, unit="q", disable=not self.progress or not todo,
                   mininterval=2.0, file=sys.stderr)
        for i in range(0, len(todo), 256):
            chunk = todo[i:i + 256]
            hits_of = self.store.search_batch(chunk, k=self.k, method=self.method, snippets_by_meaning=False)
            for q, hits in zip(chunk, hits_of):
                self.cache[q] = [h.doc_id for h in hits]
            bar.update(len(chunk))
        bar.close()

    def top(self, query: str) -> list:
        return self.cache[query]


def hop_queries(g, hop: tuple) -> tuple:
    """The searches a sensible agent makes for a hop: the entity's name (+ a relation word)."""
    who, (_, rel), kind = hop
    name = g.name(who)
    if kind == "hidden":
        return name, f"{name} {KEYWORD[rel]}"
    if kind == "inverse":
        return name, f"{name} {INV_KEYWORD[rel]}"
    return (name,)


def _rates(stats: dict) -> dict:
    out = {}
    for t, s in sorted(stats.items()):
        row = {"hops": s["hops"], **{m: round(s[m] / s["hops"], 4) for m in ("name_at5", "name_or_keyword_at5")}}
        if s["questions"]:
            row.update(questions=s["questions"], all_hops_at5=round(s["all_hops_at5"] / s["questions"], 4))
        out[t] = row
    return out


def retrieve(g, searcher: Searcher, cands: list) -> dict:
    """Set each candidate's gold documents (None when a hop is not found); return the rates
    by question type and by hop kind (own page, hidden fact, inverse)."""
    searcher.run((q for c in cands for hop in c.hops_q for q in hop_queries(g, hop)), "hop searches")
    stats = defaultdict(Counter)
    for c in cands:
        gold, all_found = [], True
        for hop in c.hops_q:
            who, fact_key, kind = hop
            stated = g.fact[fact_key]["stated_in"]
            queries = hop_queries(g, hop)
            by_name = any(d in searcher.top(queries[0]) for d in stated)
            found = set().union(*(searcher.top(q) for q in queries))
            prefer = [who] if who in stated else []
            prefer += [d for d in stated if d not in prefer]
            hit = [d for d in prefer if d in found]
            gold.append(hit[0] if hit else prefer[0])
            all_found &= bool(hit)
            for key in (c.type, f"hop:{kind}"):
                stats[key].update(hops=1, name_at5=by_name, name_or_keyword_at5=bool(hit))
        stats[c.type].update(questions=1, all_hops_at5=all_found)
        c.gold = gold if all_found else None
    return _rates(stats)


def question_search_rates(g, searcher: Searcher, cands: list, phrase, per_type: int, seed: int) -> dict:
    """How often the question text itself, as the first search, finds a hop-1 gold document
    (a sample of `per_type` candidates per type, each in a random pool's wording)."""
    rng = random.Random(f"{seed}|qtext")
    by_type = defaultdict(list)
    for c in cands:
        by_type[c.type].append(c)
    sample = []
    for typ in sorted(by_type):
        for c in rng.sample(by_type[typ], min(per_type, len(by_type[typ]))):
            sample.append((c, phrase(g, c, rng.choice(POOLS), rng)[0]))
    searcher.run([t for _, t in sample], "question-text searches")
    out = defaultdict(Counter)
    for c, text in sample:
        top = set(searcher.top(text))
        docs = [set(g.fact[key]["stated_in"]) for _, key, _ in c.hops_q]
        out[c.type].update(n=1, hop1_at5=bool(docs[0] & top), any_hop_at5=bool(set().union(*docs) & top))
    return {t: {"n": s["n"], "hop1_at5": round(s["hop1_at5"] / s["n"], 4),
                "any_hop_at5": round(s["any_hop_at5"] / s["n"], 4)} for t, s in sorted(out.items())}


def name_search_by_entity_type(g, searcher: Searcher) -> dict:
    """Each entity's name as the query: is its own document first / in the top k?"""
    searcher.run([e["name"] for e in g.ents.values()], "entity-name searches")
    stats, misses = defaultdict(Counter), []
    for eid, e in g.ents.items():
        top = searcher.top(e["name"])
        stats[e["type"]].update(n=1, own_at1=bool(top) and top[0] == eid, own_at5=eid in top)
        if eid not in top and len(misses) < 10:
            misses.append(f"{e['name']} ({e['type']})")
    rates = {t: {"n": s["n"], "own_at1": round(s["own_at1"] / s["n"], 4),
                 "own_at5": round(s["own_at5"] / s["n"], 4)} for t, s in sorted(stats.items())}
    return {"by_entity_type": rates, "misses_examples": misses}


# --- report tables -------------------------------------------------------------------------
REASONS = ("non_unique", "answer_in_question", "not_retrievable", "answer_in_question_text")


def drop_table(candidates: dict, drops: Counter) -> dict:
    """Per question type: candidates and the drops of each filter (the first filter failed)."""
    table = {t: {"candidates": n, **{r: drops[(t, r)] for r in REASONS}}
             for t, n in sorted(candidates.items())}
    table["total"] = {k: sum(row[k] for row in table.values()) for k in ("candidates",) + REASONS}
    return table


def count_table(splits: dict) -> dict:
    out = {}
    for key in ("hops", "type", "pool"):
        out[f"by_{key}"] = {s: dict(sorted(Counter(r[key] for r in rows).items()))
                            for s, rows in splits.items()}
    for flag in ("in_sft_dist", "hidden_fact"):
        out[flag] = {s: sum(bool(r.get(flag)) for r in rows) for s, rows in splits.items()}
    out["yes_share_of_yesno"] = {
        s: round(sum(r["answers"] == ["yes"] for r in rows) / max(1, sum(r["type"] == "yesno" for r in rows)), 3)
        for s, rows in splits.items()}
    out["total"] = {s: len(rows) for s, rows in splits.items()}
    return out


def _table(rows: dict, title: str) -> list:
    """A markdown table of {row: {column: value}}."""
    cols = sorted({c for r in rows.values() for c in r}, key=str)
    lines = [f"| {title} | " + " | ".join(map(str, cols)) + " |", "|---" * (len(cols) + 1) + "|"]
    for name, r in rows.items():
        lines.append(f"| {name} | " + " | ".join(str(r.get(c, "")) for c in cols) + " |")
    return lines + [""]


def render_report(report: dict) -> str:
    counts, retrieval = report["counts"], report["retrieval"]
    out = ["# Questions from the synthetic world", "",
           f"Seed {report['config']['seed']}; search method {retrieval['method']}, k={retrieval['k']}; "
           f"wall time {report['seconds'].get('wall_s', report['seconds']['total_s'])} s.", "", "## Counts", ""]
    for key in ("by_hops", "by_type", "by_pool"):
        out += _table(counts[key], f"split \\ {key[3:]}")
    out += _table({s: {"total": counts["total"][s], "in_sft_dist": counts["in_sft_dist"][s],
                       "hidden_fact": counts["hidden_fact"][s],
                       "yes_share_of_yesno": counts["yes_share_of_yesno"][s]} for s in counts["total"]},
                  "split")
    out += ["## Filters (drops by the first failed filter)", ""] + _table(report["filters"], "type")
    out += ["## Retrievability (before filtering, top-5)", "",
            "Searching each hop's entity by name (hidden and inverse hops may add a relation word):", ""]
    out += _table(retrieval["hop_name_search"], "type / hop kind")
    if "question_text_first_search" in retrieval:
        out += ["The question text as the first search:", ""]
        out += _table(retrieval["question_text_first_search"], "type")
    out += ["An entity's name as the query, own document found:", ""]
    out += _table(retrieval["entity_name"]["by_entity_type"], "entity type")
    leak = report["leakage"]
    out += ["## Leakage check", "", "Problems: " + ("; ".join(leak["problems"]) or "none"), ""]
    out += _table({"count": leak["counts"]}, "leak")
    out += _table(leak["ngrams"], "eval split")
    out += ["Withheld relation paths (test_ood only): " +
            ", ".join(" > ".join(p) for p in report["config"]["withheld_paths"]), ""]
    return "\n".join(out)
