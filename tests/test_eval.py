"""Evaluation: tables from fixture results, refusal of foreign predictions, CIs, the Pareto front,
the stale-result check of `make eval`, and the scorer against the official HotpotQA formulas."""
import json
import re
import shutil
import string
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from common.paths import runs_dir
from eval.metrics import best_em, best_f1

QUESTIONS = [{"id": f"q{i}", "question": f"Q{i}?", "answers": [ans], "hops": hops, "type": kind}
             for i, (ans, hops, kind) in enumerate([("Paris", 1, "lookup"), ("1874", 2, "bridge"),
                                                     ("yes", 2, "yesno"), ("Ada Vell", 3, "bridge")])]


def write_result(runs: Path, stage: str, benchmark: str, predictions: list, tokens: int, calls: int = 2, run: str = "m",
                 questions: list = QUESTIONS):
    from agent.run import score

    records = [{**q, "prediction": p, "tokens_generated": tokens, "tool_calls": calls, "valid_tool_calls": calls,
                "retrieved": [], "opened": [], "finish": "answer"} for q, p in zip(questions, predictions)]
    metrics = score(records)
    metrics["run"] = {"questions": str(runs / "data/world/questions/test.jsonl")}
    out = runs / run / stage / "eval" / benchmark
    out.mkdir(parents=True)
    (out / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (out / "metrics.json").write_text(json.dumps(metrics))
    return out


@pytest.fixture
def fixture_runs(runs):
    questions = runs / "data/world/questions"
    questions.mkdir(parents=True)
    (questions / "test.jsonl").write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    write_result(runs, "sft", "world_test", ["Paris", "1874", "no", None], tokens=100)
    write_result(runs, "rl", "world_test", ["Paris", "1874", "yes", "Ada Vell"], tokens=60)
    write_result(runs, "rl_nolen", "world_test", ["Paris", "1874", "yes", "Ada"], tokens=120)
    write_result(runs, "closed-book", "world_test", [None, "1900", "no", None], tokens=10, calls=0)
    return runs


def test_tables_from_fixture(fixture_runs, tmp_path):
    from eval.tables import build_tables, write_tables

    lines = []
    tables = {t.name: t for t in build_tables(fixture_runs, log=lines.append)}
    main = tables["main"]
    assert [row[1] for row in main.rows] == ["closed-book", "SFT", "SFT+RL", "SFT+RL, no length penalty"]
    sft = main.rows[1]
    assert sft[2].startswith("0.500 [") and sft[2].endswith("/ 0.500")
    assert sft[-2] == "100" and sft[-1] == "200"  # tokens per episode; per correct answer = 400 / 2
    assert sft[main.headers.index("answers after a miss")] == "-"  # no episode messages: no tool outputs to read
    rl = main.rows[2]
    assert rl[2].startswith("1.000 [1.00, 1.00]")
    assert len(tables["ablation"].rows) == 6  # (sft, rl, rl_nolen) x (world_test, all)
    hops = tables["by_hops"]
    assert hops.headers[3:] == ["1", "2", "3"]
    assert hops.rows[1][3:] == ["1.00 (1)", "0.50 (2)", "0.00 (1)"]
    assert "retrieval" not in tables and any("retrieval" in line for line in lines)
    write_tables(list(tables.values()), tmp_path / "tables")
    assert (tmp_path / "tables/main.csv").read_text().splitlines()[0].startswith("model,stage,world_test")
    latex = (tmp_path / "tables/main.tex").read_text()
    assert "\\begin{tabular}{llrrrrrrrrr}" in latex and "rl\\_nolen" not in latex and "\\toprule" in latex


def test_foreign_predictions_are_refused(fixture_runs):
    from eval.tables import build_tables

    out = write_result(fixture_runs, "rl", "world_test_heldout", ["Paris"] * 4, tokens=50)
    (out / "predictions.jsonl").write_text((out / "predictions.jsonl").read_text().replace('"q3"', '"other-7"'))
    held = fixture_runs / "data/world/questions/test_heldout.jsonl"
    held.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    lines = []
    main = build_tables(fixture_runs, log=lines.append)[0]
    assert "world_test_heldout" not in main.headers
    assert any(line.startswith("refused") and "1 of its 4 predictions" in line for line in lines)


def test_plots_are_drawn(fixture_runs, tmp_path):
    from eval.plots import draw_all

    drawn = draw_all(fixture_runs, tmp_path)
    assert {p.name for p in drawn} == {"em_vs_tokens.png", "em_by_hops.png"}  # no training logs in the fixture
    assert all(p.stat().st_size > 1000 for p in drawn)


def test_tables_keep_only_the_named_runs(fixture_runs, tmp_path):
    from common.errors import UserError
    from eval.plots import draw_all
    from eval.tables import build_tables

    write_result(fixture_runs, "sft", "world_test", ["Paris", None, None, None], tokens=70, run="m-probe")
    summary = fixture_runs / "m-probe/sft/train_summary.json"
    summary.write_text(json.dumps({"wall_seconds": 12, "loss_history": [{"step": 1, "loss": 2.0}, {"step": 2, "loss": 1.0}]}))
    everything = {t.name: t for t in build_tables(fixture_runs, log=lambda _: None)}
    assert {row[0] for row in everything["main"].rows} == {"m", "m-probe"}
    assert any("m-probe" in row[1] for row in everything["timing"].rows)
    chosen = {t.name: t for t in build_tables(fixture_runs, log=lambda _: None, only={"m", "tiny"})}
    assert {row[0] for row in chosen["main"].rows} == {"m"}
    assert not any("m-probe" in " ".join(row) for table in chosen.values() for row in table.rows)
    assert "training.png" in {p.name for p in draw_all(fixture_runs, tmp_path / "all")}
    assert "training.png" not in {p.name for p in draw_all(fixture_runs, tmp_path / "m", only={"m"})}  # m-probe's loss only
    with pytest.raises(UserError, match="no evaluation results of the runs nope under"):
        build_tables(fixture_runs, log=lambda _: None, only={"nope"})


def test_bootstrap_ci_known_case():
    from eval.stats import bootstrap_ci

    low, high = bootstrap_ci([1] * 50 + [0] * 50)
    assert abs(low - 0.40) <= 0.02 and abs(high - 0.60) <= 0.02  # normal approx: 0.5 +- 1.96 * 0.05
    assert bootstrap_ci([1, 1, 1]) == (1.0, 1.0)
    assert bootstrap_ci([]) is None
    assert bootstrap_ci([0, 1] * 20) == bootstrap_ci([0, 1] * 20)  # seeded


def test_paired_bootstrap_pairs_questions():
    from eval.stats import bootstrap_ci, mean_difference, paired_bootstrap, relative_change

    before = [1, 0] * 20
    after = [1, 1] + before[2:]  # one question turned right, nothing else changed
    delta, (low, high) = paired_bootstrap(after, before, mean_difference)
    assert delta == pytest.approx(1 / 40) and low == 0.0 and high <= 0.1
    separate = bootstrap_ci(after), bootstrap_ci(before)
    assert separate[0][1] - separate[0][0] > 0.2  # unpaired intervals are an order of magnitude wider
    change, interval = paired_bootstrap([50, 50], [100, 100], relative_change)
    assert change == -0.5 and interval == (-0.5, -0.5)
    with pytest.raises(ValueError):
        paired_bootstrap([1, 0], [1], mean_difference)
    change, interval = paired_bootstrap([5, 0, 0, 0], [0, 0, 0, 1], relative_change)  # some resamples divide by 0
    assert change == 4.0 and all(np.isfinite(interval))  # ~32% of resamples lack the 1: left out
    assert all(np.isnan(paired_bootstrap([1, 0, 0, 0], [0, 0, 0, 0], relative_change)[1]))  # all divide by 0


def test_seeds_of_a_question_are_resampled_together():
    from eval.stats import mean_difference, paired_bootstrap

    rng = np.random.default_rng(1)
    before = np.repeat(rng.integers(0, 2, size=(40, 1)), 2, axis=1).astype(float)
    after = np.maximum(before, rng.integers(0, 2, size=(40, 1)))  # the seeds agree on every question
    pooled = paired_bootstrap(after, before, mean_difference)
    # with equal seeds per question this is the bootstrap of the per-question means
    assert pooled == paired_bootstrap(after.mean(axis=1), before.mean(axis=1), mean_difference)
    as_pairs = paired_bootstrap(after.ravel(), before.ravel(), mean_difference)  # seeds as if independent
    assert pooled[0] == pytest.approx(as_pairs[0])
    assert pooled[1][1] - pooled[1][0] > (as_pairs[1][1] - as_pairs[1][0]) * 1.3  # ~sqrt(2) where they agree
    # two seeds against one: each side's per-question mean, the same questions drawn for both
    one_seed = before[:, :1]
    assert paired_bootstrap(after, one_seed, mean_difference) == paired_bootstrap(after.mean(axis=1), one_seed[:, 0],
                                                                                 mean_difference)
    with pytest.raises(ValueError):
        paired_bootstrap(np.zeros((4, 2)), np.zeros((3, 2)), mean_difference)  # not one row per question


def test_rl_runs_pair_with_the_sft_they_started_from_and_seeds_pool(fixture_runs):
    from common.errors import UserError
    from eval.tables import build_tables

    for run in ("m", "m-rlseed1"):
        for stage in ("rl", "rl_nolen"):
            (fixture_runs / run / stage).mkdir(parents=True, exist_ok=True)
            (fixture_runs / run / stage / "train_summary.json").write_text(json.dumps({"start": "runs/m/sft/final"}))
    write_result(fixture_runs, "rl", "world_test", ["Paris", "1874", "no", None], tokens=80, run="m-rlseed1")
    write_result(fixture_runs, "rl_nolen", "world_test", ["Paris", "1900", "no", None], tokens=90, run="m-rlseed1")
    tables = {t.name: t for t in build_tables(fixture_runs, log=lambda line: None, seed_pools=[["m", "m-rlseed1"]])}
    rows = {(row[0], row[1]): row for row in tables["paired"].rows}
    seed1 = rows[("m-rlseed1", "SFT+RL vs SFT")]  # no SFT of its own: paired with m's, which it started from
    assert seed1[3:6] == ["4", "0.500 -> 0.500", "+0.000 [+0.00, +0.00]"]
    pooled = rows[("m + m-rlseed1", "SFT+RL vs SFT")]  # EM 0.5 -> (1.0 + 0.5) / 2
    assert pooled[3:5] == ["4 x 2", "0.500 -> 0.750"] and pooled[6] == "100 -> 70"
    assert rows[("m + m-rlseed1", "length penalty vs none (both RL)")][4] == "0.500 -> 0.750"
    write_result(fixture_runs, "sft_stop", "world_test", ["Paris", None, "no", None], tokens=150)
    write_result(fixture_runs, "rl_stop", "world_test", ["Paris", "1874", "yes", None], tokens=140, run="m-rlseed1")
    paired = {t.name: t for t in build_tables(fixture_runs, log=lambda line: None)}["paired"]
    rows = {(row[0], row[1]): row for row in paired.rows}
    both = rows[("m-rlseed1", "SFT+RL vs SFT, both with their calibrated stop")]  # rl_stop: the rl checkpoint's start
    assert both[2:5] == ["world_test", "4", "0.250 -> 0.750"] and both[6] == "150 -> 140"
    greedy = rows[("m-rlseed1", "SFT+RL with its calibrated stop vs greedy SFT")]  # no sft_stop needed for this one
    assert greedy[2:5] == ["world_test", "4", "0.500 -> 0.750"] and greedy[6] == "100 -> 140"
    for pool in (["m", "nope"], ["m", "m"]):
        with pytest.raises(UserError, match=f"--pool {' '.join(pool)}: name two or more different runs"):
            build_tables(fixture_runs, log=lambda line: None, seed_pools=[pool])


def test_a_variant_pairs_with_its_base_stage_by_stage_question_by_question(fixture_runs):
    from common.errors import UserError
    from eval.tables import build_tables

    write_result(fixture_runs, "rl", "world_test", ["Paris", "1874", "no", None], tokens=80, run="m-rlseed1")
    write_result(fixture_runs, "rl", "world_test", ["Paris", "1874", "yes", None], tokens=30, run="v")
    write_result(fixture_runs, "rl", "world_test", ["Paris", "1874", "yes", "Ada Vell"], tokens=50, run="v1")
    for run in ("v1", "m"):  # both evaluated one base model: no row compares it with itself
        out = write_result(fixture_runs, "base", "world_test", ["Paris", None, None, None], tokens=9, run=run)
        metrics = json.loads((out / "metrics.json").read_text())
        (out / "metrics.json").write_text(json.dumps({**metrics, "run": {**metrics["run"], "model": "tiny"}}))
    tables = {t.name: t for t in build_tables(fixture_runs, log=lambda line: None, versus=[["v+v1", "m+m-rlseed1"], ["v1", "m"]])}
    rows = {(row[0], row[1], row[2]): row for row in tables["paired"].rows}
    assert ("v1", "base (tools): against m", "world_test") not in rows
    for run, weights in (("v1", "aaa"), ("m", "bbb")):  # the same path, other weights (retrained, or a folder moved)
        (fixture_runs / run / "base/eval/world_test/fingerprint.json").write_text(json.dumps({"model": weights}))
    retrained = build_tables(fixture_runs, log=lambda line: None, versus=[["v1", "m"]])
    assert any(row[1] == "base (tools): against m" for table in retrained if table.name == "paired" for row in table.rows)
    for run in ("v1", "m"):
        (fixture_runs / run / "base/eval/world_test/fingerprint.json").unlink()
    metrics_path = fixture_runs / "v1/base/eval/world_test/metrics.json"  # the same weights decoded otherwise
    metrics = json.loads(metrics_path.read_text())
    metrics_path.write_text(json.dumps({**metrics, "run": {**metrics["run"], "release_repeats": True}}))
    decoded = build_tables(fixture_runs, log=lambda line: None, versus=[["v1", "m"]])
    assert any(row[1] == "base (tools): against m" for table in decoded if table.name == "paired" for row in table.rows)
    metrics_path.write_text(json.dumps(metrics))
    pooled = rows[("v + v1", "SFT+RL: against m + m-rlseed1", "world_test")]  # the one stage all four runs have
    # v (EM 0.75) pairs with m (1.0), v1 (1.0) with m-rlseed1 (0.5): 0.75 -> 0.875
    assert pooled[3:5] == ["4 x 2", "0.750 -> 0.875"] and pooled[6] == "70 -> 40"
    assert rows[("v1", "SFT+RL: against m", "world_test")][3:5] == ["4", "1.000 -> 1.000"]
    assert [row[1] for row in tables["paired"].rows if row[0] in ("v1", "v + v1") and ": against" in row[1]] == \
        ["SFT+RL: against m + m-rlseed1", "SFT+RL: against m"]
    lines = []
    build_tables(fixture_runs, log=lines.append)
    assert "no paired row for v/rl: the SFT it started from (v/sft) has no evaluation" in "\n".join(lines)
    two_vs_one = {t.name: t for t in build_tables(fixture_runs, log=lambda line: None, versus=[["v+v1", "m"]])}
    row = next(row for row in two_vs_one["paired"].rows if row[1] == "SFT+RL: against m")
    assert row[3:5] == ["4 x (2 vs 1)", "1.000 -> 0.875"] and row[6] == "60 -> 40"  # (0.75 + 1.0) / 2 against m's 1.0
    for pair in (["v+v", "m"], ["v", "v"], ["v", "nope"]):
        with pytest.raises(UserError, match=f"--versus {re.escape(' '.join(pair))}: name each run once"):
            build_tables(fixture_runs, log=lambda line: None, versus=[pair])


def test_paired_table_matches_questions_by_id(fixture_runs):
    from eval.tables import build_tables

    from eval.results import collect_benchmarks, grouped
    from eval.tables import paired_records

    sft = fixture_runs / "m/sft/eval/world_test/predictions.jsonl"
    sft.write_text("".join(reversed(sft.read_text().splitlines(keepends=True))))  # order must not matter
    stages = grouped(collect_benchmarks(fixture_runs, log=lambda line: None))
    new, old = paired_records(stages[("m", "rl")], stages[("m", "sft")], ["world_test"])
    assert [r["id"] for r in new] == [r["id"] for r in old] == ["q0", "q1", "q2", "q3"]
    assert [r["prediction"] for r in old] == ["Paris", "1874", "no", None]
    paired = {t.name: t for t in build_tables(fixture_runs, log=lambda line: None)}["paired"]
    rows = {row[1]: row for row in paired.rows}
    assert set(rows) == {"SFT+RL vs SFT", "length penalty vs none (both RL)", "SFT+RL without the length penalty vs SFT"}
    outcome_only = rows["SFT+RL without the length penalty vs SFT"]  # EM [1, 1, 0, 0] -> [1, 1, 1, 0]; tokens 100 -> 120
    assert outcome_only[4] == "0.500 -> 0.750" and outcome_only[6:8] == ["100 -> 120", "+20% [+20%, +20%]"]
    vs_sft = rows["SFT+RL vs SFT"]  # EM [1, 1, 0, 0] -> [1, 1, 1, 1]; tokens 100 -> 60
    assert vs_sft[2:5] == ["world_test", "4", "0.500 -> 1.000"] and vs_sft[5].startswith("+0.500 [+0.00, +1.00]")
    assert vs_sft[6:8] == ["100 -> 60", "-40% [-40%, -40%]"]
    penalty = rows["length penalty vs none (both RL)"]  # EM [1, 1, 1, 0] -> [1, 1, 1, 1]; tokens 120 -> 60
    assert penalty[4] == "0.750 -> 1.000" and penalty[7].startswith("-50%")
    assert "$\\to$" in paired.latex() and "->" not in paired.latex()
    for stage in ("rl", "rl_nolen"):  # without RL runs there is nothing to pair or ablate
        shutil.rmtree(fixture_runs / "m" / stage)
    names = {t.name for t in build_tables(fixture_runs, log=lambda line: None)}
    assert "paired" not in names and "ablation" not in names and "main" in names


def test_pareto_front():
    from eval.plots import pareto_front

    points = [(100, 0.5), (50, 0.4), (200, 0.45), (120, 0.7), (60, 0.4), (300, 0.7)]
    assert pareto_front(points) == [(50, 0.4), (100, 0.5), (120, 0.7)]
    assert pareto_front([]) == []


def test_stale_results_rerun_only_when_inputs_change(runs, monkeypatch):
    import agent.run
    from common.hardware import fast_dtype
    from eval import run as eval_run

    questions = runs / "q.jsonl"
    runs.mkdir(parents=True)
    questions.write_text(json.dumps(QUESTIONS[0]) + "\n")
    checkpoint = runs / "m" / "sft" / "final"
    checkpoint.mkdir(parents=True)
    (checkpoint / "config.json").write_text("{}")
    (checkpoint / "model.safetensors").write_bytes(b"weights-1")
    calls = []

    def fake_run(args):
        calls.append(args.model)
        (Path(args.out) / "metrics.json").write_text("{}")

    monkeypatch.setattr(agent.run, "run", fake_run)
    config = eval_run.EvalArguments(run_name="m", stages=["sft"], baselines=[],
                                    benchmarks=["toy"], extra_benchmarks=[f"toy={questions}@world"], limit=1)
    (job,) = eval_run.plan(config)
    assert job.out == runs / "m" / "sft" / "eval" / "toy"
    assert eval_run.run_job(job, config, {}) == "ran"
    assert eval_run.run_job(job, config, {}) == "up to date"
    (checkpoint / "model.safetensors").write_bytes(b"weights-2")  # retrained: same path, new weights
    assert eval_run.run_job(job, config, {}) == "ran"
    config.limit = 2
    assert eval_run.run_job(job, config, {}) == "ran"
    # `fast` where it resolves to bfloat16, or bfloat16 named: other weights precision, other greedy results
    config.dtype = "fast" if fast_dtype() == "bfloat16" else "bfloat16"
    assert eval_run.run_job(job, config, {}) == "ran"
    monkeypatch.setattr(eval_run, "agent_code_hash", lambda: "changed snippets")  # the tools' code changed
    assert eval_run.run_job(job, config, {}) == "ran"
    assert eval_run.run_job(job, config, {}) == "up to date"
    assert len(calls) == 5


@pytest.mark.parametrize("run, stage, trained, target", [
    ("smollm2-135m", "sft_stop", "sft", "(make stop-fit)"),
    ("smollm2-135m", "rl_stop", "rl", "(make stop-fit STAGE=rl)"),
    ("tiny-rlseed1", "rl_stop", "rl", "(make stop-fit STAGE=rl RL_SEED=1 MODEL=tiny)"),
    ("smollm2-135m-variant", "rl_stop", "rl",
     "--fit-threshold --dtype float32 --out {runs}/smollm2-135m-variant/rl/stop_fit.json)")])
def test_calibrated_stage_runs_its_checkpoint_with_its_own_dev_fit(runs, monkeypatch, capsys, run, stage, trained, target):
    """sft_stop (rl_stop) decodes the SFT (RL) checkpoint with the two-sided stop fitted for that checkpoint
    (make stop-fit [STAGE=rl]); without a fit, or with one made for other weights, it is skipped and says why."""
    import agent.run
    from agent.models import checkpoint_digest
    from eval import run as eval_run

    questions = runs / "q.jsonl"
    runs.mkdir(parents=True)
    questions.write_text(json.dumps(QUESTIONS[0]) + "\n")
    folder = runs / run / trained
    (folder / "final").mkdir(parents=True)
    (folder / "final" / "config.json").write_text("{}")
    (folder / "final" / "model.safetensors").write_bytes(b"weights-1")
    config = eval_run.EvalArguments(run_name=run, stages=[stage], baselines=[],
                                    benchmarks=["toy"], extra_benchmarks=[f"toy={questions}@world"], limit=1)
    assert eval_run.plan(config) == []
    out = capsys.readouterr().out
    assert f"skipped stage {stage}: no stop fit" in out and out.rstrip().endswith(target.format(runs=runs))

    def fit(threshold, weights, dtype="float32"):
        digest = checkpoint_digest(str(folder / "final"))
        (folder / "final" / "model.safetensors").write_bytes(weights)
        (folder / "stop_fit.json").write_text(json.dumps({"checkpoint": digest, "dtype": dtype, "fitted": {
            "two_sided": {"threshold": threshold, "two_sided": True}}}))

    fit(0.4, b"weights-1")
    (job,) = eval_run.plan(config)
    assert job.model == str(folder / "final") and job.answer_threshold == 0.4
    assert job.out == runs / run / stage / "eval" / "toy"
    argvs = []
    monkeypatch.setattr(agent.run, "run", lambda args: argvs.append(args) or (Path(args.out) / "metrics.json").write_text("{}"))
    assert eval_run.run_job(job, config, {}) == "ran"
    assert argvs[0].answer_threshold == 0.4 and argvs[0].hold_below
    assert argvs[0].release_repeats == config.stop_release_repeats
    assert eval_run.run_job(job, config, {}) == "up to date"
    config.stop_release_repeats = not config.stop_release_repeats  # the other release setting: another result
    assert eval_run.run_job(job, config, {}) == "ran" and argvs[-1].release_repeats == config.stop_release_repeats
    fit(0.5, b"weights-1")  # another threshold: another result
    (job,) = eval_run.plan(config)
    assert eval_run.run_job(job, config, {}) == "ran"
    fit(0.5, b"weights-2")  # fitted before the checkpoint was retrained
    assert eval_run.plan(config) == []
    assert "fitted on another checkpoint" in capsys.readouterr().out
    for dtype in ("bfloat16", None):  # another dtype's probabilities, or a fit from before stop 64: refused
        fit(0.5, b"weights-2", dtype)
        assert eval_run.plan(config) == []
        assert f"was fitted in {dtype or 'an unrecorded dtype'}" in capsys.readouterr().out
    config.dtype = "bfloat16"  # an evaluation in bf16 uses a fit made in bf16, and says how to make one
    fit(0.5, b"weights-2", "bfloat16")
    assert len(eval_run.plan(config)) == 1
    fit(0.5, b"weights-2")
    assert eval_run.plan(config) == []
    out = capsys.readouterr().out
    assert "was fitted in float32, these episodes generate in bfloat16" in out
    assert run == "smollm2-135m-variant" or out.rstrip().endswith("DTYPE=bfloat16)")


def test_eval_plan_skips_missing_stages(runs, capsys):
    from eval import run as eval_run

    config = eval_run.EvalArguments(run_name="m", stages=["sft", "rl"], baselines=[], benchmarks=["world_test"])
    assert eval_run.plan(config) == []
    out = capsys.readouterr().out
    assert "skipped stage sft" in out and "skipped stage rl" in out
    from common.errors import UserError
    with pytest.raises(UserError, match="unknown benchmark"):
        eval_run.plan(eval_run.EvalArguments(benchmarks=["nope"]))
    with pytest.raises(UserError, match="no stages or baselines selected"):
        eval_run.main(["--stages", "", "--baselines", ""])
    with pytest.raises(UserError, match="nothing to evaluate for runs/m: train a stage"):
        eval_run.main(["--run_name", "m", "--stages", "sft", "--baselines", ""])


# ---- the official HotpotQA formulas, written out from the paper's evaluation script's definitions ----

def _official_normalize(s):
    s = s.lower()
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def _official_f1(prediction, gold):
    p, g = _official_normalize(prediction), _official_normalize(gold)
    if p in ("yes", "no", "noanswer") and p != g or g in ("yes", "no", "noanswer") and p != g:
        return 0.0
    common = Counter(p.split()) & Counter(g.split())
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(p.split()), same / len(g.split())
    return 2 * precision * recall / (precision + recall)


def _variants(answer: str, i: int) -> str:
    """Predictions of every kind from a gold answer: exact, re-cased, with articles, partial, wrong."""
    return [answer, answer.upper(), f"The {answer}.", answer.split()[0], "yes" if i % 2 else "no",
            f"{answer} and more", ""][i % 7]


def test_scorer_matches_official_formulas_on_dev500(realdata):
    rows = [json.loads(line) for line in (realdata / "hotpotqa_dev500/questions.jsonl").read_text().splitlines()]
    pairs = [(_variants(r["answer"], i), r["answer"]) for i, r in enumerate(rows)]
    own = sorted(runs_dir().glob("*/*/eval/hotpotqa_dev500/predictions.jsonl"))  # the project's own, when present
    for path in own:
        for record in map(json.loads, path.read_text().splitlines()):
            if record["prediction"] is not None and len(record["answers"]) == 1:
                pairs.append((record["prediction"], record["answers"][0]))
    assert len(rows) == 500 and len(pairs) >= 500
    for prediction, gold in pairs:
        assert best_em(prediction, [gold]) == float(_official_normalize(prediction) == _official_normalize(gold))
        assert best_f1(prediction, [gold]) == pytest.approx(_official_f1(prediction, gold), abs=1e-12)


def test_readme_section_and_timing(fixture_runs, tmp_path):
    from common.errors import UserError
    from eval.tables import BEGIN, END, build_tables, update_readme

    summary = fixture_runs / "m" / "sft" / "train_summary.json"
    summary.write_text(json.dumps({"wall_seconds": 1234.5, "cpu_share": 0.93, "loss_history": [{"step": 5, "loss": 1.0}]}))
    metrics = fixture_runs / "m" / "rl" / "eval" / "world_test" / "metrics.json"
    data = json.loads(metrics.read_text())
    metrics.write_text(json.dumps({**data, "run": {**data["run"], "seconds_this_run": 60.0, "cpu_share": 0.41}}))
    tables = build_tables(fixture_runs, log=lambda _: None)
    timing = next(t for t in tables if t.name == "timing")
    assert ["train sft", "m/sft", "1234", "0.93"] in timing.rows
    assert ["eval rl", "m/rl/eval", "60", "0.41"] in timing.rows and ["eval sft", "m/sft/eval", "0", "-"] in timing.rows
    readme = tmp_path / "README.md"
    readme.write_text(f"# Title\n\nintro\n{BEGIN}\nold numbers\n{END}\n\n## After\n")
    (tmp_path / "docs" / "results" / "old_tools").mkdir(parents=True)
    kept, gone = tmp_path / "docs" / "results" / "old_tools" / "kept.png", tmp_path / "docs" / "results" / "gone_rl.png"
    kept.write_bytes(b"png")
    gone.write_bytes(b"png")
    plot = tmp_path / "em_by_hops.png"
    plot.write_bytes(b"new")
    update_readme(readme, tables, [plot])
    assert kept.exists() and not gone.exists() and (tmp_path / "docs" / "results" / plot.name).read_bytes() == b"new"
    text = readme.read_text()
    assert "old numbers" not in text and "### Main results" in text and text.endswith(f"{END}\n\n## After\n")
    assert "### EM by question type" in text  # where 2-hop EM comes from: bridges or guessable yes/no
    readme.write_text("# no markers\n")
    with pytest.raises(UserError, match="no results markers"):
        update_readme(readme, tables, [])


def test_rl_is_not_paired_with_an_sft_trained_again_after_it(fixture_runs):
    """RL records the weights it started from; an SFT evaluated with other weights at the same path is a
    later SFT, and pairing the two would count that SFT's change as RL's."""
    from eval.tables import build_tables

    (fixture_runs / "m/rl/train_summary.json").write_text(json.dumps({"start": "runs/m/sft/final", "start_weights": "aaa"}))
    for weights, paired in (("aaa", True), ("bbb", False)):
        (fixture_runs / "m/sft/eval/world_test/fingerprint.json").write_text(json.dumps({"model": weights}))
        lines = []
        rows = build_tables(fixture_runs, log=lines.append)
        labels = {(row[0], row[1]) for table in rows if table.name == "paired" for row in table.rows}
        assert (("m", "SFT+RL vs SFT") in labels) == paired
        assert any("trained again since" in line for line in lines) == (not paired)
    # started from another stage's checkpoint: paired with the run's own SFT, whose weights it never claimed
    (fixture_runs / "m/rl/train_summary.json").write_text(json.dumps({"start": "runs/m/rl0/final", "start_weights": "zzz"}))
    tables = build_tables(fixture_runs, log=lambda line: None)
    assert ("m", "SFT+RL vs SFT") in {(row[0], row[1]) for table in tables if table.name == "paired" for row in table.rows}


def test_a_goal_slice_runs_its_benchmark_filtered_and_is_its_own_result(runs, monkeypatch):
    """A slice (eval.run.SLICES) runs agent.run on its benchmark's questions with its --where filters, keeps
    them in its fingerprint, and lands as a benchmark of its own that the tables never pool with its parent."""
    import agent.run
    from eval import run as eval_run
    from eval.tables import comparison_groups

    questions = runs / "data/world/questions/test.jsonl"
    questions.parent.mkdir(parents=True)
    questions.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    (questions.parent / "test_heldout.jsonl").write_text(questions.read_text())
    checkpoint = runs / "m" / "sft" / "final"
    checkpoint.mkdir(parents=True)
    (checkpoint / "config.json").write_text("{}")
    (checkpoint / "model.safetensors").write_bytes(b"weights")
    monkeypatch.setitem(eval_run.SLICES, "world_test_le2", ("world_test", ("hops=1,2",)))
    config = eval_run.EvalArguments(run_name="m", stages=["sft"], baselines=[], benchmarks=["world_test_le2"], limit=0)
    (job,) = eval_run.plan(config)
    assert job.questions == questions and job.where == ("hops=1,2",)
    seen = []

    def fake_run(args):
        seen.append([q["id"] for q in agent.run.read_questions(args.questions, args.limit, args.where)])
        (Path(args.out) / "metrics.json").write_text("{}")

    monkeypatch.setattr(agent.run, "run", fake_run)
    assert eval_run.run_job(job, config, {}) == "ran"
    assert seen == [["q0", "q1", "q2"]]  # the 3-hop question is filtered out, and no limit applies
    assert json.loads((job.out / "fingerprint.json").read_text())["where"] == ["hops=1,2"]
    unsliced = eval_run.plan(eval_run.EvalArguments(run_name="m", stages=["sft"], baselines=[],
                                                    benchmarks=["world_test"], limit=0))[0]
    assert "where" not in eval_run.fingerprint(unsliced, config, {})  # results made before slices stay valid

    shutil.rmtree(job.out)
    for stage in ("sft", "rl"):
        write_result(runs, stage, "world_test", ["Paris", "1874", "no", None], tokens=100)
        write_result(runs, stage, "world_test_le2", ["Paris", "1874", "no"], tokens=100)
        write_result(runs, stage, "world_test_heldout", ["Paris"], tokens=100)
    from eval.results import collect_benchmarks, grouped
    stages = grouped(collect_benchmarks(runs))
    assert set(stages[("m", "sft")]) == {"world_test", "world_test_le2", "world_test_heldout"}
    groups = dict(comparison_groups(stages[("m", "rl")], stages[("m", "sft")]))
    assert groups["world_test_le2"] == ["world_test_le2"]
    assert groups["all"] == ["world_test", "world_test_heldout"]  # the slice's questions are world_test's


def test_goals_table_holds_each_slice_against_issue_4s_goals(runs):
    from common.errors import UserError
    from eval import goals

    questions = runs / "data/world/questions"
    questions.mkdir(parents=True)
    pooled = [{**q, "pool": "sft"} for q in QUESTIONS]  # slices: sft-pool 1-2 hops (3), 2 hops (2)
    for name in ("test.jsonl", "test_heldout.jsonl"):
        (questions / name).write_text("".join(json.dumps(q) + "\n" for q in pooled))
    with pytest.raises(UserError, match="run make goals"):
        goals.main(["--run", "m"])
    write_result(runs, "sft", "world_test_sft_le2hop", ["Paris", "1874", "yes"], tokens=50, questions=pooled)
    out = write_result(runs, "sft", "world_test_heldout_2hop", ["1874", None], tokens=50, questions=pooled[1:])
    records = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    records[0]["valid_tool_calls"] = 0  # 2 of 4 calls valid; the second episode never answers
    (out / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    write_result(runs, "rl", "world_test_heldout_2hop", ["1874"], tokens=50, questions=pooled[1:])  # killed after one of two
    goals.main(["--run", "m"])
    written = json.loads((runs / "m" / "goals.json").read_text())["goals"]
    got = {(row["stage"], row["goal"]): (row["value"], row["met"], row["n"]) for row in written}
    assert got["sft", "EM, test sft-pool 1-2 hops"] == (1.0, True, 3)
    assert got["sft", "EM, test_heldout 2-hop"] == (0.5, True, 2)
    assert got["sft", "valid tool calls, heldout 2-hop"] == (0.5, False, 2)
    assert got["sft", "answer rate, heldout 2-hop"] == (0.5, False, 2)
    assert got["rl", "EM, test_heldout 2-hop"] == (1.0, None, 1)  # not judged on part of the slice
    assert got["rl", "EM, test sft-pool 1-2 hops"] == (None, None, 0)  # not evaluated
    low, high = next(row["ci"] for row in written if row["goal"] == "EM, test sft-pool 1-2 hops")
    assert 0.3 < low < 1.0 and high == 1.0  # 3 of 3 is not proof of 0.90: Wilson's interval stays open
    text = (runs / "m" / "goals.md").read_text()
    assert "| SFT | EM, test_heldout 2-hop | >= 0.50 | 0.500 [" in text
    assert "| SFT+RL | EM, test_heldout 2-hop | >= 0.50 | 1.000 [" in text and "| 1 of 2 | - |" in text
    assert "| SFT+RL | EM, test sft-pool 1-2 hops | >= 0.90 | not evaluated | 0 of 3 | - |" in text


def test_a_slice_folder_with_questions_outside_the_slice_is_refused(runs, capsys):
    from eval.results import collect_benchmarks

    questions = runs / "data/world/questions"
    questions.mkdir(parents=True)
    (questions / "test_heldout.jsonl").write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    write_result(runs, "sft", "world_test_heldout_2hop", ["Paris", "1874", "yes", None], tokens=50)  # all hops
    assert collect_benchmarks(runs) == []
    assert "2 of its 4 predictions are not questions of world_test_heldout_2hop" in capsys.readouterr().out  # 1 and 3 hops


def test_main_table_and_ablation_never_pool_a_slice_with_its_benchmark(fixture_runs, monkeypatch):
    import eval.run
    from eval.results import collect_benchmarks
    from eval.tables import ablation_table, main_table

    for stage in ("sft", "rl", "rl_nolen"):
        out = write_result(fixture_runs, stage, "world_test_le2", ["Paris", "1874", "yes", "x"], tokens=5)
        rows = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()][:3]
        (out / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    monkeypatch.setitem(eval.run.SLICES, "world_test_le2", ("world_test", ("hops=1,2",)))
    results = [r for r in collect_benchmarks(fixture_runs) if r.stage != "closed-book"]
    main, ablation = main_table(results), ablation_table(results)
    assert "benchmarks every row has (world_test)" in main.note
    sft = next(row for row in main.rows if row[1] == "SFT")
    assert sft[-1] == "200"  # tokens per correct: 4 episodes x 100 tokens / 2 right, on world_test alone
    every = next(row for row in ablation.rows if row[1] == "SFT" and row[2] == "all")
    assert every[4] == "100"  # policy tokens of world_test only (the slice's rows have 5)
    from eval.plots import _rows
    assert _rows(results)[1] == ["world_test"]  # the plots pool the same benchmarks


def test_ratio_interval_resamples_units_not_their_parts():
    from eval.stats import ratio_bootstrap_ci

    # one episode with 10 invalid calls among nine with one valid call each: the calls move with their episode
    low, high = ratio_bootstrap_ci([1] * 9 + [0], [1] * 9 + [10])
    assert low < 9 / 19 < high and high == 1.0
    assert ratio_bootstrap_ci([1, 2], [2, 2]) is not None and ratio_bootstrap_ci([], []) is None
    assert ratio_bootstrap_ci([0, 0], [0, 0]) is None


def test_wilson_interval_known_values():
    from eval.stats import wilson_ci

    low, high = wilson_ci(179, 179)
    assert high == 1.0 and abs(low - 0.979) < 0.001  # all right, yet not proof of a 0.98 rate
    low, high = wilson_ci(5, 10)
    assert abs(low - 0.237) < 0.001 and abs(high - 0.763) < 0.001
    assert wilson_ci(0, 0) is None
