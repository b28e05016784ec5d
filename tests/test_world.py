"""The synthetic world (data/world.py): determinism, stated facts, confusables, chains, files."""
import hashlib
import json
import subprocess
import sys
from collections import Counter, defaultdict

import pytest

from common.errors import UserError
from common.paths import REPO_ROOT
from data import world as W
from data import world_plan as WP
from data import world_text as T

N = 300


@pytest.fixture(scope="module")
def world():
    return W.generate_world(N, seed=0)


@pytest.fixture(scope="module")
def index(world):
    return {e["id"]: e for e in world.entities}, {d["id"]: d for d in world.documents}


def _read(folder, name):
    return (folder / name).read_bytes()


def test_same_seed_same_bytes_other_seed_differs(tmp_path, world):
    first = W.write_world(tmp_path / "a", N, seed=0)
    again = W.write_world(tmp_path / "b", N, seed=0)
    other = W.write_world(tmp_path / "c", N, seed=1)
    for name in ("corpus.jsonl", "entities.jsonl", "facts.jsonl", "manifest.json"):
        assert _read(tmp_path / "a", name) == _read(tmp_path / "b", name), name
        assert _read(tmp_path / "a", name) != _read(tmp_path / "c", name), name
    assert first == again and first["corpus_sha256"] != other["corpus_sha256"]
    # the in-memory API gives exactly what the streaming writer wrote
    for name, rows in (("corpus.jsonl", world.documents), ("entities.jsonl", world.entities),
                       ("facts.jsonl", world.facts)):
        lines = _read(tmp_path / "a", name).decode().splitlines()
        assert [json.loads(line) for line in lines] == rows, name
    assert world.manifest == first


def test_every_fact_is_stated_in_each_listed_document(world, index):
    entities, docs = index
    assert len(world.facts) > 4 * N
    for fact in world.facts:
        assert fact["stated_in"], fact
        needle = entities[fact["object"]]["name"] if "object" in fact else fact["surface"]
        for doc_id in fact["stated_in"]:
            text = docs[doc_id]["text"]
            assert entities[fact["subject"]]["name"] in text, (fact, text)
            assert needle in text, (fact, text)


def test_facts_match_the_schema(world, index):
    entities, _ = index
    for fact in world.facts:
        subject = entities[fact["subject"]]
        if "object" in fact:
            key = (subject["type"], fact["relation"])
            assert WP.RELATIONS[key] == entities[fact["object"]]["type"], fact
            assert subject["relations"][fact["relation"]] == fact["object"]
        else:
            kind = WP.ATTRIBUTES[subject["type"]][fact["relation"]]
            assert type(fact["value"]).__name__ == kind, fact
            assert fact["surface"].replace(",", "") == str(fact["value"])
            assert subject["attrs"][fact["relation"]] == fact["value"]
    confusing = W.generate_world(N, seed=2, confusable_rate=1.0)
    for entity in world.entities + confusing.entities:  # every entity has all its attributes
        assert set(entity["attrs"]) == set(WP.ATTRIBUTES[entity["type"]]), entity


def test_some_facts_are_stated_only_in_another_entitys_document(world, index):
    entities, docs = index
    elsewhere = [f for f in world.facts if f["subject"] not in f["stated_in"]]
    assert len(elsewhere) == world.manifest["n_facts_stated_only_elsewhere"] > 20
    assert {"studied_at", "works_for", "founded_by", "created_by"} <= {
        f["relation"] for f in elsewhere}
    alumni = [f for f in elsewhere if f["relation"] == "studied_at"]
    assert alumni
    for fact in alumni:  # the person's page really is silent about the university
        assert entities[fact["object"]]["name"] not in docs[fact["subject"]]["text"]
        assert "alumni" in docs[fact["object"]]["text"].lower() or \
            "graduates" in docs[fact["object"]]["text"].lower() or \
            "former students" in docs[fact["object"]]["text"].lower()


def test_ids_titles_and_names_are_unique_and_named_early(world):
    ids = [d["id"] for d in world.documents]
    assert len(set(ids)) == N and all(i.startswith("w-") and len(i) == 8 for i in ids)
    assert len({d["title"] for d in world.documents}) == N
    assert [e["id"] for e in world.entities] == ids
    by_type = defaultdict(list)
    for entity, doc in zip(world.entities, world.documents):
        by_type[entity["type"]].append(entity["name"])
        assert entity["name"] in doc["title"]
        first_sentence = doc["text"].split(". ")[0]
        assert entity["name"] in first_sentence, doc
        assert 35 <= len(doc["text"].split()) <= 160, doc
    for names in by_type.values():
        assert len(names) == len(set(names))


def test_type_counts_sum_to_n_docs(world):
    counts = world.manifest["counts_by_type"]
    assert set(counts) == set(WP.TYPES) and all(c > 0 for c in counts.values())
    assert sum(counts.values()) == N == len(world.entities) == len(world.documents)
    assert Counter(e["type"] for e in world.entities) == counts
    with pytest.raises(UserError):
        W.generate_world(5)


def _one_letter_apart(a, b):
    return len(a) == len(b) and sum(x != y for x, y in zip(a, b)) == 1


def test_confusable_pairs_exist_with_distinct_titles(world, index):
    entities, _ = index
    assert world.manifest["n_confusable_pairs"] > 5
    many = W.generate_world(N, seed=0, confusable_rate=0.5)
    kinds = many.manifest["confusable_pairs"]
    assert {"one_letter", "shared_word", "same_name"} <= set(kinds)
    fraction = many.manifest["entities_with_confusable"] / N
    assert 0.3 < fraction < 0.7
    by_id = {e["id"]: e for e in many.entities}
    same_type_across = 0
    for entity in many.entities:
        for sib in map(by_id.get, entity["confusable_with"]):
            a, b = entity["name"], sib["name"]
            shared = set(a.split()) & set(b.split())
            assert a == b or shared or _one_letter_apart(a, b), (a, b)
            assert entity["title"] != sib["title"]
            if a == b:
                assert entity["type"] != sib["type"] and "(" in entity["title"]
                same_type_across += 1
    assert same_type_across > 0


def test_aliases_are_unambiguous(world):
    names = {e["name"] for e in world.entities}
    aliases = [a for e in world.entities for a in e["aliases"]]
    assert aliases and len(aliases) == len(set(aliases))
    assert not names & set(aliases)
    persons = [e for e in world.entities if e["type"] == "person"]
    assert any(e["aliases"] == [e["name"].split()[-1]] for e in persons)


def test_chains_of_four_hops_exist(world, index):
    entities, _ = index
    edges = defaultdict(dict)
    for fact in world.facts:
        if "object" in fact:
            edges[fact["subject"]][fact["relation"]] = fact["object"]
    chain = ["created_by", "works_for", "founded_by", "born_in"]
    complete = 0
    for entity in world.entities:
        node, seen = entity["id"], [entity["id"]]
        for relation in chain:
            node = edges[node].get(relation)
            if node is None or node in seen:
                break
            seen.append(node)
        else:
            complete += 1
            assert [entities[i]["type"] for i in seen] == [
                "work", "person", "organisation", "person", "city"]
    assert complete > 5


def test_templates_carry_their_placeholders():
    for (etype, key), templates in T.OWN.items():
        assert len(templates) >= 4, key
        needs = {"{v}" if k in WP.ATTRIBUTES[etype] else "{o}" for k in key.split("+")}
        for template in templates:
            assert all(n in template for n in needs), template
    assert all("{l}" in t for ts in T.INV_LIST.values() for t in ts)
    assert all("{o}" in t for ts in T.INV_ONE.values() for t in ts)
    for templates in [*T.INV_LIST.values(), *T.INV_ONE.values(), *T.OPENING.values()]:
        assert len(templates) >= 5
    for template in [t for ts in T.FILLERS.values() for t in ts]:
        assert not any(p in template for p in ("{o}", "{v}", "{l}")), template
        assert not any(ch.isdigit() for ch in template), template


def test_cli_writes_all_files_and_skips_when_up_to_date(tmp_path):
    out = tmp_path / "world"
    cmd = [sys.executable, "-m", "data.world", "--out", str(out), "--docs", "120", "--seed", "3"]
    done = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["n_docs"] == 120 and manifest["seed"] == 3
    assert sum(manifest["counts_by_type"].values()) == 120
    corpus = (out / "corpus.jsonl").read_bytes()
    assert manifest["corpus_sha256"] == hashlib.sha256(corpus).hexdigest()
    assert len(corpus.splitlines()) == 120
    assert len((out / "entities.jsonl").read_bytes().splitlines()) == 120
    assert len((out / "facts.jsonl").read_bytes().splitlines()) == manifest["n_facts"]
    assert not (tmp_path / "world.partial").exists()
    again = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert "up to date" in again.stdout
    bad = subprocess.run(cmd[:-3] + ["3", "--seed", "1"], cwd=REPO_ROOT, capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.startswith("error:")


@pytest.mark.slow
def test_names_stay_unique_at_scale(tmp_path):
    manifest = W.write_world(tmp_path / "big", 100_000, seed=0, progress=False)
    titles, by_name = set(), defaultdict(list)
    with open(tmp_path / "big" / "corpus.jsonl") as handle:
        titles.update(json.loads(line)["title"] for line in handle)
    with open(tmp_path / "big" / "entities.jsonl") as handle:
        for line in handle:
            entity = json.loads(line)
            by_name[entity["name"]].append(entity)
    assert len(titles) == 100_000 == sum(manifest["counts_by_type"].values())
    for same in (group for group in by_name.values() if len(group) > 1):
        assert len(same) == 2 and same[0]["id"] in same[1]["confusable_with"], same


def test_invented_names_avoid_blocked_words():
    from data.world import generate_world
    from data.world_names import is_clean

    world = generate_world(2000, seed=3)
    assert all(is_clean(part) for e in world.entities for part in e["name"].split())
    assert not is_clean("Pe" + "nis Dylludell")
