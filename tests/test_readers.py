"""Every corpus reader on its real sample file, format guessing, chunking, and bad input."""
import json

import pytest

from common.errors import UserError
from datastore.readers import chunk_documents, guess_format, read_corpus


def test_project_jsonl(realdata):
    docs = list(read_corpus(f"jsonl:{realdata}/hotpotqa_dev500/corpus.jsonl"))
    assert len(docs) == 4937
    assert docs[0]["id"] == "hpdev-0" and docs[0]["title"] == "Ed Wood (film)"
    assert docs[0]["text"].startswith("Ed Wood is a 1994 American")


def test_wiki18(realdata):
    docs = list(read_corpus(f"{realdata}/formats/search_r1_wiki18_corpus_sample.jsonl"))
    assert len(docs) == 10
    assert docs[0]["title"] == "Evan Morris"
    assert docs[0]["text"].startswith("Evan Morris Evan L. Morris")
    assert not docs[0]["text"].startswith('"')


def test_hotpot_official_distractor(realdata):
    path = f"{realdata}/hotpotqa_train100/hotpot_train_distractor_sample.json"
    assert guess_format(path) == "hotpot"
    docs = list(read_corpus(path))
    titles = {doc["title"] for doc in docs}
    records = json.load(open(path))
    for record in records:
        for title, _ in record["supporting_facts"]:
            assert title in titles
    assert len(titles) == len(docs)  # the union of contexts, each title once


def test_title_sentences(realdata):
    path = f"{realdata}/hotpotqa_train100/corpus_title_to_sentences.json"
    assert guess_format(path) == "title_sentences"
    docs = list(read_corpus(path))
    assert len(docs) == 994
    demon = next(doc for doc in docs if doc["title"] == "Demon Dice")
    assert demon["text"].startswith("Demon Dice, originally published as Chaos Progenitus")
    assert "In it, each player controls" in demon["text"]


def test_title_text_and_joined_spec(realdata):
    wiki = f"{realdata}/2wiki_distractors/corpus.json"
    assert guess_format(wiki) == "title_text"
    docs = list(read_corpus(f"jsonl:{realdata}/hotpotqa_dev500/corpus.jsonl+title_text:{wiki}"))
    assert len(docs) == 4937 + 6119
    assert len({doc["id"] for doc in docs}) == len(docs)


def test_ids_are_stable(realdata):
    path = f"{realdata}/2wiki_distractors/corpus.json"
    first = [doc["id"] for doc in read_corpus(path)][:50]
    assert first == [doc["id"] for doc in read_corpus(path)][:50]


def test_hf_saved_dataset(tmp_path):
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_dict({"id": ["a", "b"], "title": ["A", "B"], "text": ["x y", "z"]}).save_to_disk(tmp_path / "ds")
    docs = list(read_corpus(f"hf:{tmp_path / 'ds'}"))
    assert docs == [{"id": "a", "title": "A", "text": "x y"}, {"id": "b", "title": "B", "text": "z"}]


def test_corrupt_line_names_file_and_line(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"id": "1", "title": "T", "text": "ok"}\n{"id": "2", "title": \n')
    with pytest.raises(UserError, match=r"c\.jsonl, line 2: not valid JSON.*expected one JSON object per line"):
        list(read_corpus(f"jsonl:{path}"))


def test_missing_field_and_wrong_format(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"id": "1", "text": "no title"}\n')
    with pytest.raises(UserError, match=r"line 1: missing or non-string field\(s\) title"):
        list(read_corpus(f"jsonl:{path}"))
    with pytest.raises(UserError, match="expected a JSON list of HotpotQA records"):
        list(read_corpus(f"hotpot:{path}"))


def test_missing_file_and_duplicate_ids(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        list(read_corpus(str(tmp_path / "nope.jsonl")))
    path = tmp_path / "d.jsonl"
    path.write_text('{"id": "1", "title": "A", "text": "a"}\n{"id": "1", "title": "B", "text": "b"}\n')
    with pytest.raises(UserError, match="appears twice"):
        list(read_corpus(str(path)))


def test_chunking_ids_and_coverage():
    words = [f"w{i}" for i in range(450)]
    doc = {"id": "d", "title": "T", "text": " ".join(words)}
    passages = list(chunk_documents([doc, {"id": "s", "title": "S", "text": "short"}], max_words=200, overlap=40))
    assert [p["id"] for p in passages] == ["d#0", "d#1", "d#2", "s"]
    assert all(p["doc_id"] == "d" for p in passages[:3])
    covered = set(" ".join(p["text"] for p in passages[:3]).split())
    assert covered == set(words)
    assert passages[1]["text"].split()[0] == "w160"  # 40 words of overlap
    with pytest.raises(UserError):
        list(chunk_documents([doc], max_words=10, overlap=10))
