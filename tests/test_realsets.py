"""Real QA set readers on the real samples and on small official-format fixtures; the one-command build."""
import json

import pytest

from common.errors import UserError
from data.realsets import REAL_SETS, load_questions, load_set, prepare, prepare_named, read_hf
from datastore.readers import read_corpus, title_id

KEYS = {"id", "question", "answers", "hops", "type", "gold_doc_ids", "split", "source"}


def check_records(questions):
    assert questions and len({q["id"] for q in questions}) == len(questions)
    for q in questions:
        assert KEYS <= set(q)
        assert q["question"].strip() and q["answers"] and all(a.strip() for a in q["answers"])


def test_hotpotqa_dev500(realdata):
    spec = REAL_SETS["hotpotqa_dev500"]
    loaded = load_set(spec.format, realdata / spec.questions, realdata / spec.corpus, source="hotpotqa_dev500")
    check_records(loaded.questions)
    assert len(loaded.questions) == 500 and loaded.gold_unresolved == 0
    corpus = {doc["id"]: doc for doc in read_corpus(f"jsonl:{realdata / spec.corpus}")}
    raw = [json.loads(line) for line in open(realdata / spec.questions)]
    for q, row in zip(loaded.questions, raw):
        assert q["id"] == row["id"] and q["answers"] == [row["answer"]] and q["hops"] == 2
        assert q["split"] == "test" and q["source"] == "hotpotqa_dev500"
        # every gold title resolves to a corpus row with that title
        assert sorted(corpus[i]["title"] for i in q["gold_doc_ids"]) == sorted(row["gold_titles"])
    assert {q["type"] for q in loaded.questions} == {"bridge", "comparison"}


def test_hotpotqa_dev500_with_distractors(realdata):
    spec = REAL_SETS["hotpotqa_dev500"]
    loaded = load_set(spec.format, realdata / spec.questions, realdata / spec.corpus,
                      f"title_text:{realdata / '2wiki_distractors/corpus.json'}")
    assert len(loaded.docs) == 4937 + 6119 and len({d["id"] for d in loaded.docs}) == len(loaded.docs)
    assert all(g.startswith("hpdev-") for q in loaded.questions for g in q["gold_doc_ids"])


def test_hotpotqa_train100(realdata):
    path = realdata / REAL_SETS["hotpotqa_train100"].questions
    loaded = load_set("hotpot", path, split="train")
    check_records(loaded.questions)
    assert len(loaded.questions) == 100
    corpus_ids = {doc["id"] for doc in read_corpus(f"hotpot:{path}")}   # what datastore.readers yields
    assert {doc["id"] for doc in loaded.docs} == corpus_ids
    for q in loaded.questions:
        assert 1 <= len(q["gold_doc_ids"]) <= 2 and set(q["gold_doc_ids"]) <= corpus_ids
        assert q["type"] in ("bridge", "comparison") and q["split"] == "train"
    first = loaded.questions[0]
    assert first["id"] == "5a77ec115542992a6e59dff7" and first["answers"] == ["a spirit"]
    assert first["gold_doc_ids"] == [title_id("hotpot", "Alû"), title_id("hotpot", "Lilu (mythology)")]


def test_bamboogle(realdata):
    loaded = load_set("bamboogle", realdata / "bamboogle/test.csv", source="bamboogle")
    check_records(loaded.questions)
    assert len(loaded.questions) == 125 and loaded.docs is None
    first = loaded.questions[0]
    assert first["id"] == "bamboogle-0" and first["answers"] == ["james madison"] and first["hops"] == 2
    assert loaded.questions[-1]["answers"] == ["One World, One Dream"]


def test_flashrag_nq(realdata):
    loaded = load_set("flashrag", realdata / "formats/flashrag_nq_test_sample.jsonl")
    check_records(loaded.questions)
    assert loaded.docs is None
    assert all(q["gold_doc_ids"] == [] and q["hops"] is None for q in loaded.questions)
    assert loaded.questions[2]["answers"] == ["Olivia", "MFSK"]


def _musique_row(qid, hops, answerable=True):
    paragraphs = [{"idx": i, "title": f"Title {qid} {i}", "paragraph_text": f"Text {i} of {qid}.",
                   "is_supporting": i < hops} for i in range(hops + 2)]
    steps = [{"id": i, "question": f"step {i}", "answer": f"a{i}", "paragraph_support_idx": i} for i in range(hops)]
    return {"id": qid, "paragraphs": paragraphs, "question": f"What is {qid}?", "question_decomposition": steps,
            "answer": "Lima", "answer_aliases": ["Lima, Peru", "Lima"], "answerable": answerable}


def test_musique_fixture(tmp_path):
    path = tmp_path / "musique_dev.jsonl"
    rows = [_musique_row("2hop__1_2", 2), _musique_row("3hop1__1_2_3", 3), _musique_row("2hop__9_9", 2, False)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    loaded = load_set("musique", path, source="musique")
    check_records(loaded.questions)
    assert [q["hops"] for q in loaded.questions] == [2, 3]
    assert loaded.skipped == {"unanswerable": 1}
    assert loaded.questions[0]["answers"] == ["Lima", "Lima, Peru"] and loaded.questions[0]["type"] == "musique"
    ids = {doc["id"] for doc in loaded.docs}
    gold = title_id("musique", "Title 2hop__1_2 0\nText 0 of 2hop__1_2.")
    assert loaded.questions[0]["gold_doc_ids"][0] == gold and gold in ids
    assert len(loaded.questions[1]["gold_doc_ids"]) == 3 and set(loaded.questions[1]["gold_doc_ids"]) <= ids


def test_2wiki_fixture(tmp_path):
    rows = [{"_id": "a1", "type": "comparison", "question": "Who was born first, X or Y?", "answer": "X",
             "context": [["X", ["X was born in 1900.", "He was a poet."]], ["Y", ["Y was born in 1910."]],
                         ["Z", ["Z is a town."]]],
             "supporting_facts": [["X", 0], ["Y", 0]], "evidences": [["X", "born", "1900"], ["Y", "born", "1910"]]},
            {"_id": "b2", "type": "bridge_comparison", "question": "Which film's director died first?", "answer": "F1",
             "context": [[t, [f"{t} text."]] for t in ("F1", "F2", "D1", "D2")],
             "supporting_facts": [[t, 0] for t in ("F1", "F2", "D1", "D2")], "evidences": []}]
    path = tmp_path / "dev.json"
    path.write_text(json.dumps(rows))
    loaded = load_set("2wiki", path)
    check_records(loaded.questions)
    assert [q["hops"] for q in loaded.questions] == [2, 4]
    assert loaded.questions[0]["gold_doc_ids"] == [title_id("2wiki", "X"), title_id("2wiki", "Y")]
    x = next(doc for doc in loaded.docs if doc["title"] == "X")
    assert x["text"] == "X was born in 1900. He was a poet." and len(loaded.docs) == 7


def test_browsecomp_plus_fixture(tmp_path):
    queries, corpus = tmp_path / "queries.jsonl", tmp_path / "corpus.jsonl"
    queries.write_text(json.dumps({"query_id": 7, "query": "Which band ...?", "answer": "The Foo",
                                   "evidence_docs": [{"docid": "101", "text": "..."}, {"docid": "102", "text": "..."}],
                                   "gold_docs": [{"docid": "102", "text": "..."}]}) + "\n"
                       + json.dumps({"query_id": "8", "query": "Who ...?", "answer": "Ann", "gold_docs": ["103"]}) + "\n")
    corpus.write_text("".join(json.dumps(d) + "\n" for d in [
        {"docid": "101", "text": "---\ntitle: The Foo (band)\n---\nThe Foo are a band.", "url": "https://x/foo"},
        {"docid": "102", "text": "Album list\nThe Foo released ...", "url": "https://x/albums"},
        {"docid": "103", "text": "Ann is a singer.", "title": "Ann"}]))
    loaded = load_set("browsecomp_plus", queries, corpus)
    check_records(loaded.questions)
    assert [q["gold_doc_ids"] for q in loaded.questions] == [["101", "102"], ["103"]]
    assert loaded.questions[0]["id"] == "7" and loaded.questions[0]["type"] == "browsecomp"
    assert [d["title"] for d in loaded.docs] == ["The Foo (band)", "Album list", "Ann"]
    with pytest.raises(UserError, match=r"queries.jsonl, line 1: .*'docid'.*expected .*\"docid\" and \"text\""):
        load_set("browsecomp_plus", corpus, queries)   # files swapped: the corpus lacks docid


@pytest.mark.parametrize("fmt, name, content, expected", [
    ("flashrag", "nq.jsonl", '{"id": 1, "question": "q", "golden_answers": ["a"]}\n{"id": 2, "question"\n',
     ["nq.jsonl", "line 2", "not valid JSON", "golden_answers"]),
    ("flashrag", "nq.jsonl", '{"id": 1, "question": "q", "golden_answers": "a"}\n',
     ["line 1", "golden_answers", "not a list"]),
    ("hotpot_titles", "q.jsonl", '{"id": "x", "answer": "a", "type": "bridge", "gold_titles": []}\n',
     ["q.jsonl", "line 1", "'question'", "gold_titles"]),
    ("bamboogle", "test.csv", "Q,A\nwho?,me\n", ["test.csv", "line 1", "Question,Answer"]),
    ("bamboogle", "test.csv", "Question,Answer\nwho?,\n", ["test.csv", "row 1", "no non-empty answer"]),
    ("hotpot", "h.json", '{"_id": "x"}', ["h.json", "top level", "not a JSON list", "supporting_facts"]),
    ("2wiki", "w.json", '[{"_id": "x", "type": "t", "question": "q", "answer": "a", "context": []}]',
     ["w.json", "record 0", "supporting_facts"]),
    ("musique", "m.jsonl", '{"id": "x", "question": "q", "answer": "a"}\n',
     ["m.jsonl", "line 1", "paragraphs", "question_decomposition"]),
    ("browsecomp_plus", "b.jsonl", '{"query_id": "1", "query": "q", "answer": "a"}\n',
     ["b.jsonl", "line 1", "evidence_docs", "gold_docs"]),
])
def test_bad_input_names_file_line_and_format(tmp_path, fmt, name, content, expected):
    path = tmp_path / name
    path.write_text(content)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"id": "d1", "title": "T", "text": "x"}\n')
    with pytest.raises(UserError) as info:
        load_set(fmt, path, corpus if fmt == "hotpot_titles" else None)
    for part in expected:
        assert part in str(info.value)


def test_missing_file_and_unknown_names(tmp_path, runs):
    with pytest.raises(UserError, match="does not exist"):
        load_set("flashrag", tmp_path / "absent.jsonl")
    with pytest.raises(UserError, match="unknown format"):
        load_set("squad", tmp_path / "absent.jsonl")
    with pytest.raises(UserError, match="named sets: hotpotqa_dev500"):
        prepare_named("no_such_set")
    with pytest.raises(UserError, match="make data DATASET=missing"):
        load_questions("missing")


def test_duplicate_question_ids(tmp_path):
    path = tmp_path / "nq.jsonl"
    path.write_text('{"id": 1, "question": "q", "golden_answers": ["a"]}\n' * 2)
    with pytest.raises(UserError, match="appears twice"):
        load_set("flashrag", path)


def test_hub_dataset_offline_is_a_user_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(UserError, match="needs the network"):
        read_hf("no-such-org/no-such-dataset")


def test_one_command_build(realdata, runs):
    from datastore.retriever import Datastore

    manifest = prepare_named("hotpotqa_train100", retrievers=["bm25"], progress=False)
    out = runs / "data" / "hotpotqa_train100"
    questions = load_questions("hotpotqa_train100")
    assert len(questions) == 100 and all(q["source"] == "hotpotqa_train100" for q in questions)
    assert manifest["counts"]["questions"] == 100 and manifest["counts"]["by_hops"] == {"2": 100}
    assert sum(manifest["counts"]["by_type"].values()) == 100
    gold = manifest["gold"]
    assert gold["resolved"] == gold["gold_ids"] > 100 and gold["questions_all_resolved"] == 100
    assert not any(str(realdata) in json.dumps(i) for i in manifest["inputs"])   # no machine paths
    store = Datastore.load("hotpotqa_train100")
    assert store.info()["docs"] == manifest["counts"]["docs"]
    results = store.search_batch([q["question"] for q in questions], k=10)
    found = sum(bool(set(q["gold_doc_ids"]) & {hit.doc_id for hit in hits}) for q, hits in zip(questions, results))
    assert found >= 80, f"only {found}/100 questions find a gold document in the BM25 top-10"
    # a second run with the same inputs is skipped: nothing is rewritten
    stamp = (out / "questions.jsonl").stat().st_mtime_ns
    assert prepare_named("hotpotqa_train100", retrievers=["bm25"], progress=False) == manifest
    assert (out / "questions.jsonl").stat().st_mtime_ns == stamp


def test_questions_only_set(realdata, runs, capsys):
    manifest = prepare_named("bamboogle", retrievers=["bm25"], progress=False)
    assert manifest["counts"] == {**manifest["counts"], "questions": 125, "docs": 0}
    assert manifest["gold"] is None
    assert not (runs / "data" / "bamboogle" / "corpus.jsonl").exists()
    assert not (runs / "datastore" / "bamboogle").exists()
    assert "external corpus" in capsys.readouterr().out


def test_custom_set_command(tmp_path, runs):
    path = tmp_path / "m.jsonl"
    path.write_text(json.dumps(_musique_row("2hop__1_2", 2)) + "\n")
    manifest = prepare("mini_musique", "musique", str(path), retrievers=None, progress=False)
    assert manifest["counts"]["docs"] == 4 and manifest["gold"]["resolved"] == 2
    rows = [json.loads(line) for line in open(runs / "data" / "mini_musique" / "corpus.jsonl")]
    assert {"id", "title", "text"} == set(rows[0])
