"""Question synthesis (data/questions.py, data/phrasings.py, data/leakage.py) on a small world."""
import copy
import json
import re

import pytest

from common.errors import UserError
from data import leakage as L
from data import phrasings as P
from data import questions as Q
from data.world import write_world
from datastore.build import DatastoreConfig, build as build_datastore

N_DOCS = 400
SMALL = dict(train_sft=150, train_rl=150, eval=30, qtext_sample=20)


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("questions")
    write_world(root / "world", N_DOCS, seed=0)
    build_datastore(DatastoreConfig(name="qworld", corpus=str(root / "world" / "corpus.jsonl"),
                                    retrievers=["bm25"]), root=root / "ds", progress=False)
    Q.build(root / "world", str(root / "ds"), root / "out", Q.QuestionConfig(seed=0, **SMALL), progress=False)
    return root


def _splits(folder):
    return {s: [json.loads(line) for line in open(folder / f"{s}.jsonl")] for s in Q.SPLITS}


@pytest.fixture(scope="module")
def splits(env):
    return _splits(env / "out")


@pytest.fixture(scope="module")
def world(env):
    graph = Q.Graph.load(env / "world")
    docs = {json.loads(line)["id"]: json.loads(line)["text"] for line in open(env / "world" / "corpus.jsonl")}
    return graph, docs


def test_same_seed_same_files_other_seed_differs(env):
    Q.build(env / "world", str(env / "ds"), env / "again", Q.QuestionConfig(seed=0, **SMALL), progress=False)
    Q.build(env / "world", str(env / "ds"), env / "other", Q.QuestionConfig(seed=1, **SMALL), progress=False)
    for split in Q.SPLITS:
        first = (env / "out" / f"{split}.jsonl").read_bytes()
        assert first == (env / "again" / f"{split}.jsonl").read_bytes(), split
        assert first != (env / "other" / f"{split}.jsonl").read_bytes(), split
    manifest = json.loads((env / "out" / "manifest.json").read_text())
    assert manifest["leakage"]["problems"] == [] and manifest["withheld_paths"]
    assert set(manifest["files"]) <= {p.name for p in (env / "out").iterdir()}


def test_up_to_date_output_is_skipped(env, capsys):
    before = (env / "out" / "train_sft.jsonl").stat().st_mtime_ns
    Q.build(env / "world", str(env / "ds"), env / "out", Q.QuestionConfig(seed=0, **SMALL), progress=False)
    assert "up to date" in capsys.readouterr().out
    assert (env / "out" / "train_sft.jsonl").stat().st_mtime_ns == before


def test_records_sizes_and_schema(splits):
    ids = set()
    for split, rows in splits.items():
        assert len(rows) == (SMALL["eval"] if not split.startswith("train") else SMALL[split]), split
        for r in rows:
            assert r["split"] == split and r["source"] == "world" and r["answers"]
            assert r["id"] not in ids
            ids.add(r["id"])
            assert len(r["gold_doc_ids"]) == len(r["relations"]) == r["hops"]
            assert P.pool_of(r["template"]) == r["pool"], r
    types = {r["type"] for rows in splits.values() for r in rows}
    assert types == {"lookup", "hidden_fact", "inverse", "bridge", "chain", "comparison", "yesno"}


def test_answers_occur_in_the_gold_documents(splits, world):
    graph, docs = world
    for rows in splits.values():
        for r in rows:
            chain, rels = r["chain"], r["relations"]
            if r["type"] == "comparison":
                attr = rels[0]
                values = [graph.ents[e]["attrs"][attr] for e in chain]
                direction = P.TEMPLATES[r["template"]].direction
                best = (min if direction == "min" else max)(values)
                assert r["answer_entity"] == chain[values.index(best)], r
                assert r["answers"][0] == graph.name(r["answer_entity"])
                continue
            if r["type"] == "yesno":
                same = len({graph.ents[e]["relations"][rels[0]] for e in chain}) == 1
                assert r["answers"] == (["yes"] if same else ["no"]), r
                continue
            final = docs[r["gold_doc_ids"][-1]]
            assert any(a in final for a in r["answers"]), (r, final)
            if r["type"] != "inverse":  # each hop's gold document states that hop's fact
                for i, (doc, rel) in enumerate(zip(r["gold_doc_ids"], rels)):
                    assert doc in graph.fact[(chain[i], rel)]["stated_in"], (r, i)
            assert not Q.answer_in_question(r["question"], r["answers"]), r


def _word_distance(a: list, b: list) -> int:
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (x != y))
    return row[-1]


def test_phrasing_pools_are_disjoint_and_heldout_reworded():
    pools_of_text = {}
    for t in P.TEMPLATES.values():
        pools_of_text.setdefault(t.text, set()).add(t.pool)
        assert t.id.split(".")[-1].rstrip("0123456789") == t.pool
    assert all(len(p) == 1 for p in pools_of_text.values()), [t for t, p in pools_of_text.items() if len(p) > 1]
    words = lambda t: re.findall(r"\{?\w+\}?|'s", t.text.lower())  # noqa: E731
    for (kind, typ, key), group in P.TABLE.items():
        for pool in P.POOLS:
            assert group[pool] or kind == "frame", (kind, typ, key, pool)
            if kind in ("ask", "np"):  # a nested phrase never takes a possessive template
                assert any(not t.possessive for t in group[pool]), (kind, typ, key, pool)
        train = group["sft"] + group["rl"]
        for held in group["heldout"]:  # more than a one-word swap from every train template
            if kind != "frame":
                assert min(_word_distance(words(held), words(t)) for t in train) >= 2, held.text
    assert len(P.TEMPLATES) > 400


def test_heldout_wording_is_new_to_train(splits):
    stats = L.check_leakage(splits)["ngrams"]
    assert stats["test_heldout"]["masked_5gram_seen_in_train"] < 0.5 * stats["test"]["masked_5gram_seen_in_train"]


def test_split_rules(splits):
    for r in splits["train_sft"]:
        assert r["pool"] == "sft" and r["hops"] <= 2 and r["in_sft_dist"]
        assert r["type"] in ("lookup", "hidden_fact", "inverse", "bridge", "comparison", "yesno")
    for split in ("train_rl", "dev", "test"):
        assert {r["pool"] for r in splits[split]} == {"sft", "rl"}, split
        assert max(r["hops"] for r in splits[split]) == 3
    assert {r["pool"] for r in splits["test_heldout"]} == {"heldout"}
    for r in splits["test_ood"]:
        assert r["hops"] == 4 or L.contains_path(r["relations"]), r
    assert any(r["hops"] == 4 for r in splits["test_ood"]) and any(r["hops"] < 4 for r in splits["test_ood"])
    for split in ("train_sft", "train_rl", "dev", "test", "test_heldout"):
        for r in splits[split]:
            assert r["hops"] < 4 and not L.contains_path(r["relations"]), r
    train_heads = {h for s in ("train_sft", "train_rl") for r in splits[s] for h in L.heads(r)}
    for split in ("dev", "test", "test_heldout", "test_ood"):
        assert not any(L.heads(r) & train_heads for r in splits[split]), split
    assert L.check_leakage(splits)["problems"] == []


def test_leakage_check_catches_planted_leaks(splits):
    def planted(split, record, **change):
        out = copy.deepcopy(splits)
        out[split].append({**copy.deepcopy(record), **change})
        return L.check_leakage(out)

    test_q, train_q = splits["test"][0], splits["train_rl"][0]
    dup = planted("train_sft", test_q)
    assert dup["counts"]["exact_duplicates"] >= 1 and dup["problems"]
    held = next(r for r in splits["test_heldout"] if r["type"] == "bridge")
    moved = planted("train_sft", held, chain=["w-x", "w-y", "w-z"], question="A fresh question?")
    assert moved["counts"]["heldout_templates_in_train"] == 1
    assert any(p.startswith("heldout_templates_in_train") for p in moved["problems"])
    shared = planted("test", train_q, question="Some rewording of it?", template="ask.x", relations=["r"])
    assert shared["counts"]["shared_chains"] >= 1 and shared["counts"]["exact_duplicates"] == 0
    near = planted("dev", train_q, question=train_q["question"] + " Answer briefly.")
    assert near["counts"]["near_duplicates"] >= 1 and near["counts"]["exact_duplicates"] == 0
    ood = next(r for r in splits["test_ood"] if r["hops"] < 4)
    withheld = planted("train_rl", ood, chain=["w-q"], question="Another fresh question?")
    assert withheld["counts"]["withheld_paths_in_train"] == 1
    newhead = planted("test", train_q, question="New words?", chain=[train_q["chain"][0], "w-other"],
                      template="ask.y", relations=["s"])
    assert newhead["counts"]["eval_heads_in_train"] >= 1


def test_build_fails_on_a_leak_and_writes_nothing(env, monkeypatch):
    monkeypatch.setattr(Q, "check_leakage", lambda splits: {"counts": {}, "problems": ["exact_duplicates: 1"], "ngrams": {}})
    with pytest.raises(UserError, match="leakage check failed"):
        Q.build(env / "world", str(env / "ds"), env / "leaky", Q.QuestionConfig(seed=0, **SMALL),
                force=True, progress=False)
    assert not (env / "leaky").exists()


def test_wider_sft_pools_change_train_sft_only(env, splits, monkeypatch):
    cfg = Q.QuestionConfig(seed=0, train_sft_pools=("sft", "rl"), **SMALL)
    Q.build(env / "world", str(env / "ds"), env / "pools", cfg, progress=False)
    wide = _splits(env / "pools")
    pools = [r["pool"] for r in wide["train_sft"]]
    assert abs(pools.count("rl") - pools.count("sft")) <= len(set(r["type"] for r in wide["train_sft"]))
    assert set(pools) == {"sft", "rl"} and {r["pool"] for r in splits["train_sft"]} == {"sft"}
    for split in ("dev", "test", "test_heldout", "test_ood"):  # drawn from entity buckets no train split uses
        assert (env / "pools" / f"{split}.jsonl").read_bytes() == (env / "out" / f"{split}.jsonl").read_bytes()
    manifest = json.loads((env / "pools" / "manifest.json").read_text())
    assert manifest["leakage"]["problems"] == []
    assert manifest["pool_mix"]["train_sft"] == {"sft": pools.count("sft"), "rl": pools.count("rl")}
    monkeypatch.setattr("sys.argv", ["data.questions", "--train-sft-pools", "sft,heldout"])
    with pytest.raises(UserError, match="heldout pool stays out of training"):
        Q.main()


def test_unfillable_split_fails_with_a_clear_message(env):
    with pytest.raises(UserError, match=r"bigger world .*--docs"):
        Q.build(env / "world", str(env / "ds"), env / "big", Q.QuestionConfig(seed=0, train_sft=50, train_rl=50,
                eval=3000, qtext_sample=0), progress=False)
    assert not (env / "big").exists()


def _entity(eid, typ, name, attrs=None, relations=None, aliases=()):
    return {"id": eid, "type": typ, "name": name, "title": name, "attrs": attrs or {},
            "relations": relations or {}, "aliases": list(aliases), "confusable_with": []}


def _facts(entities):
    rows = []
    for e in entities:
        for attr, value in e["attrs"].items():
            rows.append({"subject": e["id"], "relation": attr, "value": value, "surface": str(value),
                         "stated_in": [e["id"]]})
        for rel, obj in e["relations"].items():
            rows.append({"subject": e["id"], "relation": rel, "object": obj, "stated_in": [e["id"]]})
    return rows


def test_filters_drop_non_unique_and_answer_in_question():
    ents = [_entity("c1", "country", "Aldoria", {"founded_year": 1500}),
            _entity("c2", "country", "Brevia", {"founded_year": 1600}),
            _entity("a", "city", "Kestrel", {"founded_year": 900}, {"located_in": "c1"}),
            _entity("b", "city", "Morrow", {"founded_year": 950}, {"located_in": "c1"}),
            _entity("d", "city", "Varnholt", {"founded_year": 990}, {"located_in": "c2"}),
            _entity("o", "organisation", "Kestrel", {"founded_year": 1990}, {"headquartered_in": "d"}),
            _entity("v", "organisation", "Varnholt Industries", {"founded_year": 1950},
                    {"headquartered_in": "d"}, aliases=["Varnholt"]),
            _entity("w", "organisation", "Selby Works", {"founded_year": 1950}, {"headquartered_in": "b"})]
    g = Q.Graph(ents, _facts(ents))
    inverse = {(c.chain[0], c.spec[2]): c for c in Q.inverse_candidates(g)}
    assert not Q.is_unique(g, inverse[("c1", "located_in")])  # "Which city is located in Aldoria?"
    assert Q.is_unique(g, inverse[("c2", "located_in")])  # Brevia has one city
    assert not Q.is_unique(g, inverse[("d", "headquartered_in")])  # two companies there
    chains = {(c.chain[0], c.relations): c for c in Q.chain_candidates(g, seed=0)}
    assert not Q.is_unique(g, chains[("a", ("founded_year",))])  # two entities named Kestrel
    assert Q.is_unique(g, chains[("b", ("founded_year",))])
    assert Q.answer_in_names(g, chains[("v", ("headquartered_in",))])  # Varnholt Industries -> Varnholt
    assert not Q.answer_in_names(g, chains[("w", ("headquartered_in",))])
    pair = Q.Cand("comparison", ("v", "w"), ("founded_year",) * 2, (), ("cmp", "organisation", "founded_year",
                  1950, 1950), None, None, ("v", "w"))
    assert not Q.is_unique(g, pair)  # a tie has no answer
    assert Q.answer_in_question("Where is Varnholt College located?", ["Varnholt"])
    assert not Q.answer_in_question("Who founded Kelmarby Works?", ["Kelmar"])
    assert Q.answer_in_question("When did it open, in 1874?", ["1874", "in 1874"])


def test_report_counts_filters_and_retrieval(env):
    report = json.loads((env / "out" / "report.json").read_text())
    filters = report["filters"]
    assert filters["inverse"]["non_unique"] > 0 and filters["total"]["candidates"] > 1000
    assert sum(filters["total"][k] for k in L.REASONS) > 0
    retrieval = report["retrieval"]["hop_name_search"]
    assert {"lookup", "bridge", "hop:hidden"} <= set(retrieval)
    assert 0 < retrieval["hop:hidden"]["name_at5"] <= retrieval["hop:hidden"]["name_or_keyword_at5"] <= 1
    assert report["retrieval"]["question_text_first_search"]["lookup"]["n"] == SMALL["qtext_sample"]
    assert report["counts"]["by_pool"]["test_heldout"] == {"heldout": SMALL["eval"]}
    assert "## Leakage check" in (env / "out" / "report.md").read_text()
