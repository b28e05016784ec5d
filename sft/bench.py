"""SFT training throughput of the recipe's setup against plain fp32, in one run on the same batches.

    python -m sft.bench --config recipes/smollm2-135m/sft.yaml --steps 8 --rounds 1  # make bench-sft: 21-40 min
    python -m sft.bench --steps 8 --rounds 2 --only "shared prompt"  # issue 4: the recipe vs fp32; compiled or not
    python -m sft.bench --steps 6 --only "bf16 autocast, loss positions, compiled"  # fp32 + compiled bf16
    python -m sft.bench --sampling --steps 8 --rounds 1   # the recipe's setup with each batch sampler
    python -m sft.bench --micro-batches --steps 6 --rounds 1  # its 8 rows a step as 4 x 2 (the recipe), 2 x 4, 8 x 1
    python -m sft.bench --freeze --steps 4 --rounds 1     # the recipe's setup with its bottom layers frozen

Each setup trains a fresh copy of the model for the same steps on the same trajectories (same
seed, so the same batches): fp32 with the full output layer (TRL's default path), with the
output layer computed only at positions that carry loss, that with each decoder layer's MLP and
norms compiled (`compile_layers`; its first step includes the ~40 s compile, so use enough steps),
and that with the batch's common prompt run once (`share_prompt_prefix`); the same four under bf16
autocast, the shared prompt without compiled layers, and the compiled one with gradient checkpointing
(TRL's default, which the recipes turn off). With --sampling it compares instead the recipe's own
setup (its gradient accumulation included) under each `train_sampling_strategy`, against
length-grouped batches; with --freeze, the recipe's setup with the embeddings and the first N
decoder layers fixed (`freeze_layers`), against N = 0; with --micro-batches, the recipe's rows a
step run in micro-batches of each power of two from 2 that divides them. The bf16 setups run only
on a CPU with bf16 units (elsewhere bf16 is emulated and ~24x slower; --all runs them anyway).
Rounds alternate the order to spread the machine's noise.
Writes runs/bench/sft_throughput.{json,md} (--sampling: sft_sampling.{json,md}; --freeze:
sft_freeze.{json,md}; --micro-batches: sft_micro_batches.{json,md}).
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from common.errors import cli_main
from common.hardware import cpu_has_bf16_units
from common.io import atomic_write_json, atomic_write_text
from common.paths import runs_dir

BASELINE = "fp32, full output layer"
SETUPS = {  # name -> overrides
    BASELINE: {"bf16": False, "loss_positions_only": False},
    "fp32, output layer at loss positions": {"bf16": False, "loss_positions_only": True},
    "fp32, loss positions, compiled layers": {"bf16": False, "loss_positions_only": True, "compile_layers": True},
    "fp32, loss positions, compiled, shared prompt": {"bf16": False, "loss_positions_only": True,
                                                       "compile_layers": True, "share_prompt_prefix": True},
    "bf16 autocast, full output layer": {"bf16": True, "loss_positions_only": False},
    "bf16 autocast, output layer at loss positions": {"bf16": True, "loss_positions_only": True},
    "bf16 autocast, loss positions, compiled layers": {"bf16": True, "loss_positions_only": True,
                                                        "compile_layers": True},
    "bf16 autocast, loss positions, compiled, shared prompt": {"bf16": True, "loss_positions_only": True,
                                                               "compile_layers": True, "share_prompt_prefix": True},
    # does compiling still pay once the prompt is shared? (stop 57, AMD Zen 5: 1.00x; stop 11, AMX, unshared: 1.24x)
    "bf16 autocast, loss positions, shared prompt": {"bf16": True, "loss_positions_only": True,
                                                     "share_prompt_prefix": True},
    "bf16 autocast, loss positions, compiled, gradient checkpointing": {
        "bf16": True, "loss_positions_only": True, "compile_layers": True, "gradient_checkpointing": True},
}
# --sampling: the recipe's setup with each way of making batches; tokens/s counts real tokens, so
# padding shows as lost speed. group_by_length pads least; batch_rebalance draws each step at random.
SAMPLINGS = {f"recipe setup, {name} batches": {"train_sampling_strategy": name}
             for name in ("group_by_length", "batch_rebalance", "random")}
# --freeze: no backward pass below the first trained layer (sft.train freeze_bottom)
FREEZES = {f"recipe setup, {count} layers frozen": {"freeze_layers": count} for count in (0, 10, 15, 20)}


def micro_batches(config: str) -> dict:
    """--micro-batches: the recipe's rows a step cut into micro-batches of its own size first, then of
    every other power of two from 2 that divides them (one row has no prompt to share). Bigger ones run
    the shared prompt once for more rows and make larger matmuls, but pad more (fewer like-length rows)."""
    import yaml

    recipe = yaml.safe_load(Path(config).read_text())
    own, step = recipe.get("per_device_train_batch_size", 8), recipe.get("gradient_accumulation_steps", 1)
    rows = own * step
    sizes = [own] + [size for size in (2, 4, 8, 16, 32) if size != own and size <= rows and rows % size == 0]
    return {f"recipe setup, micro-batches of {size} x {rows // size}": {
        "per_device_train_batch_size": size, "gradient_accumulation_steps": rows // size} for size in sizes}


def one_run(config: str, steps: int, overrides: dict, as_recipe: bool = False) -> dict:
    """`as_recipe`: the recipe's own setup and gradient accumulation with only `overrides` changed
    (the sampling comparison); otherwise one micro-batch per step and every speed-up off unless set."""
    defaults = {} if as_recipe else {"gradient_accumulation_steps": 1, "compile_layers": False, "share_prompt_prefix": False}
    argv = []
    for key, value in {**defaults, **overrides}.items():
        argv += [f"--{key}", str(value)]
    trainer = scratch_trainer(config, steps, argv)
    marks = step_marks()
    trainer.add_callback(marks)
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    tokens = int(trainer.state.num_input_tokens_seen)
    (t1, tokens1), (tn, tokens_n) = marks.points[0], marks.points[-1]
    return {"seconds": seconds, "tokens": tokens, "tokens_per_s": tokens / seconds,
            "after_first_step_tokens_per_s": (tokens_n - tokens1) / (tn - t1) if tn > t1 else None}


def scratch_trainer(config: str, steps: int, argv: list[str] = ()):
    """The recipe's SFT trainer for `steps` steps into a scratch folder, saving nothing; argv: more settings."""
    from trl import ModelConfig, SFTConfig

    from common.recipe import parse_recipe
    from sft.train import SFTScriptArguments, build_trainer, make_dataset

    argv = ["--config", config, "--max_steps", str(steps), "--output_dir", str(runs_dir() / "bench/sft-scratch"),
            "--save_strategy", "no", "--logging_steps", str(steps), *argv]
    script, args, model_args = parse_recipe((SFTScriptArguments, SFTConfig, ModelConfig), argv)
    dataset, _, _ = make_dataset(script, args, model_args.model_name_or_path)
    return build_trainer(script, args, model_args, dataset)


def step_marks():
    """(time, tokens seen) at the end of every step: the first step carries one-off costs (the
    compile, the longest batch), so steady state is measured from its end."""
    from transformers import TrainerCallback

    class _Marks(TrainerCallback):
        def __init__(self):
            self.points = []

        def on_step_end(self, args, state, control, **kwargs):
            self.points.append((time.perf_counter(), state.num_input_tokens_seen))

    return _Marks()


def _mean_known(values) -> float | None:
    """Mean of the measured values; None (shown as n/a) when no run had a step after its first."""
    known = [v for v in values if v is not None]
    return round(statistics.mean(known), 1) if known else None


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="SFT throughput: recipe setup vs fp32, same batches.")
    parser.add_argument("--config", default="recipes/smollm2-135m/sft.yaml")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--all", action="store_true", help="run the bf16 setups even on a CPU without bf16 units")
    parser.add_argument("--only", nargs="+", metavar="WORDS", help="run only the setups whose names contain "
                        "one of these (the fp32 baseline always runs), "
                        "e.g. --only 'bf16 autocast, loss positions, compiled'")
    parser.add_argument("--sampling", action="store_true", help="compare the recipe's setup under each batch "
                        "sampler (train_sampling_strategy) instead of the speed-ups")
    parser.add_argument("--freeze", action="store_true", help="compare the recipe's setup with its bottom layers "
                        "frozen (freeze_layers) instead of the speed-ups")
    parser.add_argument("--micro-batches", action="store_true", help="compare the recipe's setup with its rows a "
                        "step in micro-batches of other sizes (the recipe's 8: 4 x 2, then 2 x 4 and 8 x 1)")
    args = parser.parse_args(argv)
    if args.micro_batches:
        setups = micro_batches(args.config)
        return bench(args, setups, next(iter(setups)), "sft_micro_batches", as_recipe=True)
    if args.sampling:
        return bench(args, SAMPLINGS, next(iter(SAMPLINGS)), "sft_sampling", as_recipe=True)
    if args.freeze:
        return bench(args, FREEZES, next(iter(FREEZES)), "sft_freeze", as_recipe=True)
    setups = {name: o for name, o in SETUPS.items() if args.all or not o["bf16"] or cpu_has_bf16_units()}
    no_bf16_units = len(setups) < len(SETUPS)
    if args.only:
        setups = {name: o for name, o in setups.items()
                  if name == BASELINE or any(word in name for word in args.only)}
    if no_bf16_units:
        print("this CPU has no bf16 units (AMX / AVX512-BF16): the bf16 setups are skipped (~24x slower; --all runs them)")
    bench(args, setups, BASELINE, "sft_throughput")


def bench(args, setups: dict, baseline: str, report: str, as_recipe: bool = False) -> None:
    """Each setup for args.steps steps per round, rounds in alternating order; tables against `baseline`."""
    results = {name: [] for name in setups}
    for round_index in range(args.rounds):
        names = list(setups) if round_index % 2 == 0 else list(reversed(setups))
        for name in names:
            run = one_run(args.config, args.steps, setups[name], as_recipe)
            results[name].append(run)
            print(f"round {round_index + 1}: {name}: {run['tokens_per_s']:.0f} tokens/s "
                  f"({_mean_known([run['after_first_step_tokens_per_s']])} after the first step)")
    base = statistics.mean(r["tokens_per_s"] for r in results[baseline])
    summary = {name: {"tokens_per_s": round(statistics.mean(r["tokens_per_s"] for r in runs), 1),
                      "after_first_step": _mean_known(r["after_first_step_tokens_per_s"] for r in runs),
                      "runs": [round(r["tokens_per_s"], 1) for r in runs],
                      "vs_baseline": round(statistics.mean(r["tokens_per_s"] for r in runs) / base, 2)}
               for name, runs in results.items()}
    out = runs_dir() / "bench"
    atomic_write_json(out / f"{report}.json", {"config": args.config, "steps": args.steps, "baseline": baseline,
                                             "rounds": args.rounds, "only": args.only, "setups": summary})
    rows = [f"| {name} | {s['tokens_per_s']} | {s['vs_baseline']}x | {'n/a' if s['after_first_step'] is None else s['after_first_step']} | "
            f"{', '.join(map(str, s['runs']))} |"
            for name, s in summary.items()]
    mode = " --sampling" if args.sampling else " --freeze" if args.freeze else " --micro-batches" if args.micro_batches else ""
    command = f"python -m sft.bench --config {args.config} --steps {args.steps}{mode}"
    what = ("each sampler's own batches" if args.sampling else
            "the same rows in each step, cut into each setup's micro-batches" if args.micro_batches else
            "same batches for each setup")
    table = "\n".join([f"SFT throughput (`{command}`), full fine-tuning, {what}:", "",
                       f"| setup | tokens/s (mean) | vs {baseline} | tokens/s after the first step | per round |",
                       "|---|---|---|---|---|", *rows, ""])
    atomic_write_text(out / f"{report}.md", table)
    print(table)


if __name__ == "__main__":
    cli_main(main)
