"""eval.batch_invariance: the comparison on hand-made records, and both passes run end to end."""
import json

import pytest

from datastore.build import DatastoreConfig, build
from eval.batch_invariance import SECOND_PASS, compare, main
from tests.test_datastore import write_corpus


def record(qid, prediction, gold, turns=("a",)):
    """An agent.run record as predictions.jsonl holds it: no score, the gold answers beside the prediction."""
    return {"id": qid, "prediction": prediction, "answers": [gold],
            "messages": [{"role": "assistant", "content": turn} for turn in turns]}


def test_compare_counts_answers_episodes_and_flips():
    first = {"q0": record("q0", "Paris", "Paris"), "q1": record("q1", "Rome", "Milan", ("a", "b")),
             "q2": record("q2", None, "Lima"), "q3": record("q3", "Oslo", "Oslo"), "only_first": record("x", "y", "y")}
    second = {"q0": record("q0", "Paris", "Paris", ("c",)),  # same answer, another episode
              "q1": record("q1", "Rome", "Milan", ("a", "b")),  # the same episode
              "q2": record("q2", "Lima", "Lima", ("d",)), "q3": record("q3", "Bern", "Oslo", ("e",))}
    report = compare(first, second)
    assert report["questions"] == 4  # only the shared questions
    assert report["same_answer"]["count"] == 2 and report["same_episode"]["count"] == 1
    assert report["right_to_wrong"] == 1 and report["wrong_to_right"] == 1
    assert report["em_first"] == report["em_second"] == 0.5
    low, high = report["same_answer"]["ci"]
    assert low < 0.5 < high  # 2 of 4 is a wide interval, not a point


def test_compare_refuses_runs_without_shared_questions():
    from common.errors import UserError

    with pytest.raises(UserError, match="share no question"):
        compare({"a": record("a", "x", "x")}, {"b": record("b", "x", "x")})


@pytest.fixture
def questions(runs, tmp_path):
    build(DatastoreConfig(name="agent", corpus=str(write_corpus(tmp_path / "corpus.jsonl")), retrievers=["bm25"]),
          progress=False)
    path = tmp_path / "q.jsonl"  # questions of different lengths, so batches need padding
    path.write_text("".join(json.dumps({"id": f"q{i}", "question": "Where " + "was " * i + "Ada born?", "answers": ["x"]})
                            + "\n" for i in range(7)))
    return path


@pytest.mark.parametrize("order, batch_size", [("same", 4), ("reverse", 1), ("shuffle", 1)])
def test_passes_agree_where_batch_mates_cannot_differ(questions, tmp_path, tiny, order, batch_size):
    """The control (same order twice) and one episode per batch must agree in full: a miss here
    means the backend is not deterministic or the passes are paired wrongly."""
    out = tmp_path / "check"
    main(["--out", str(out), "--order", order, "--", "--model", "tiny", "--questions", str(questions),
          "--datastore", "agent", "--limit", "5", "--max-new-tokens", "6", "--max-turns", "2",
          "--batch-size", str(batch_size), "--quiet"])
    report = json.loads((out / "report.json").read_text())
    assert report["questions"] == 5 and report["same_episode"]["count"] == 5
    main(["--out", str(out), "--order", order, "--", *report["agent_args"]])  # resumed: nothing runs again
    assert json.loads((out / "report.json").read_text())["seconds_this_run"] == report["seconds_this_run"]
    second = out / SECOND_PASS[order] / "predictions.jsonl"
    ids = [json.loads(line)["id"] for line in second.read_text().splitlines()]
    expected = {"same": ["q0", "q1", "q2", "q3", "q4"], "reverse": ["q4", "q3", "q2", "q1", "q0"]}
    assert ids == expected.get(order) or (order == "shuffle" and sorted(ids) == expected["same"] != ids)


def test_check_refuses_an_out_among_agent_arguments(questions, tmp_path):
    from common.errors import UserError

    with pytest.raises(UserError, match="leave --out out"):
        main(["--out", str(tmp_path / "c"), "--", "--model", "tiny", "--questions", str(questions),
              "--out", str(tmp_path / "x")])
