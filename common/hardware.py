"""bf16 only where the hardware has it: CPU recipes ask for bf16 "where it pays".

A CPU without bf16 units (no AMX, no AVX512-BF16: most laptops and AVX2 servers) emulates bf16
matmuls, and then bf16 is far slower than fp32. Measured on a 2-core AMD EPYC with AVX2 only
(stop 13, SmolLM2-135M): forward + backward of 2 x 256 tokens 8.6 s in fp32 against 208 s under
bf16 autocast (24x slower); a generation forward of the same batch 2.9 s in fp32 against 15.4 s
with bf16 weights (5.3x slower). On the Intel CPUs with AMX of earlier stops bf16 was 1.4-2x
faster. So:
- `dtype: fast` (agent.run, eval, pass-rate) loads bfloat16 weights where they are fast, else float32;
- `cpu_bf16: auto` (sft/rl recipes) keeps `bf16: true` on a CPU with bf16 units and trains in
  fp32 on one without, saying so; `cpu_bf16: always` keeps bf16 regardless.
"""
from __future__ import annotations

import os

CPU_BF16_POLICIES = ("auto", "always")


def cpu_has_bf16_units() -> bool:
    import torch

    probes = ("_is_amx_tile_supported", "_is_avx512_bf16_supported")
    known = [getattr(torch.cpu, name) for name in probes if hasattr(torch.cpu, name)]
    if known:
        return any(probe() for probe in known)
    try:  # an older torch without the probes: read the flags (Linux)
        flags = open("/proc/cpuinfo").read()
    except OSError:
        return False
    return "amx_bf16" in flags or "avx512_bf16" in flags


def on_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def fast_dtype() -> str:
    """bfloat16 where the CPU has bf16 units, else float32. For CPU generation only: the transformers
    backend never moves the model to a GPU (GPUs generate through vLLM, which picks its own dtype)."""
    return "bfloat16" if cpu_has_bf16_units() else "float32"


def fp32_instead_of_bf16(training_args, policy: str) -> bool:
    """True (and says why) when a CPU run asks for bf16 on a CPU without bf16 units, unless policy is `always`."""
    from common.errors import UserError

    if policy not in CPU_BF16_POLICIES:
        raise UserError(f"cpu_bf16: {policy!r} is not one of {', '.join(CPU_BF16_POLICIES)}")
    on_cpu = training_args.use_cpu or not on_gpu()
    if training_args.bf16 and on_cpu and policy == "auto" and not cpu_has_bf16_units():
        print("this CPU has no bf16 units (AMX / AVX512-BF16), where bf16 autocast is ~24x slower than fp32: "
              "training in fp32 (set cpu_bf16: always to keep bf16)")
        if os.environ.get("ACCELERATE_MIXED_PRECISION") == "bf16":  # it would win over --bf16 false
            del os.environ["ACCELERATE_MIXED_PRECISION"]
            print("(ACCELERATE_MIXED_PRECISION=bf16 is unset for this run)")
        return True
    return False
