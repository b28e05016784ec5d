"""RL's questions and recipes: the SFT model's pass rate on train_rl (sampling, resume, the filter rl.train
reads, the checkpoint it belongs to), the recipes and their ablation, and an RL seed beside the default run."""
import json
import subprocess
from pathlib import Path

import pytest
import yaml

from common.errors import UserError
from tests.test_agent import store  # noqa: F401  (fixture)
from tests.test_rl import write_questions


def test_pass_rate_filter(tmp_path):
    from rl.data import load_questions
    from rl.train import RLScriptArguments

    predictions = tmp_path / "p.jsonl"
    rows = [{"id": "q0", "prediction": "Ada Voss", "answers": ["Ada Voss"]}, {"id": "q1", "prediction": None, "answers": ["Kestrel"]},
            {"id": "q2", "prediction": "Kestrel", "answers": ["Kestrel"]}, {"id": "q2", "prediction": "x", "answers": ["Kestrel"]}]
    predictions.write_text("".join(json.dumps(r) + "\n" for r in rows))
    script = RLScriptArguments(questions=str(write_questions(tmp_path / "q.jsonl")), pass_rate_file=str(predictions), max_pass_rate=0.5)
    questions, stats = load_questions(script)
    assert [q["id"] for q in questions] == ["q1", "q2"]  # q0 is solved; q3 has no record: not measured, dropped
    assert stats["measured"] == 3 and stats["kept_by_pass_rate"] == 2
    # with answer_needs_evidence, a right answer without all gold documents seen counts as wrong
    for row, recall in zip(rows, [0.5, None, 1.0, 1.0]):
        row["evidence_recall"] = recall
    predictions.write_text("".join(json.dumps(r) + "\n" for r in rows))
    script.answer_needs_evidence = True
    assert [q["id"] for q in load_questions(script)[0]] == ["q0", "q1", "q2"]  # q0's right answer saw half its evidence
    del rows[0]["evidence_recall"]  # a raw agent.run line: the ids it saw decide
    rows[0].update(gold_doc_ids=["d1", "d2"], retrieved=["d2"], opened=["d1#3"])  # a passage counts for its document
    predictions.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert [q["id"] for q in load_questions(script)[0]] == ["q1", "q2"]  # q0 solved with its evidence seen
    del rows[0]["opened"]
    predictions.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(UserError, match="line 1: .*with id, prediction, gold_doc_ids, retrieved and opened; use the"):
        load_questions(script)


def test_answer_needs_evidence_reaches_the_rewards_and_keeps_old_fingerprints():
    from trl import GRPOConfig, ModelConfig

    from common.recipe import parse_recipe
    from rl.rewards import build_rewards
    from rl.train import RLScriptArguments, reward_settings, script_settings

    script = RLScriptArguments()
    assert "answer_needs_evidence" not in script_settings(script)  # off: stop-28 runs keep their fingerprint
    assert "rollout_stop_fit" not in script_settings(script)  # likewise runs from before stop 34
    script, *_ = parse_recipe((RLScriptArguments, GRPOConfig, ModelConfig), ["--config", "recipes/smollm2-135m/rl.yaml", "--answer_needs_evidence", "true"])
    assert script_settings(script)["answer_needs_evidence"] is True
    rewards = build_rewards(["em", "kimi", "format"], None, **reward_settings(script))
    assert [r.settings.get("answer_needs_evidence") for r in rewards] == [True, True, None]


def test_pass_rate_histogram():
    from rl.pass_rate import histogram

    records = [{"id": i, "em": em, "evidence_recall": 1.0, "prediction": "x"}
               for i, em in [("a", 1.0), ("a", 0.0), ("b", 0.0), ("b", 0.0), ("c", 1.0), ("c", 1.0)]]
    summary = histogram(records, 2)
    assert summary["by_correct_samples"] == {"0": 1, "1": 1, "2": 1}
    assert summary["mixed"] == 1 and summary["mean_pass_rate"] == 0.5
    assert summary["mixed_with_evidence"] == 1 and summary["share_right_without_evidence"] == 0.0
    assert summary["evidence_reward_spread"] == 0  # every sample saw all its evidence and answered
    records[4]["evidence_recall"] = 0.5  # c: one of its two right samples had not seen the gold documents
    records[3]["prediction"] = None  # b: never right, but one sample answered (recall 1) and one did not
    summary = histogram(records, 2)
    assert summary["mixed"] == 1 and summary["mixed_with_evidence"] == 2
    assert summary["share_right_without_evidence"] == pytest.approx(1 / 3)
    assert summary["evidence_reward_spread"] == 2  # b and c: the `evidence` reward differs between their samples


def test_pass_rate_records_score_as_the_rewards_do():
    """The pass-rate filter and histogram read agent.run records; the rewards read rollouts. Same rule."""
    from types import SimpleNamespace

    from rl.data import record_evidence_reward, record_score
    from rl.rewards import em, evidence

    cases = [("Kestrel", ["ada#1"], ["kestrel"]), ("Kestrel", ["ada"], []), (None, ["ada", "kestrel"], []), ("Norvania", [], ["ada"])]
    for prediction, retrieved, opened in cases:
        record = {"id": "q", "prediction": prediction, "answers": ["Kestrel"], "gold_doc_ids": ["ada", "kestrel"],
                  "retrieved": retrieved, "opened": opened}
        rollout = [{"role": "assistant", "content": f"<answer>{prediction}</answer>" if prediction else "I give up."}]
        env = SimpleNamespace(gold_doc_ids=["ada", "kestrel"], documents_seen=retrieved + opened)
        assert record_evidence_reward(record) == evidence([rollout], environments=[env])[0], record
        for needs in (False, True):
            assert record_score(record, needs) == em([rollout], [["Kestrel"]], [env], answer_needs_evidence=needs)[0], record


def test_pass_rate_samples_resume_and_feed_the_filter(store, tmp_path, tiny):
    from rl.data import pass_rates
    from rl.pass_rate import main

    questions = tmp_path / "q.jsonl"
    questions.write_text("".join(json.dumps({"id": f"q{i}", "question": f"Question {i}?", "answers": ["x"]}) + "\n"
                                 for i in range(3)))
    out = tmp_path / "rates"
    argv = ["--model", "tiny", "--questions", str(questions), "--datastore", "agent", "--out", str(out),
            "--samples", "2", "--limit", "2", "--max-new-tokens", "4", "--max-turns", "1"]
    main(argv)
    main(argv)  # a rerun resumes each sample folder: nothing is run or written twice
    records = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert sorted(r["id"] for r in records) == ["q0", "q0", "q1", "q1"]
    assert all(len((out / f"sample_{i}" / "predictions.jsonl").read_text().splitlines()) == 2 for i in range(2))
    assert json.loads((out / "pass_rates.json").read_text())["by_correct_samples"] == {"0": 2, "1": 0, "2": 0}
    assert pass_rates(str(out / "predictions.jsonl")) == {"q0": 0.0, "q1": 0.0}
    # each sample draws its own episodes (one seed for all made every question 0 or 4 of 4)
    runs = [json.loads((out / f"sample_{i}" / "metrics.json").read_text())["run"] for i in range(2)]
    assert [run["seed"] for run in runs] == [0, 1] and all(run["temperature"] == 1.0 for run in runs)
    turns = [[r["messages"] for r in map(json.loads, (out / f"sample_{i}" / "predictions.jsonl").read_text().splitlines())]
             for i in range(2)]
    assert turns[0] != turns[1]
    # a larger --limit adds the new questions' episodes to the same samples; a smaller one reads only its questions
    first = (out / "sample_0" / "predictions.jsonl").read_text()
    main(argv[:-6] + ["--limit", "3"] + argv[-4:])
    assert (out / "sample_0" / "predictions.jsonl").read_text().startswith(first)
    assert sorted(r["id"] for r in map(json.loads, (out / "predictions.jsonl").read_text().splitlines())) == \
        ["q0", "q0", "q1", "q1", "q2", "q2"]
    main(argv[:-6] + ["--limit", "1"] + argv[-4:])
    assert [r["id"] for r in map(json.loads, (out / "predictions.jsonl").read_text().splitlines())] == ["q0", "q0"]
    # a stamp from before the limit left the fingerprint (it named --limit) keeps the samples
    from common.io import config_hash
    from rl.pass_rate import parse_args, sampler_settings
    settings = sampler_settings(parse_args(argv))
    (out / "fingerprint.txt").write_text(config_hash({**settings, "limit": 2}) + "\n")
    main(argv)
    assert len((out / "sample_0" / "predictions.jsonl").read_text().splitlines()) == 3  # not redrawn: q2 stays
    assert (out / "fingerprint.txt").read_text().strip() == config_hash(settings)
    # the rates name the checkpoint they measured: RL from another one stops with the fix
    from rl.data import check_pass_rates_model
    check_pass_rates_model(str(out / "predictions.jsonl"), "tiny")
    summary = json.loads((out / "pass_rates.json").read_text())
    (out / "pass_rates.json").write_text(json.dumps({**summary, "model_digest": "another checkpoint"}))
    with pytest.raises(UserError, match="measured on another checkpoint.*make pass-rate"):
        check_pass_rates_model(str(out / "predictions.jsonl"), "tiny")
    with pytest.raises(UserError, match="question file .* does not exist"):
        main(["--model", "tiny", "--questions", str(tmp_path / "nope.jsonl"), "--out", str(tmp_path / "none")])
    assert not (tmp_path / "none").exists()
    with pytest.raises(UserError, match="starting checkpoint runs/nothing/final does not exist; train it with `make sft`"):
        main(["--model", "runs/nothing/final", "--questions", str(questions), "--out", str(tmp_path / "none")])
    assert not (tmp_path / "none").exists()
    main(argv[:-4] + ["--max-new-tokens", "5", "--max-turns", "1"])  # another setting: old samples go
    assert len((out / "sample_0" / "predictions.jsonl").read_text().splitlines()) == 2
    assert json.loads((out / "sample_0" / "metrics.json").read_text())["run"]["max_new_tokens"] == 5


def test_recipes_parse_and_the_ablation_differs_only_in_the_penalty():
    from trl import GRPOConfig, ModelConfig

    from common.recipe import parse_recipe
    from rl.train import RLScriptArguments

    parsed = {}
    for path in ("recipes/tiny/rl.yaml", "recipes/smollm2-135m/rl.yaml", "recipes/smollm2-135m/rl_nolen.yaml"):
        script, training, model = parse_recipe((RLScriptArguments, GRPOConfig, ModelConfig), ["--config", path])
        assert len(training.reward_weights) == len(script.reward_funcs)
        assert not training.use_vllm and training.vllm_mode in ("colocate", "server")
        assert Path(path).read_text().startswith("# ") and "python -m rl.train --config " + path in Path(path).read_text()
        parsed[path] = yaml.safe_load(Path(path).read_text())
    main, nolen = parsed["recipes/smollm2-135m/rl.yaml"], parsed["recipes/smollm2-135m/rl_nolen.yaml"]
    assert main["model_name_or_path"] == "runs/smollm2-135m/sft/final" and main["reward_funcs"] == ["em", "kimi"]
    assert nolen["reward_funcs"] == ["em"] and nolen["output_dir"] != main["output_dir"]
    differing = {key for key in main.keys() | nolen.keys() if main.get(key) != nolen.get(key)}
    assert differing == {"reward_funcs", "reward_weights", "output_dir"}


def test_the_pass_rate_stage_samples_as_rl_rolls_out():
    """make pass-rate must measure the default recipe's questions under the recipe's own rollout limits,
    and write the file the recipe reads."""
    from rl.pass_rate import parse_args

    recipe = yaml.safe_load(Path("recipes/smollm2-135m/rl.yaml").read_text())
    makefile = Path("Makefile").read_text()
    command = makefile[makefile.index("pass-rate: setup"):].split("\n\n")[0].replace("\\\n", " ")
    argv = command.split("rl.pass_rate", 1)[1].replace("$(MODEL)", "smollm2-135m").split()
    args = parse_args(argv)
    assert args.model == recipe["model_name_or_path"] and args.questions == recipe["questions"]
    assert str(Path(args.out) / "predictions.jsonl") == recipe["pass_rate_file"]
    assert args.max_new_tokens == recipe["max_turn_tokens"] and args.k == recipe["k"]
    assert args.max_turns == recipe["max_tool_calling_iterations"] + 1 and args.temperature == recipe["temperature"]


def make_dry_run(*targets: str) -> str:
    """What `make -n <targets>` would run (a failing make fails the test)."""
    return subprocess.run(["make", "-n", *targets], capture_output=True, text=True, check=True).stdout


def test_an_rl_seed_is_trained_and_evaluated_beside_the_default_run():
    """make rl / rl-nolen / eval / stop-fit STAGE=rl RL_SEED=1 write runs/<model>-rlseed1/, which eval.tables
    pairs with the SFT it started from and pools with the default run."""
    lines = make_dry_run("rl", "rl-nolen", "eval", "RL_SEED=1").splitlines()
    train = [line.split("rl.train ", 1)[1] for line in lines if "-m rl.train" in line]
    assert train == ["--config recipes/smollm2-135m/rl.yaml --seed 1 --output_dir runs/smollm2-135m-rlseed1/rl",
                     "--config recipes/smollm2-135m/rl_nolen.yaml --seed 1 --output_dir runs/smollm2-135m-rlseed1/rl_nolen"]
    evaluate = next(line for line in lines if "-m eval.run" in line)
    assert evaluate.endswith('--run_name smollm2-135m-rlseed1 --stages rl rl_stop rl_nolen --baselines ""')
    fit = make_dry_run("stop-fit", "STAGE=rl", "RL_SEED=1")
    assert "--model runs/smollm2-135m-rlseed1/rl/final" in fit and "--out runs/smollm2-135m-rlseed1/rl/stop_fit.json" in fit
    assert "--out runs/smollm2-135m/sft/stop_fit.json" in make_dry_run("stop-fit", "RL_SEED=1")  # SFT has no RL seed
    plain = make_dry_run("rl")
    assert "--seed" not in plain and "rlseed" not in plain
    own = subprocess.run(["make", "-n", "rl", "RL_SEED=0"], capture_output=True, text=True)
    assert own.returncode != 0 and "RL_SEED=0 is the recipe's own seed" in own.stderr


def test_make_all_trains_the_length_penalty_ablation_before_it_evaluates():
    """Issue 5's ablation is part of the recipe: make all trains RL with and without the penalty, then evaluates
    both, so make tables has the penalty-free row."""
    lines = make_dry_run("all").splitlines()
    order = [next(i for i, line in enumerate(lines) if command in line)
             for command in ("-m sft.train", "rl.train --config recipes/smollm2-135m/rl.yaml",
                             "rl.train --config recipes/smollm2-135m/rl_nolen.yaml", "-m eval.run", "-m eval.tables")]
    assert order == sorted(order)


def test_rl_refuses_pass_rates_of_another_checkpoint(tmp_path, runs):
    from rl.train import main

    rates = tmp_path / "rates"
    rates.mkdir()
    (rates / "predictions.jsonl").write_text(json.dumps({"id": "q0", "prediction": "x", "answers": ["x"]}) + "\n")
    (rates / "pass_rates.json").write_text(json.dumps({"model": "other", "model_digest": "0123456789abcdef"}))
    args = ["--config", "recipes/tiny/rl.yaml", "--questions", str(write_questions(tmp_path / "q.jsonl")),
            "--output_dir", str(tmp_path / "rl"), "--pass_rate_file", str(rates / "predictions.jsonl")]
    with pytest.raises(UserError, match="measured on another checkpoint than .*rerun `make pass-rate`"):
        main(args)
    assert not (tmp_path / "rl").exists()
    (rates / "pass_rates.json").write_text("[]")  # not a summary at all: one line too
    with pytest.raises(UserError, match="is not rl.pass_rate's summary"):
        main(args)
