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
from tests.steer import writes_tag

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
    # other weights precision than `fast` resolves to on this CPU: other greedy results
    config.dtype = "float32" if fast_dtype() == "bfloat16" else "bfloat16"
    assert eval_run.run_job(job, config, {}) == "ran"
    monkeypatch.setattr(eval_run, "agent_code_hash", lambda: "changed snippets")  # the tools' code changed
    assert eval_run.run_job(job, config, {}) == "ran"
    assert eval_run.run_job(job, config, {}) == "up to date"
    assert len(calls) == 5


@pytest.mark.parametrize("run, stage, trained, target", [
    ("smollm2-135m", "sft_stop", "sft", "(make stop-fit)"),
    ("smollm2-135m", "rl_stop", "rl", "(make stop-fit STAGE=rl)"),
    ("tiny-rlseed1", "rl_stop", "rl", "(make stop-fit STAGE=rl RL_SEED=1 MODEL=tiny)"),
    ("smollm2-135m-variant", "rl_stop", "rl", "--fit-threshold --out {runs}/smollm2-135m-variant/rl/stop_fit.json)")])
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

    def fit(threshold, weights):
        digest = checkpoint_digest(str(folder / "final"))
        (folder / "final" / "model.safetensors").write_bytes(weights)
        (folder / "stop_fit.json").write_text(json.dumps({"checkpoint": digest, "fitted": {
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


def test_first_decision_prefix_and_probe(tiny):
    from agent.chat import prepare_tokenizer
    from agent.tools import SearchTools, tool_functions
    from eval.first_decision import first_decision_prefix, probe, summary

    call = {"type": "function", "function": {"name": "search", "arguments": {"query": "Kestrel"}}}
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "Who founded Kestrel?"},
                {"role": "assistant", "content": "First: the founder.", "tool_calls": [call]},
                {"role": "tool", "name": "search", "content": "[d1] Kestrel: founded by Ada."},
                {"role": "assistant", "content": "<answer>Ada</answer>"}]
    assert first_decision_prefix(messages) == messages[:4]
    assert first_decision_prefix(messages[:2]) is None
    model, tokenizer = tiny
    rows = probe(model, prepare_tokenizer(tokenizer), tool_functions(SearchTools(None)),
                 [{"id": "a", "messages": messages}, {"id": "b", "messages": messages[:2]}])
    assert [r["id"] for r in rows] == ["a"] and 0.0 < rows[0]["p_answer"] < 1.0
    assert summary([{"p_answer": 0.3, "answer_is_argmax": True}, {"p_answer": 0.6, "answer_is_argmax": True}]) == \
        {"episodes": 2, "mean_p_answer": 0.45, "p_answer_over_half": 1, "answer_is_argmax": 2}


def two_hop_oracle() -> list[dict]:
    """An oracle search that goes on after its first output and answers after its second."""
    call = {"type": "function", "function": {"name": "search", "arguments": {"query": "Kestrel"}}}
    tool = {"role": "tool", "name": "search", "content": "[d1] Kestrel: founded by Ada."}
    return [{"role": "system", "content": "s"}, {"role": "user", "content": "Where was Kestrel's founder born?"},
            {"role": "assistant", "content": "First: the founder.", "tool_calls": [call]}, tool,
            {"role": "assistant", "content": "Ada founded it; now her birthplace.", "tool_calls": [call]}, tool,
            {"role": "assistant", "content": "<answer>Oslo</answer>"}]


def test_stop_decisions_points_auc_and_probe(tiny):
    from agent.chat import prepare_tokenizer
    from agent.tools import SearchTools, tool_functions
    from eval.stop_decisions import auc, auc_ci, decision_points, probe, summary

    messages = two_hop_oracle()
    call = messages[2]["tool_calls"][0]
    points = list(decision_points(messages))
    assert [(len(prefix), answers, k) for prefix, answers, k in points] == [(4, False, 1), (6, True, 2)]
    chatty = messages[:-1] + [{"role": "assistant", "content": "So: <answer>Oslo</answer>"}]
    assert [answers for _, answers, _ in decision_points(chatty)] == [False, None]  # text first: not a stop token
    refused = {"role": "tool", "name": "search", "content": "Error: you already called search with these arguments"}
    repeat = messages[:4] + [{"role": "assistant", "content": "First: the founder.", "tool_calls": [call], "train": False},
                             refused] + messages[4:]
    assert [(len(prefix), answers, k) for prefix, answers, k in decision_points(repeat)] == [(6, False, 1), (8, True, 2)]
    assert auc([0.9, 0.8], [0.1, 0.2]) == 1.0 and auc([0.1], [0.9]) == 0.0 and auc([0.5], [0.5]) == 0.5
    assert auc([0.9, 0.3], [0.5]) == 0.5 and auc([], [0.5]) is None
    model, tokenizer = tiny
    rows, skipped = probe(model, prepare_tokenizer(tokenizer), tool_functions(SearchTools(None)),
                          [{"id": "a", "hops": 2, "type": "bridge", "messages": messages},
                           {"id": "b", "hops": 2, "type": "bridge", "messages": chatty}])
    assert [(r["id"], r["k"], r["oracle_answers"]) for r in rows] == [("a", 1, False), ("a", 2, True), ("b", 1, False)]
    assert skipped == 1 and all(0.0 < r["p_answer"] < 1.0 for r in rows)
    report = summary(rows)
    assert report["decisions"] == 3 and report["by_hops"]["2-hop, oracle answers"]["n"] == 1


def test_evidence_contrast_pairs_each_hidden_output_with_the_shown_one(tiny, tmp_path):
    """eval.evidence_contrast: a missed-evidence row and its trajectory give the two contexts and the
    two turns; each turn token's log-probability, read with the shared prefix run once, is the one a
    pass over the whole sequence gives; P(<answer>) is eval.stop_decisions' and is read only where the
    oracle's turn after the shown output opens with it."""
    import math

    from agent.backends import ANSWER_TAG, tag_probability, tag_steps
    from agent.chat import prepare_tokenizer, training_template
    from agent.tools import SearchTools, tool_functions
    from eval import evidence_contrast as EC
    from sft.data import content_offset

    shown = two_hop_oracle()
    again = {"role": "assistant", "content": "None of the results is about Ada; I'll try other words.",
             "tool_calls": [{"type": "function", "function": {"name": "search", "arguments": {"query": "Ada born"}}}]}
    hidden = {"role": "tool", "name": "search", "content": "[d9] Norvania: a country."}
    last = {"id": "t-miss", "miss_of": "t", "messages": [{**m, "train": False} if m["role"] == "assistant" else m
                                                         for m in shown[:5]] + [hidden, again]}
    first = {"id": "t2-miss", "miss_of": "t2", "messages": shown[:2] + [{**shown[2], "train": False}, hidden, again]}
    found = EC.pairs([{"id": "t", "messages": shown}, last, {"id": "t2", "messages": shown}, first,
                      {"id": "orphan-miss", "miss_of": "gone", "messages": first["messages"]}])
    assert [p["id"] for p in found] == ["t-miss", "t2-miss"]
    untrained = [{k: v for k, v in m.items() if k != "train"} for m in found[0]["shown"]]  # contexts are never trained
    assert untrained == shown[:6] and found[0]["hidden"][-1] == hidden and found[0]["go_on"] == shown[6]
    assert found[1]["go_on"] == shown[4] and found[1]["again"] == again and len(found[1]["hidden"]) == 4

    model, tokenizer = tiny
    tokenizer, tools = prepare_tokenizer(tokenizer), tool_functions(SearchTools(None))
    template, tag = training_template(tokenizer), tokenizer(ANSWER_TAG, add_special_tokens=False).input_ids
    sequences = [EC.rendered(tokenizer, tools, template, found[0][context], found[0][turn])
                 for context in ("shown", "hidden") for turn in ("go_on", "again")]
    read = EC.turn_logprobs(model, sequences)  # shown: go on, again; hidden: go on, again
    for (ids, labels), logprobs in zip(sequences, read):  # the shared prefix run once
        start = next(i for i, label in enumerate(labels) if label != -100)
        steps, _ = tag_steps(model, ids[:start], [label for label in labels if label != -100])  # the whole sequence
        assert logprobs == pytest.approx([math.log(p) for p in steps], abs=1e-3)
    rows = [EC.probe_pair(model, tokenizer, tools, template, tag, content_offset(tokenizer, template), pair)
            for pair in found]
    prompt = tokenizer.apply_chat_template(found[0]["shown"], tools=tools, tokenize=False, add_generation_prompt=True)
    alone = tag_probability(model, tokenizer(prompt, add_special_tokens=False).input_ids, tag)[0]
    assert rows[0]["p_answer_shown"] == pytest.approx(alone, abs=1e-3)  # eval.stop_decisions' P(answer)
    assert "p_answer_hidden" in rows[0] and "p_answer_shown" not in rows[1]
    assert rows[0]["again|hidden"] != rows[0]["again|shown"] and all(v < 0 for k, v in rows[0].items() if "|" in k)
    first = content_offset(tokenizer, template)
    prefer = [read[again][first] - read[go_on][first] for go_on, again in ((0, 1), (2, 3))]
    assert rows[0]["first_shift"] == pytest.approx(prefer[1] - prefer[0], abs=1e-3)
    made = EC.summary([{**rows[0], "shift": 1.0, "first_shift": 0.5}, {**rows[1], "shift": 0.0, "first_shift": -1.0},
                       {**rows[1], "shift": -2.0, "first_shift": 0.0}])
    assert (made["pairs"], made["follows_evidence"], made["shift"], made["stop_pairs"]) == (3, 0.5, -0.333, 1)
    assert (made["first_token_follows_evidence"], made["first_token_shift"]) == (0.5, -0.167)
    from common.errors import UserError

    data = tmp_path / "plain.jsonl"
    data.write_text(json.dumps({"id": "t", "messages": shown}) + "\n")
    with pytest.raises(UserError, match="--p-miss 1"):
        EC.main(["--model", "tiny", "--trajectories", str(data)])


def test_contrast_compare_pools_sets_and_pairs_checkpoints_on_shared_pairs(tmp_path, capsys):
    """eval.contrast_compare: shares over every pair of a report (ties count half), the stop's gap only
    where the oracle answers, and the paired difference on the pairs both reports read."""
    from common.errors import UserError
    from eval.contrast_compare import main, paired, pooled, read_report

    def report(name, shifts, gaps=None):
        rows = {f"set{s}.jsonl": {"rows": [{"id": f"p{i}", "first_shift": x} for i, x in enumerate(shifts) if i % 2 == s]}
                for s in (0, 1)}
        for (i, gap) in (gaps or {}).items():
            row = next(r for found in rows.values() for r in found["rows"] if r["id"] == f"p{i}")
            row.update(p_answer_shown=0.5 + gap, p_answer_hidden=0.5)
        path = tmp_path / name
        path.write_text(json.dumps({"model": name, "sets": {f"dev/{k}": v for k, v in rows.items()}}))
        return str(path)

    new = report("new.json", [1.0, 0.5, 0.0, -1.0, 2.0], gaps={0: 0.2, 3: 0.0})
    old = report("old.json", [-1.0, -0.5, 0.0, -1.0], gaps={0: 0.1})
    summary = pooled(read_report(new))
    assert summary["first_token_follows_evidence"]["n"] == 5
    assert summary["first_token_follows_evidence"]["mean_ci"][0] == 0.7  # (1 + 1 + 0.5 + 0 + 1) / 5
    assert summary["p_answer_shown_minus_hidden"]["n"] == 2 and summary["p_answer_shown_minus_hidden"]["mean_ci"][0] == 0.1
    both = paired(read_report(new), read_report(old))
    follows = both["first_token_follows_evidence"]
    assert (follows["n"], follows["base"], follows["new"], follows["difference"]) == (4, 0.125, 0.625, 0.5)
    assert follows["ci"][0] <= 0.5 <= follows["ci"][1]
    assert both["p_answer_shown_minus_hidden"]["n"] == 1  # p3 has a gap in new only
    main([new, "--against", old])
    assert json.loads(capsys.readouterr().out)["against"]["first_token_follows_evidence"]["difference"] == 0.5
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"sets": {"dev/x.jsonl": {"rows": [{"id": "q", "first_shift": 1.0}]}}}))
    with pytest.raises(UserError, match="share no probe pairs"):
        main([new, "--against", str(other)])
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(UserError, match="not an eval.evidence_contrast report"):
        main([str(tmp_path / "bad.json")])


def test_stop_fit_is_recorded_for_its_checkpoint_and_not_redone(tiny, tmp_path, capsys):
    """make stop-fit: the fit names the checkpoint's weights (eval's sft_stop checks them) and a rerun
    on the same checkpoint and probe sets does nothing."""
    from agent.models import checkpoint_digest
    from eval.stop_decisions import fitted_stop, main

    messages = two_hop_oracle()
    probes = tmp_path / "probes.jsonl"
    probes.write_text(json.dumps({"id": "a", "hops": 2, "type": "bridge", "messages": messages}) + "\n")
    out = tmp_path / "stop_fit.json"
    main(["--model", "tiny", "--trajectories", str(probes), "--fit-threshold", "--out", str(out)])
    stored = json.loads(out.read_text())
    assert stored["checkpoint"] == checkpoint_digest("tiny")
    threshold = stored["fitted"]["two_sided"]["threshold"]
    assert fitted_stop(out, "tiny") == threshold and 0 < threshold < 1
    capsys.readouterr()
    main(["--model", "tiny", "--trajectories", str(probes), "--fit-threshold", "--out", str(out)])
    assert "up to date" in capsys.readouterr().out
    probes.write_text(json.dumps({"id": "b", "hops": 2, "type": "bridge", "messages": messages}) + "\n")
    main(["--model", "tiny", "--trajectories", str(probes), "--fit-threshold", "--out", str(out)])
    assert "up to date" not in capsys.readouterr().out  # other probe questions: fitted again


def test_openers_compare_the_model_with_the_oracle_by_action(tiny):
    """eval.openers: a model that always writes the oracle's own first token matches the oracle's
    distances between actions exactly; one that opens the same way everywhere has distance 0."""
    import torch

    from agent.chat import prepare_tokenizer
    from agent.tools import SearchTools, tool_functions
    from eval import openers as OP

    def call(name, **arguments):
        return [{"type": "function", "function": {"name": name, "arguments": arguments}}]

    start = [{"role": "system", "content": "s"}, {"role": "user", "content": "Where was Kestrel's founder born?"},
             {"role": "assistant", "content": "First: the founder.", "tool_calls": call("search", query="Kestrel")},
             {"role": "tool", "name": "search", "content": "[d1] Kestrel: founded by Ada."}]
    moves_on = start + [{"role": "assistant", "content": "Ada founded it; now her birthplace.",
                         "tool_calls": call("search", query="Ada")},
                        {"role": "tool", "name": "search", "content": "[d2] Ada: born in Oslo."},
                        {"role": "assistant", "content": "<answer>Oslo</answer>"}]
    unclear = start[:3] + [{"role": "tool", "name": "search", "content": "[d1] Kestrel: a company."}]
    find = call("find", doc_id="d1", text="founded")
    reads = unclear + [{"role": "assistant", "content": "Let me find it.", "tool_calls": find},
                     {"role": "tool", "name": "find", "content": "Ada, born in Oslo, founded it."},
                     {"role": "assistant", "content": "<answer>Oslo</answer>"}]
    chatty = moves_on[:-1] + [{"role": "assistant", "content": "Oslo it is. <answer>Oslo</answer>"}]
    trajectories = [{"id": f"t{i}", "messages": m} for i in range(5) for m in (moves_on, reads, chatty)]
    model, tokenizer = tiny
    tokenizer, tools = prepare_tokenizer(tokenizer), tool_functions(SearchTools(None))
    vocab = len(tokenizer)

    class Scripted(torch.nn.Module):
        """Puts all the mass on `fixed`, or else on the next input token (it reads ahead, so it
        writes the oracle's turn), uniform past the input's end."""
        def __init__(self, fixed=None):
            super().__init__()
            self.fixed, self.config, self.device = fixed, model.config, torch.device("cpu")

        def forward(self, ids, logits_to_keep=1):
            logits, n = torch.zeros((1, logits_to_keep, vocab)), ids.shape[1]
            for row in range(logits_to_keep):
                at = n - logits_to_keep + row
                target = self.fixed if self.fixed is not None else ids[0, at + 1] if at + 1 < n else None
                if target is not None:
                    logits[0, row, :] = -1e4
                    logits[0, row, target] = 0.0
            return type("Out", (), {"logits": logits})

    expected_rest = {}  # the reader gets each later token right but the last (not in its input)
    for t in trajectories:
        for prefix, answers, _ in OP.decision_points(t["messages"]):
            prompt = tokenizer.apply_chat_template(prefix, tools=tools, tokenize=False, add_generation_prompt=True)
            full = tokenizer.apply_chat_template(t["messages"][:len(prefix) + 1], tools=tools, tokenize=False)
            turn = OP.turn_tokens(tokenizer, tokenizer(prompt, add_special_tokens=False).input_ids, full, prompt)
            assert turn[-1] == tokenizer.eos_token_id  # up to the end of turn, as SFT's labels
            action = OP.oracle_action(t["messages"][len(prefix)], answers)
            expected_rest[action] = expected_rest.get(action, 0.0) + (len(turn) - 2 + 1 / vocab) / (len(turn) - 1)
    raw = OP.probe(Scripted(), tokenizer, tools, trajectories)
    for action, group in raw["groups"].items():
        assert abs(group["p_rest"] - expected_rest[action]) < 1e-4, action
    like_oracle = OP.summary(raw, tokenizer)
    assert {a: c["n"] for a, c in like_oracle["by_oracle_action"].items()} == \
        {"answer": 10, "answer after text": 5, "search": 10, "find": 5}
    for cell in like_oracle["by_oracle_action"].values():
        assert cell["p_oracle_opener"] == 1.0 == cell["greedy_writes_oracle_opener"]
    distances = like_oracle["total_variation"]
    assert len(distances) == 6  # every pair of the four groups
    assert all(d["model"] == d["oracle"] == 1.0 for d in distances.values())  # "<", "Os", "Ada", "Let"
    constant = OP.summary(OP.probe(Scripted(fixed=42), tokenizer, tools, trajectories), tokenizer)
    assert all(d["model"] == 0.0 and d["oracle"] == 1.0 for d in constant["total_variation"].values())
    real = OP.probe(model, tokenizer, tools, trajectories)
    assert real["skipped_too_long"] == 0
    assert abs(float(real["groups"]["answer"]["model"].sum()) - 10) < 1e-3  # ten distributions of mass 1
    assert 0.0 < real["groups"]["find"]["p_rest"] / 5 < 1.0
    assert 0.0 <= OP.summary(real, tokenizer)["total_variation"]["search vs find"]["model"] < 1.0


def test_stop_decision_auc_interval_resamples_trajectories():
    from eval.stop_decisions import auc_ci, summary

    def row(t, answers, p, greedy=False, hops=1, k=1):
        return {"trajectory": t, "oracle_answers": answers, "p_answer": p, "greedy_answers": greedy, "hops": hops, "k": k}

    separated = [row(t, True, 0.9, True) for t in range(5)] + [row(t, False, 0.1) for t in range(5, 10)]
    assert auc_ci(separated) == (1.0, 1.0)
    mixed = [row(0, True, 0.9, True), row(1, True, 0.2), row(2, False, 0.5), row(3, False, 0.1)]
    low, high = auc_ci(mixed)
    assert low < 0.75 < high and 0.0 <= low and high <= 1.0
    report = summary(mixed)
    assert report["auc"] == 0.75 and report["greedy_agreement"] == 0.75  # row 1 is the one greedy gets wrong
    assert report["oracle_answers"] == {"n": 2, "mean_p_answer": 0.55, "greedy_answers": 1}


def _reading_messages(final: str = "<answer>Oslo</answer>"):
    call = {"type": "function", "function": {"name": "search", "arguments": {"query": "Ada"}}}
    return [{"role": "system", "content": "s"}, {"role": "user", "content": "Where was Kestrel's founder born?"},
            {"role": "assistant", "content": "First: the founder.", "tool_calls": [call]},
            {"role": "tool", "name": "search", "content": "[d1] Ada: Ada was born in Oslo."},
            {"role": "assistant", "content": final}]


def test_oracle_reading_forces_the_tag_and_reads_the_free_turn(tiny):
    from agent.backends import Completion, Sampling, TransformersBackend
    from agent.chat import prepare_tokenizer
    from agent.tools import SearchTools, tool_functions
    from eval.oracle_reading import final_context, forced_prediction, read, summary

    messages = _reading_messages()
    assert final_context(messages) == messages[:4]
    assert final_context(messages[:3] + [{"role": "user", "content": "?"}, messages[4]]) is None  # not after a tool
    assert final_context(messages[:4] + [{"role": "assistant", "content": "I'll search more."}]) is None
    assert forced_prediction("Oslo</answer>") == "Oslo" and forced_prediction("Oslo and more") is None
    assert forced_prediction("Oslo</ANSWER>") == "Oslo"  # read as agent.run reads answers

    model, tokenizer = tiny
    tokenizer = prepare_tokenizer(tokenizer)
    tag = tokenizer("<answer>", add_special_tokens=False).input_ids

    class Scripted(TransformersBackend):
        """Reads the right answer only when the turn is forced; searches again when free."""
        def complete_ids(self, ids, keys=None, max_new_tokens=None):
            self.seen.append([row[-len(tag):] == tag for row in ids])
            return [Completion("Oslo</answer>" if row[-len(tag):] == tag else
                               'More. <tool_call>{"name": "search", "arguments": {"query": "x"}}</tool_call>', 3, len(row))
                    for row in ids]

    backend = Scripted(model, tokenizer, Sampling(), reuse_cache=False)
    backend.seen = []
    trajectories = [{"id": "a", "hops": 2, "type": "bridge", "answers": ["Oslo"], "messages": messages},
                    {"id": "b", "hops": 2, "type": "yesno", "answers": ["no"], "messages": messages[:3]}]
    rows, skipped = read(backend, tool_functions(SearchTools(None)), trajectories)
    assert backend.seen == [[True], [False]] and skipped == {"no_answer_after_a_tool_output": 1, "context_too_long": 0}
    assert rows[0]["forced_em"] == 1.0 and not rows[0]["free_answers"] and rows[0]["free_em"] == 0.0
    assert rows[0]["shown"] and not rows[0]["oracle_text_first"]
    report = summary(rows)
    assert report["forced_em"] == 1.0 and report["free_answers"] == 0.0 and report["by_type"]["bridge/2"]["n"] == 1

    # smoke test with a real model (the tiny one writes noise); the budget is restored after
    real = TransformersBackend(model, tokenizer, Sampling(max_new_tokens=7), reuse_cache=False)
    rows, _ = read(real, tool_functions(SearchTools(None)), trajectories[:1])
    assert len(rows) == 1 and isinstance(rows[0]["free"], str) and real.sampling.max_new_tokens == 7


def test_stop_threshold_fit_prefers_the_higher_of_tied_thresholds():
    from eval.stop_decisions import fit_threshold

    def row(answers, p, greedy=False):
        return {"oracle_answers": answers, "p_answer": p, "greedy_answers": greedy}

    rows = [row(True, 0.30), row(True, 0.25), row(False, 0.10), row(False, 0.05), row(True, 0.6, True)]
    fitted = fit_threshold(rows)
    assert fitted["threshold"] == 0.25 and fitted["agreement"] == 1.0 and fitted["greedy_agreement"] == 0.6
    # a go-on point between the answer points: 0.30 and 0.20 agree on 4 of 5 alike; the higher wins
    tied = [row(True, 0.30), row(False, 0.25), row(True, 0.20), row(False, 0.10), row(False, 0.05)]
    assert fit_threshold(tied)["threshold"] == 0.30 and fit_threshold(tied)["agreement"] == 0.8
    # greedy decoding alone is best: no threshold
    greedy_best = [row(False, 0.9), row(True, 0.5, True), row(False, 0.1)]
    assert fit_threshold(greedy_best) == {"threshold": None, "two_sided": False, "agreement": 1.0,
                                          "greedy_agreement": 1.0, "decisions": 3}
    # a tiny probability is kept as it is (rounding it to 0.0 would make agent.run refuse it)
    assert fit_threshold([row(True, 3e-5), row(False, 1e-6)])["threshold"] == 3e-5


def test_two_sided_threshold_fit_ignores_greedy_answers_below_it():
    from eval.stop_decisions import fit_threshold

    def row(answers, p, greedy=False):
        return {"oracle_answers": answers, "p_answer": p, "greedy_answers": greedy}

    # greedy answers at the 0.20 go-on point: one-sided every threshold keeps that error, two-sided
    # a threshold of 0.25 refuses it and reproduces every stop
    rows = [row(True, 0.30), row(True, 0.25, True), row(False, 0.20, True), row(False, 0.05)]
    assert fit_threshold(rows)["agreement"] == 0.75
    fitted = fit_threshold(rows, two_sided=True)
    assert fitted["threshold"] == 0.25 and fitted["agreement"] == 1.0 and fitted["two_sided"]
    assert fitted["greedy_agreement"] == 0.5
    # always a threshold, even where greedy decoding does as well (the rule is then the same)
    assert fit_threshold([row(True, 0.9, True), row(False, 0.1)], two_sided=True)["threshold"] == 0.9


def test_opening_ban_draws_the_turn_given_that_it_does_not_open_with_the_tag():
    import math

    import torch

    from agent.backends import Hold, OpeningBan, branch_index

    assert branch_index([44, 11247, 46], [44, 19324, 79, 4350, 46]) == 1  # SmolLM2: `<` `answer` `>` / `<` `tool` ...
    assert branch_index([5, 6], [7, 8]) == 0
    with pytest.raises(ValueError):
        branch_index([44], [44, 19324])
    tag, width = [44, 11247, 46], 3
    hold = Hold([0.6, 0.9], greedy_answers=True)  # P(<) = 0.6, P(answer | <) = 0.9
    ban = OpeningBan(tag, width, [hold, None, hold])
    scores = torch.zeros(3, 20000)
    opening = ban(torch.tensor([[1, 2, 3]] * 3), scores.clone())
    # `<` keeps only the mass that does not lead to `answer`: 0.6 x 0.1
    assert math.isclose(opening[0, 44].item(), math.log(0.1), rel_tol=1e-5) and opening[1, 44] == 0
    assert (opening[0, :44] == 0).all() and (opening[2] == opening[0]).all()
    after = ban(torch.tensor([[1, 2, 3, 44], [1, 2, 3, 44], [1, 2, 3, 9]]), scores.clone())
    assert after[0, 11247] == float("-inf") and after[1, 11247] == 0  # held / not held
    assert (after[2] == 0).all()  # held, but the turn opened with another token
    later = ban(torch.tensor([[1, 2, 3, 44, 19324]] * 3), scores.clone())  # past the branch: nothing changes
    assert (later == 0).all()


def test_forced_opening_writes_the_tag_in_forced_rows_only():
    import torch

    from agent.backends import ForcedOpening, Hold

    tag = [44, 11247, 46]
    force = ForcedOpening(tag, None, ["force", None, Hold([0.5, 0.5], False)])
    scores = torch.zeros(3, 20000)
    for step in range(len(tag)):  # left-padded prompts of width 4, then the tag so far
        ids = torch.tensor([[0, 0, 1, 2, *tag[:step]]] * 3)
        out = force(ids, scores.clone())
        assert out[0].isinf().sum() == 19999 and out[0, tag[step]] == 0  # only the tag's next token is left
        assert (out[1:] == 0).all()  # the others are untouched (a Hold is OpeningBan's)
    assert (force(torch.tensor([[0, 0, 1, 2, *tag, 9]] * 3), scores.clone()) == 0).all()  # after the tag: free


def test_hold_below_keeps_a_turn_from_opening_with_the_answer_tag(tiny):
    from agent.backends import Sampling, TransformersBackend, tag_probability
    from agent.chat import prepare_tokenizer

    model, tokenizer = tiny
    tokenizer = prepare_tokenizer(tokenizer)
    messages = _reading_messages()[:4]
    backend = TransformersBackend(model, tokenizer, Sampling(max_new_tokens=4), reuse_cache=False)
    tag = backend.answer_tag
    with writes_tag(model, tag):  # the tiny model, pushed to write `<answer>` everywhere
        ids = tokenizer(backend.render(messages, None), add_special_tokens=False).input_ids
        p, greedy = tag_probability(model, ids, tag)
        assert greedy and p < 1.0
        assert backend.complete([messages], None)[0].text.startswith("<answer>")
        backend.answer_threshold, backend.hold_below = 1.0, True  # p < 1: held
        held = backend.complete([messages], None)[0]
        assert not held.text.startswith("<answer>") and held.held and backend.held_answers == 1
        backend.max_turns = 2  # the conversation holds one assistant turn: the next is the last, never held
        assert backend.complete([messages], None)[0].text.startswith("<answer>") and backend.held_answers == 1


def test_a_held_turn_that_repeats_a_call_is_released_to_the_models_own_turn(tiny, monkeypatch):
    """--release-repeats: a held turn whose call the tools would refuse as a repeat is generated again
    unheld, and only where greedy decoding wanted to answer; a new call or a non-answering hold stays."""
    from agent.backends import Completion, Hold, Sampling, TransformersBackend, repeats_a_call
    from agent.chat import prepare_tokenizer, render_tool_call

    model, tokenizer = tiny
    messages = _reading_messages()[:4]
    repeat = messages[2]["tool_calls"][0]
    other = {"type": "function", "function": {"name": "search", "arguments": {"query": "Kestrel founder"}}}
    assert repeats_a_call([repeat], messages) and not repeats_a_call([other], messages)
    assert not repeats_a_call([other, other], messages) and repeats_a_call([other, repeat], messages)
    assert not repeats_a_call([repeat], messages[:2])  # nothing called yet

    backend = TransformersBackend(model, prepare_tokenizer(tokenizer), Sampling(max_new_tokens=4), reuse_cache=False,
                                  answer_threshold=0.5, hold_below=True, release_repeats=True)
    holds = [Hold([0.3, 0.9], greedy_answers=True), Hold([0.1, 0.2], greedy_answers=False),
             Hold([0.3, 0.9], greedy_answers=True)]
    texts = [render_tool_call(repeat), render_tool_call(repeat), render_tool_call(other)]
    asked = []

    def fake_complete_ids(ids, keys=None, max_new_tokens=None, hold=None, only_these=True):
        asked.append(only_these)
        if hold is not None:  # the held turns
            return [Completion(text, 5, len(row)) for text, row in zip(texts, ids)]
        return [Completion("<answer>Oslo</answer>", 6, len(row)) for row in ids]

    monkeypatch.setattr(backend, "_stops", lambda conversations, ids, keys: list(holds))
    monkeypatch.setattr(backend, "complete_ids", fake_complete_ids)
    released, kept, new_call = backend.complete([messages, list(messages), list(messages)], None)
    assert released.released and not released.held and released.text == "<answer>Oslo</answer>"
    assert not kept.released and kept.text == texts[1]  # greedy did not want to answer: the hold changed nothing
    assert not new_call.released and new_call.held and new_call.text == texts[2]
    assert backend.released_holds == 1 and backend.held_answers == 1
    assert asked == [True, False]  # the second pass keeps the other conversations' turn caches
    backend.release_repeats = False
    assert not any(c.released for c in backend.complete([messages], None)) and backend.released_holds == 1
    monkeypatch.undo()
    cached = TransformersBackend(model, prepare_tokenizer(tokenizer), Sampling(max_new_tokens=4))
    first, second = list(messages), messages[:2]
    cached.complete([first, second], None)
    ids = tokenizer(cached.render(first, None), add_special_tokens=False).input_ids
    cached.complete_ids([ids], [id(first)], only_these=False)
    assert set(cached.turn_cache.entries) == {id(first), id(second)}
    cached.complete_ids([ids], [id(first)])  # a round's only conversation: the others are forgotten
    assert set(cached.turn_cache.entries) == {id(first)}


def test_answer_threshold_opens_the_turn_with_the_tag_after_tool_outputs_only(tiny):
    from agent.backends import Sampling, TransformersBackend, tag_probability
    from agent.chat import prepare_tokenizer

    model, tokenizer = tiny
    tokenizer = prepare_tokenizer(tokenizer)
    messages = _reading_messages()[:4]
    backend = TransformersBackend(model, tokenizer, Sampling(max_new_tokens=4), reuse_cache=False)
    ids = tokenizer(backend.render(messages, None), add_special_tokens=False).input_ids
    p, greedy = tag_probability(model, ids, backend.answer_tag)
    assert 0.0 < p < 1e-3 and not greedy  # the tiny random model never picks the tag by itself
    unforced = backend.complete([messages], None)[0]
    backend.answer_threshold = p / 2
    after_tool, after_question = backend.complete([messages, messages[:2]], None)
    assert after_tool.text.startswith("<answer>") and not after_question.text.startswith("<answer>")
    assert backend.forced_answers == 1 and after_tool.tokens == unforced.tokens + len(backend.answer_tag)
    backend.answer_threshold = p * 2
    assert backend.complete([messages], None)[0].text == unforced.text and backend.forced_answers == 1


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
