"""Correction rows (data/corrections.py): the expert agrees with the oracle's own straight walks,
and where an episode goes wrong its move makes the progress the agent's turn did not; the same
verdicts scored over evaluated episodes (eval/expert_agreement.py)."""
import json
import shutil

import pytest

from agent.tools import SearchTools
from common.errors import UserError
from data import corrections as C
from data.leakage import PAIRED
from data.trajectory_oracle import Drop, Oracle, WorldIndex
from tests.test_trajectories import setup  # noqa: F401  (the module-scoped world, datastore and questions)


@pytest.fixture(scope="module")
def walks(setup):  # noqa: F811
    """(expert, {question id: question}, straight canonical oracle trajectories of chain questions)."""
    root, store, questions = setup
    oracle = Oracle(WorldIndex(root / "world"), store, canonical=True, p_find_miss=0.0, p_question=0.0)
    kept = []
    for question in questions:
        if question["type"] in PAIRED:
            continue
        try:
            record = oracle.build(question)
        except Drop:
            continue
        if not record["recovered"] and not record["opened"]:
            kept.append(record)
    expert = C.Expert(Oracle(WorldIndex(root / "world"), store))
    return expert, {q["id"]: q for q in questions}, kept


def episode(record: dict, messages: list[dict]) -> dict:
    return {"id": record["question_id"], "messages": messages}


def run_move(store, move: dict) -> dict:
    call = move["tool_calls"][0]["function"]
    return {"role": "tool", "name": call["name"], "content": SearchTools(store)._call(call["name"], dict(call["arguments"]))}


def test_the_oracles_straight_walks_need_no_correction(walks):
    expert, questions, kept = walks
    assert len(kept) >= 15 and any(t["hops"] >= 2 for t in kept)
    for record in kept:
        rows, counts = C.correction_rows(expert, questions[record["question_id"]], episode(record, record["messages"]))
        assert rows == [] and set(counts) == {"agree"}, (record["id"], counts)


def test_an_early_answer_gets_the_move_that_finds_the_missing_fact(setup, walks):  # noqa: F811
    """At every point of a walk before its last fact shows, an invented answer is corrected by a call
    whose real output makes the progress the verdict asks for; after it, by the gold answer."""
    _, store, _ = setup
    expert, questions, kept = walks
    calls = 0
    for record in kept:
        question, messages = questions[record["question_id"]], record["messages"]
        for at in [i for i, m in enumerate(messages) if m["role"] == "assistant"]:
            invented = messages[:at] + [{"role": "assistant", "content": "<answer>Nobody Atall</answer>"}]
            rows, counts = C.correction_rows(expert, question, episode(record, invented))
            last = at == len(messages) - 1
            assert [r["fixes"] for r in rows] == ["misread" if last else "answered_early"], counts
            row = rows[0]
            assert row["messages"][:-1] == C.as_context(messages[:at]) and "train" not in row["messages"][-1]
            assert all(m.get("train") is False for m in row["messages"][:-1] if m["role"] == "assistant")
            move = row["messages"][-1]
            if last:
                assert move == {"role": "assistant", "content": f"<answer>{question['answers'][0]}</answer>"}
                continue
            followed = messages[:at] + [move, run_move(store, move)]
            assert C.verdict(expert, question, followed, at, expert.progress(question, messages[:at])) == "agree"
            calls += 1
    assert calls >= 20


def test_a_refused_repeat_and_a_search_after_the_last_fact_are_corrected(setup, walks):  # noqa: F811
    _, store, _ = setup
    expert, questions, kept = walks
    record = next(t for t in kept if t["hops"] >= 2)
    question, messages = questions[record["question_id"]], record["messages"]
    tools, replayed = SearchTools(store), messages[:2]
    for m in messages[2:4]:  # the first call and its output, which shows the first fact
        replayed.append(m if m["role"] == "assistant" else
                        {**m, "content": tools._call(replayed[-1]["tool_calls"][0]["function"]["name"],
                                                     dict(replayed[-1]["tool_calls"][0]["function"]["arguments"]))})
    again = replayed[-2]
    refused = {"role": "tool", "name": again["tool_calls"][0]["function"]["name"],
               "content": tools._call(again["tool_calls"][0]["function"]["name"],
                                      dict(again["tool_calls"][0]["function"]["arguments"]))}
    assert refused["content"].startswith("Error: you already called")
    rows, _ = C.correction_rows(expert, question, episode(record, replayed + [again, refused]))
    assert [r["fixes"] for r in rows] == ["no_progress"] and rows[0]["messages"][-1] != again

    finished = messages[:-1]  # every fact shown; a search instead of the answer
    rows, _ = C.correction_rows(expert, question, episode(record, finished + [again]))
    assert [r["fixes"] for r in rows] == ["searched_on"]
    assert rows[0]["messages"][-1]["content"] == f"<answer>{question['answers'][0]}</answer>"


def test_the_command_writes_a_mixed_set_and_rejects_foreign_episodes(setup, walks, tmp_path):  # noqa: F811
    root, store, _ = setup
    expert, questions, kept = walks
    record = kept[0]
    invented = record["messages"][:2] + [{"role": "assistant", "content": "<answer>Nobody Atall</answer>"}]
    (tmp_path / "episodes.jsonl").write_text(json.dumps(episode(record, invented)) + "\n")
    (tmp_path / "questions.jsonl").write_text(json.dumps(questions[record["question_id"]]) + "\n")
    (tmp_path / "mix").mkdir()
    (tmp_path / "mix" / "trajectories.jsonl").write_text("".join(json.dumps(t) + "\n" for t in kept[1:4]))
    argv = ["--episodes", str(tmp_path / "episodes.jsonl"), "--questions", str(tmp_path / "questions.jsonl"),
            "--world", str(root / "world"), "--datastore", str(root / "datastore"), "--mix", str(tmp_path / "mix")]
    C.main(argv + ["--out", str(tmp_path / "out")])
    written = [json.loads(line) for line in open(tmp_path / "out" / "trajectories.jsonl")]
    assert [r["origin"] for r in written] == ["correction", "oracle"]
    assert json.loads((tmp_path / "out" / "report.json").read_text())["fixes"] == {"answered_early": 1}
    (tmp_path / "questions.jsonl").write_text(json.dumps({**questions[record["question_id"]], "id": "other"}) + "\n")
    with pytest.raises(UserError, match="has no question"):
        C.main(argv + ["--out", str(tmp_path / "out2")])
    (tmp_path / "questions.jsonl").write_text(json.dumps({**questions[record["question_id"]], "split": "test"}) + "\n")
    with pytest.raises(UserError, match="correction rows are training data"):
        C.main(argv + ["--out", str(tmp_path / "out2")])
    with pytest.raises(UserError, match="run the agent on train questions first"):
        C.main(["--episodes", str(tmp_path / "none.jsonl"), *argv[2:], "--out", str(tmp_path / "out2")])
    assert not (tmp_path / "out2").exists()


def test_expert_agreement_scores_each_turn_of_evaluated_episodes(setup, walks, runs):  # noqa: F811
    """Turn verdicts per benchmark, and per phrasing pool the facts a multi-hop episode's outputs showed."""
    from eval import expert_agreement as EA

    root, _, _ = setup
    expert, questions, kept = walks
    straight = next(t for t in kept if t["hops"] >= 2)
    other = next(t for t in kept if t["hops"] == 1)  # a 1-hop episode: out of the pool table
    invented = other["messages"][:2] + [{"role": "assistant", "content": "<answer>Nobody Atall</answer>"}]
    question = questions[straight["question_id"]]
    cut = next(i for i in range(len(straight["messages"]))
               if EA.facts_shown(expert, question, straight["messages"][:i]) == 1)
    half = straight["messages"][:cut] + [{"role": "assistant", "content": "<answer>Nobody Atall</answer>"}]
    folder = runs / "m" / "sft" / "eval" / "world_test"
    folder.mkdir(parents=True)
    (folder / "predictions.jsonl").write_text(
        json.dumps({**episode(straight, straight["messages"]), "prediction": straight["answers"][0]}) + "\n"
        + json.dumps(episode(other, invented)) + "\n")
    heldout = runs / "m" / "sft" / "eval" / "world_test_heldout"
    heldout.mkdir(parents=True)
    (heldout / "predictions.jsonl").write_text(json.dumps({**episode(straight, half), "prediction": "Nobody Atall"}) + "\n")
    (runs / "data/world/questions").mkdir(parents=True)
    (runs / "data/world/questions/test.jsonl").write_text(
        "".join(json.dumps(questions[t["question_id"]]) + "\n" for t in (straight, other)))
    (runs / "data/world/questions/test_heldout.jsonl").write_text(json.dumps({**question, "pool": "heldout"}) + "\n")
    EA.main(["m/sft", "--world", str(root / "world"), "--datastore", str(root / "datastore"), "--out", str(runs / "a.json")])
    report = json.loads((runs / "a.json").read_text())["m/sft"]
    assert set(report) == {"world_test", "world_test_heldout", "by_pool"}
    assert report["world_test"]["turn_agreement"] == 0.5 and report["world_test"]["all_agree"] == 0.5
    assert report["world_test"]["first_wrong"] == {"none": 0.5, "answered_early": 0.5}
    assert report["world_test_heldout"]["first_wrong"] == {"answered_early": 1.0}
    whole = {"episodes": 1, "first_fact_shown": 1.0, "all_facts_shown": 1.0, "em": 1.0}
    assert report["by_pool"] == {question["pool"]: whole, "heldout": {**whole, "all_facts_shown": 0.0, "em": 0.0}}
    with pytest.raises(UserError, match="run make eval"):
        EA.main(["other/sft", "--world", str(root / "world"), "--datastore", str(root / "datastore")])
    # make goals' slice of a benchmark is judged on its own, against its benchmark's questions
    shutil.copytree(heldout, runs / "m" / "sft" / "eval" / "world_test_heldout_2hop")
    EA.main(["m/sft", "--benchmarks", "world_test_heldout_2hop", "--world", str(root / "world"),
             "--datastore", str(root / "datastore"), "--out", str(runs / "b.json")])
    sliced = json.loads((runs / "b.json").read_text())["m/sft"]
    assert sliced == {"world_test_heldout_2hop": report["world_test_heldout"], "by_pool": {"heldout": report["by_pool"]["heldout"]}}
    with pytest.raises(UserError, match="judge world_test_heldout_2hop apart from world_test_heldout"):
        EA.main(["m/sft", "--benchmarks", "world_test_heldout", "world_test_heldout_2hop", "--world", str(root / "world"),
                 "--datastore", str(root / "datastore")])
