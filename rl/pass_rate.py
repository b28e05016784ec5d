"""The SFT model's pass rate on the RL questions: N sampled episodes per question, for rl.yaml's pass_rate_file.

    python -m rl.pass_rate --model runs/smollm2-135m/sft/final \
        --questions runs/data/world/questions/train_rl.jsonl --out runs/smollm2-135m/pass_rate --samples 4 --limit 64

GRPO learns nothing from a group whose rollouts all earn the same reward: a question the policy
never solves (or always solves) gives zero advantages. Sampling the SFT model a few times per
question under RL's own rollout limits (temperature 1, 96-token turns, 8 tool rounds) says which
questions sit in between; rl.train keeps those with `pass_rate_file`, `min_pass_rate`,
`max_pass_rate`. Each sample is an `agent.run` folder (out/sample_<i>/, resumable, seeded);
out/predictions.jsonl holds every sample's records and out/pass_rates.json the histogram and the
checkpoint's digest (rl.train refuses rates measured on another checkpoint).
"""
from __future__ import annotations

import argparse
import json
import shutil
from collections import Counter, defaultdict
from pathlib import Path

from common.errors import cli_main
from common.io import atomic_write_json, atomic_write_text, config_hash, file_sha256

from agent.tools import DEFAULT_K
from rl.data import evidence_was_seen, record_evidence_reward, record_score

# 2 since stop 27: sample i is drawn with seed + i (before, agent.run's own default seed made every
# sample the same episodes), so samples of version 1 are drawn again rather than reused
SAMPLER_VERSION = 2


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description="Sampled pass rate per question, for RL question selection.")
    parser.add_argument("--model", required=True, help="the policy RL starts from (the SFT checkpoint)")
    parser.add_argument("--questions", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--samples", type=int, default=4, help="episodes per question")
    parser.add_argument("--limit", type=int, help="only the first N questions")
    parser.add_argument("--datastore", default="world")
    parser.add_argument("--k", type=int, default=DEFAULT_K)
    parser.add_argument("--temperature", type=float, default=1.0, help="RL's rollout temperature")
    parser.add_argument("--max-new-tokens", type=int, default=96, help="RL's max_turn_tokens")
    parser.add_argument("--max-turns", type=int, default=9,
                        help="RL's tool rounds (max_tool_calling_iterations 8) + 1 to answer")
    parser.add_argument("--dtype", default="fast", help="fast: bfloat16 where the CPU has bf16 units, else float32")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def sample_argv(args, index: int) -> list[str]:
    argv = ["--model", args.model, "--questions", args.questions, "--datastore", args.datastore,
            "--out", str(Path(args.out) / f"sample_{index}"), "--k", str(args.k),
            "--temperature", str(args.temperature), "--max-new-tokens", str(args.max_new_tokens),
            "--max-turns", str(args.max_turns), "--dtype", args.dtype, "--batch-size", str(args.batch_size),
            "--seed", str(args.seed + index)]  # agent.run seeds itself: one seed would draw one episode N times
    return argv + (["--limit", str(args.limit)] if args.limit else [])


def histogram(records: list[dict], samples: int) -> dict:
    """Questions by number of correct samples (0..samples) and how many GRPO could learn from: with
    `em`; counting only answers whose episode saw all the gold documents (answer_needs_evidence); and
    with the `evidence` reward, whose value differs between samples of more questions than EM's."""
    solved, grounded, evidence = Counter(), Counter(), defaultdict(set)
    for record in records:
        is_right = record_score(record) > 0
        solved[record["id"]] += is_right
        grounded[record["id"]] += is_right and evidence_was_seen(record)
        evidence[record["id"]].add(record_evidence_reward(record))
    by_count = Counter(solved.values())
    right = sum(solved.values())
    return {"questions": len(solved), "samples": samples,
            "by_correct_samples": {str(c): by_count.get(c, 0) for c in range(samples + 1)},
            "mixed": _mixed(solved, samples), "mean_pass_rate": right / max(1, len(solved) * samples),
            "mixed_with_evidence": _mixed(grounded, samples),
            "share_right_without_evidence": (right - sum(grounded.values())) / right if right else None,
            "evidence_reward_spread": sum(len(values) > 1 for values in evidence.values())}


def _mixed(solved: Counter, samples: int) -> int:
    return sum(1 for count in solved.values() if 0 < count < samples)


def sampler_settings(args) -> dict:
    """What the samples' episodes depend on (the checkpoint by digest); not how many samples or questions."""
    from agent.models import checkpoint_digest
    from common.hardware import resolved_dtype

    return {**vars(args), "model": checkpoint_digest(args.model), "questions": file_sha256(Path(args.questions)),
            "dtype": resolved_dtype(args.dtype),
            "samples": None, "limit": None, "out": None,  # more samples or questions extend the run
            "sampler": SAMPLER_VERSION}


def start_or_resume(args) -> str:
    """Samples of another checkpoint, question file or setting are removed, not mixed in; returns the
    checkpoint's digest. The question file has been read (main) before anything is written."""
    from rl.train import resolve_start

    resolve_start(args.model)  # a missing SFT checkpoint: one clear line (the fix: make sft), before anything is written
    out = Path(args.out)
    settings = sampler_settings(args)
    wanted = config_hash(settings)
    before_stop_28 = config_hash({**settings, "limit": args.limit})  # stamps that still named the limit stay valid
    stamp = out / "fingerprint.txt"
    if stamp.exists() and stamp.read_text().strip() not in (wanted, before_stop_28):
        print(f"{out} holds samples of another checkpoint, question file or setting: starting over")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(stamp, wanted + "\n")
    return settings["model"]


def main(argv=None) -> None:
    from agent import run as agent_run

    args = parse_args(argv)
    asked = {q["id"] for q in agent_run.read_questions(args.questions, args.limit)}  # a bad file: one line, first
    digest = start_or_resume(args)
    records = []
    for index in range(args.samples):
        print(f"sample {index + 1}/{args.samples}")
        predictions = Path(args.out) / f"sample_{index}" / "predictions.jsonl"
        done = agent_run.read_done(predictions)
        if asked - set(done):  # a sample run with a larger --limit has them all
            agent_run.run(agent_run.parse_args(sample_argv(args, index)))
            done = agent_run.read_done(predictions)
        records += [r for r in done.values() if r["id"] in asked]
    agent_run.score(records)  # adds em per record
    atomic_write_text(Path(args.out) / "predictions.jsonl",
                      "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
    summary = {**histogram(records, args.samples), "model": args.model, "model_digest": digest}
    atomic_write_json(Path(args.out) / "pass_rates.json", summary)
    print(f"{summary['questions']} questions by correct samples of {args.samples}: {summary['by_correct_samples']}; "
          f"mixed (GRPO has a signal): {summary['mixed']}, {summary['mixed_with_evidence']} counting only answers "
          f"given with all gold documents seen (answer_needs_evidence), {summary['evidence_reward_spread']} with a spread of "
          f"the `evidence` reward  -> {args.out}/predictions.jsonl")


if __name__ == "__main__":
    cli_main(main)
