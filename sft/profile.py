"""Where an SFT step's CPU time goes: the recipe's own setup under torch.profiler, operators grouped.

    python -m sft.profile --config recipes/smollm2-135m/sft.yaml --steps 6   # ~3 min on 2 cores
    python -m sft.profile --attention                                         # SDPA alone at the recipe's shapes

The recipe trains as `make sft` would (its batches, compile, shared prompt, autocast) for --steps steps;
the profile covers the steps after the first --skip, which carry one-off costs (the compile, warm-up).
Operators are grouped by what they do: attention (SDPA's kernels, forward and backward), matmuls, the
compiled MLP and norms' own code, copies and casts (autocast's bf16 weights among them), the rest.

--attention times one decoder layer's attention alone, forward and backward, for a micro-batch of the
recipe's rows (default: the default trajectories' ~740 tokens, of which ~245 are the shared prompt): the
masked rectangle that the shared prompt makes (suffix queries against prompt + suffix keys), the same
attention as SDPA's causal square with the queries padded in front (exactly equal), and without a shared
prompt, a padding mask against plain causal. Stop 51 (2 AMX cores): attention was 42% of a step, SDPA's
backward ~5x its forward; the causal rewrite of the shared-prompt case was 3-5% faster in two rounds, within
their noise, so the recipe keeps the mask.
Writes runs/bench/sft_profile.{json,md} (--attention: sft_attention.{json,md}).
"""
from __future__ import annotations

import argparse
import time

from common.errors import cli_main
from common.io import atomic_write_json, atomic_write_text
from common.paths import runs_dir

GROUPS = (  # (group, aten operators by name, words in other operators' names); the first group that matches wins
    ("attention", (), ("scaled_dot_product", "flash_attention", "efficient_attention")),
    ("matmul", ("aten::mm", "aten::addmm", "aten::bmm", "aten::matmul", "aten::linear"), ()),
    ("compiled MLP and norms", (), ("CompiledFxGraph", "CompiledFunction", "Torch-Compiled", "TorchDynamo")),
    ("copies and casts", ("aten::copy_", "aten::_to_copy", "aten::to", "aten::contiguous", "aten::clone"), ()),
    ("optimizer", (), ("adamw", "_foreach_")),
)


def group_of(name: str) -> str:
    for group, operators, words in GROUPS:
        if name in operators or any(word.lower() in name.lower() for word in words):
            return group
    return "other"


def grouped_shares(operators: list[tuple[str, float]]) -> dict[str, float]:
    """operators: (name, self CPU seconds); each group's share of their sum, largest first."""
    total = sum(seconds for _, seconds in operators) or 1.0
    shares: dict[str, float] = {}
    for name, seconds in operators:
        shares[group_of(name)] = shares.get(group_of(name), 0.0) + seconds / total
    return dict(sorted(shares.items(), key=lambda item: -item[1]))


def profile_steps(config: str, steps: int, skip: int, overrides: tuple[str, ...] = ()) -> dict:
    """The recipe's setup for `steps` steps, profiled after the first `skip`: [(operator, self seconds)].
    overrides: more command-line settings of the recipe (e.g. --trajectories PATH)."""
    import torch
    from transformers import TrainerCallback

    from sft.bench import scratch_trainer

    trainer = scratch_trainer(config, steps, ["--max_train_minutes", "0", *overrides])
    profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
    marks = {}

    class _Window(TrainerCallback):
        def on_step_end(self, _args, state, control, **kwargs):
            if state.global_step == skip:
                marks["start"] = (time.perf_counter(), state.num_input_tokens_seen)
                profiler.start()

    trainer.add_callback(_Window())
    trainer.train()
    profiler.stop()
    seconds, tokens = time.perf_counter() - marks["start"][0], trainer.state.num_input_tokens_seen - marks["start"][1]
    operators = [(event.key, event.self_cpu_time_total / 1e6) for event in profiler.key_averages()
                 if not event.key.startswith("ProfilerStep")]
    return {"steps": steps - skip, "seconds": seconds, "tokens": int(tokens), "operators": operators}


def bottom_right_causal_mask(queries: int, keys: int):
    """Each of the last `queries` positions sees the keys up to its own position (a prompt cached before them)."""
    import torch

    return torch.ones(queries, keys, dtype=torch.bool).tril(keys - queries)


def masked_attention(q, k, v):
    """As transformers runs SDPA on CPU with a mask: the key/value heads repeated to the query heads."""
    import torch.nn.functional as F

    groups = q.shape[1] // k.shape[1]
    mask = bottom_right_causal_mask(q.shape[2], k.shape[2])
    return F.scaled_dot_product_attention(q, k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1), attn_mask=mask)


def padded_causal_attention(q, k, v):
    """The same attention with SDPA's causal flag, whose square is top-left aligned: queries padded in front."""
    import torch
    import torch.nn.functional as F

    pad = k.shape[2] - q.shape[2]
    if pad:
        q = torch.cat([q.new_zeros(*q.shape[:2], pad, q.shape[3]), q], dim=2)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)[:, :, pad:]


def attention_times(rows: int, heads: int, kv_heads: int, head_dim: int, length: int, prefix: int,
                    repeats: int = 5) -> dict[str, dict[str, float]]:
    """Forward and backward milliseconds (best of the repeats after the first) of one layer's attention in bf16."""
    import torch

    suffix = length - prefix
    cases = {
        "shared prompt: suffix queries, bottom-right causal mask (the recipe)": (suffix, masked_attention),
        "shared prompt: the same as a causal square, queries padded in front": (suffix, padded_causal_attention),
        "no shared prompt: causal mask (a padded batch)": (length, masked_attention),
        "no shared prompt: is_causal, no mask": (length, padded_causal_attention),
    }
    times = {}
    for name, (queries, attend) in cases.items():
        q, k, v = (torch.randn(rows, count, size, head_dim, dtype=torch.bfloat16, requires_grad=True)
                   for count, size in ((heads, queries), (kv_heads, length), (kv_heads, length)))
        forward, backward = [], []
        for _ in range(repeats):
            start = time.perf_counter()
            out = attend(q, k, v)
            middle = time.perf_counter()
            out.float().square().sum().backward()
            forward.append(middle - start)
            backward.append(time.perf_counter() - middle)
        times[name] = {"forward_ms": round(min(forward[1:]) * 1e3, 1), "backward_ms": round(min(backward[1:]) * 1e3, 1)}
    return times


def profile_report(config: str, result: dict, top: int = 15) -> str:
    shares = grouped_shares(result["operators"])
    ranked = sorted(result["operators"], key=lambda op: -op[1])[:top]
    total = sum(seconds for _, seconds in result["operators"]) or 1.0
    return "\n".join([
        f"Where an SFT step's CPU time goes (`python -m sft.profile --config {config}`): {result['steps']} profiled "
        f"steps, {result['seconds']:.1f} s, {result['tokens'] / result['seconds']:.0f} tokens/s under the profiler.", "",
        "| operator group | share of self CPU time |", "|---|---|",
        *[f"| {group} | {share:.1%} |" for group, share in shares.items()], "",
        "| operator | self CPU s | share | group |", "|---|---|---|---|",
        *[f"| `{name[:60]}` | {seconds:.2f} | {seconds / total:.1%} | {group_of(name)} |" for name, seconds in ranked], ""])


def attention_report(shape: dict, times: dict) -> str:
    command = "python -m sft.profile --attention " + " ".join(f"--{key.replace('_', '-')} {value}" for key, value in shape.items())
    return "\n".join([f"One layer's attention in bf16, forward and backward (`{command}`):", "",
                      "| case | forward ms | backward ms | total ms |", "|---|---|---|---|",
                      *[f"| {name} | {t['forward_ms']} | {t['backward_ms']} | {t['forward_ms'] + t['backward_ms']:.1f} |"
                        for name, t in times.items()], ""])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="Where an SFT step's CPU time goes (torch.profiler), or attention alone.")
    parser.add_argument("--config", default="recipes/smollm2-135m/sft.yaml")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--skip", type=int, default=2, help="steps left out of the profile (compile, warm-up)")
    parser.add_argument("--attention", action="store_true", help="time SDPA alone at the recipe's shapes instead")
    parser.add_argument("--rows", type=int, default=4, help="--attention: rows in a micro-batch")
    parser.add_argument("--heads", type=int, default=9)
    parser.add_argument("--kv-heads", type=int, default=3)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--length", type=int, default=740, help="tokens in a row (the default trajectories' mean)")
    parser.add_argument("--prefix", type=int, default=245, help="of which the prompt the rows share")
    args = parser.parse_args(argv)
    out = runs_dir() / "bench"
    if args.attention:
        if not 0 <= args.prefix < args.length or args.kv_heads < 1 or args.heads % args.kv_heads:
            parser.error("--attention needs 0 <= --prefix < --length and --heads a multiple of --kv-heads")
        shape = {key: getattr(args, key) for key in ("rows", "heads", "kv_heads", "head_dim", "length", "prefix")}
        times = attention_times(**shape)
        atomic_write_json(out / "sft_attention.json", {"shape": shape, "times": times})
        report = attention_report(shape, times)
        atomic_write_text(out / "sft_attention.md", report)
    else:
        if not 0 < args.skip < args.steps:
            parser.error("--skip must be at least 1 and below --steps")
        result = profile_steps(args.config, args.steps, args.skip)
        report = profile_report(args.config, result)
        atomic_write_json(out / "sft_profile.json", {"config": args.config, **result,
                                                      "groups": grouped_shares(result["operators"])})
        atomic_write_text(out / "sft_profile.md", report)
    print(report)


if __name__ == "__main__":
    cli_main(main)
