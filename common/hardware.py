"""bf16 only where it pays: CPU recipes ask for bf16 "where it is faster", and for training that is measured.

A CPU without bf16 units (no AMX, no AVX512-BF16: most laptops and AVX2 servers) emulates bf16
matmuls, and then bf16 is far slower than fp32. Measured on a 2-core AMD EPYC with AVX2 only
(stop 13, SmolLM2-135M): forward + backward of 2 x 256 tokens 8.6 s in fp32 against 208 s under
bf16 autocast (24x slower); a generation forward of the same batch 2.9 s in fp32 against 15.4 s
with bf16 weights (5.3x slower). On the Intel CPUs with AMX of earlier stops bf16 was 1.4-2x
faster, and on a 2-core AMD EPYC with AVX512-BF16 the SFT recipe ran ~104 s per step in fp32
against 21-66 s in bf16 (stop 22). But the flag alone does not decide it: on a 2-core Intel Xeon
(family 6, model 207) that reports AVX512-BF16 and no AMX, bf16 matmuls ran at 0.41-0.74x fp32 and
the SFT recipe at 132 against 199 tokens/s (stop 24, `sft.bench`).
So for training, where the CPU reports bf16 units, a one-second probe times that matmul in both
dtypes (alternated, median) and bf16 autocast is used only if it is clearly faster; the result is
kept in runs/hardware/bf16_probe.json (keyed by CPU model, torch version and threads) so every
stage of a machine decides alike. Delete the file to measure again. Generation is another matter:
one token per episode per step reads every weight, so bf16 weights (half the bytes) paid even on
that Intel CPU: 16 SFT episodes in 84 and 80 s against 103 and 109 s in fp32 (alternated).
- `dtype: fast` (agent.run, pass-rate) loads bfloat16 weights where the CPU has bf16 units; evaluation
  (eval.yaml) uses float32 since stop 63, because in bf16 an episode's answer depends on its batch mates;
- `cpu_bf16: auto` (sft/rl recipes) keeps `bf16: true` where the probe finds bf16 faster and trains
  in fp32 elsewhere, saying why; `cpu_bf16: always` keeps bf16 regardless.
Timing needs the machine to itself: `CpuShare` records how much of the CPU a training stage got.
"""
from __future__ import annotations

import json
import os
import statistics
import time

CPU_BF16_POLICIES = ("auto", "always")
PROBE_FILE = "hardware/bf16_probe.json"  # under runs/
# bf16 must be clearly faster: on a tie fp32 is the more accurate choice, and one machine's probes
# spread by ~10-20% under a shared machine's load (0.41-0.59x on stop 24's Intel Xeon)
MIN_SPEEDUP = 1.1


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


def cpu_name() -> str:
    """The CPU's model name with its family / model / stepping (one brand string covers many chips)."""
    import platform

    fields = {}
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if not line.strip():
                    break  # the first processor's block is enough
                name, _, value = line.partition(":")
                fields[name.strip()] = value.strip()
    except OSError:
        pass
    parts = [fields.get("model name") or platform.processor() or platform.machine()]
    parts += [f"{key} {fields[key]}" for key in ("cpu family", "model", "stepping") if key in fields]
    return ", ".join(parts)


def time_matmuls(rounds: int = 5, size: tuple[int, int, int] = (2048, 576, 1536)) -> dict:
    """Median seconds of 4 matmuls of `size` (tokens x hidden x MLP width of SmolLM2-135M) per dtype,
    the dtypes alternated so that a change in the machine's load hits both alike."""
    import torch

    m, k, n = size
    operands = {"float32": (torch.randn(m, k), torch.randn(k, n))}
    operands["bfloat16"] = tuple(x.bfloat16() for x in operands["float32"])
    seconds = {name: [] for name in operands}
    for trial in range(rounds + 1):  # the first round warms up (kernel selection, JIT) and is dropped
        for name, (a, b) in operands.items():
            start = time.perf_counter()
            for _ in range(4):
                a @ b
            if trial:
                seconds[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in seconds.items()}


def read_probes(path) -> dict:
    """{machine key: probe} from the cache file; an unreadable or malformed file counts as empty."""
    try:
        probes = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return probes if isinstance(probes, dict) else {}


def bf16_probe() -> dict:
    """The cached (or now measured) matmul timing of this machine, with `bf16_pays`."""
    import torch

    from common.io import atomic_write_json
    from common.paths import runs_dir

    path = runs_dir() / PROBE_FILE
    key = {"cpu": cpu_name(), "torch": torch.__version__, "threads": torch.get_num_threads()}
    # one entry per machine key: a run with other threads must not evict (and so re-decide) the usual one
    probes, entry = read_probes(path), json.dumps(key, sort_keys=True)
    if isinstance(probes.get(entry), dict) and "bf16_pays" in probes[entry]:
        return probes[entry]
    median = time_matmuls()
    speedup = median["float32"] / median["bfloat16"]
    result = {"key": key, "fp32_ms": round(median["float32"] * 1e3, 2),
              "bf16_ms": round(median["bfloat16"] * 1e3, 2), "bf16_speedup": round(speedup, 2),
              "bf16_pays": speedup >= MIN_SPEEDUP}
    try:
        atomic_write_json(path, {**probes, entry: result})
    except OSError as exc:  # a read-only runs/ only costs a new measurement next time
        print(f"bf16 probe: could not cache the result in {path} ({exc})")
    print(f"bf16 probe: matmuls {result['bf16_speedup']}x fp32 speed on this CPU -> "
          f"{'bf16' if result['bf16_pays'] else 'fp32'} for training with cpu_bf16: auto ({path})")
    return result


def bf16_pays() -> bool:
    """bf16 autocast trains faster: the CPU has bf16 units and the probe found them clearly faster."""
    return cpu_has_bf16_units() and bf16_probe()["bf16_pays"]


def on_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def fast_dtype() -> str:
    """bfloat16 where the CPU has bf16 units, else float32: generation reads every weight per token, so
    half the bytes pays even where bf16 matmuls are slower (module docstring). For CPU generation only:
    the transformers backend never moves the model to a GPU (GPUs generate through vLLM, which picks
    its own dtype)."""
    return "bfloat16" if cpu_has_bf16_units() else "float32"


def resolved_dtype(dtype: str) -> str:
    """The dtype a `--dtype` value generates in on this machine (`fast` resolved; anything else, a torch dtype
    included, as given), as results record it."""
    return fast_dtype() if dtype == "fast" else dtype


def fp32_instead_of_bf16(training_args, policy: str) -> bool:
    """True (and says why) when a CPU run asks for bf16 where it does not pay (bf16_pays), unless policy is `always`."""
    from common.errors import UserError

    if policy not in CPU_BF16_POLICIES:
        raise UserError(f"cpu_bf16: {policy!r} is not one of {', '.join(CPU_BF16_POLICIES)}")
    on_cpu = training_args.use_cpu or not on_gpu()
    if not (training_args.bf16 and on_cpu and policy == "auto"):
        return False
    probe = bf16_probe() if cpu_has_bf16_units() else None  # one probe read (or run) decides and explains
    if probe is None or not probe["bf16_pays"]:
        why = (f"bf16 matmuls ran at {probe['bf16_speedup']}x fp32 speed here (the bf16 probe)" if probe else
               "this CPU has no bf16 units (AMX / AVX512-BF16), where bf16 autocast is ~24x slower than fp32")
        print(f"{why}: training in fp32 (set cpu_bf16: always to keep bf16)")
        if os.environ.get("ACCELERATE_MIXED_PRECISION") == "bf16":  # it would win over --bf16 false
            del os.environ["ACCELERATE_MIXED_PRECISION"]
            print("(ACCELERATE_MIXED_PRECISION=bf16 is unset for this run)")
        return True
    return False


SHARED_CPU_BELOW = 0.6  # alone on 2 cores: 0.93 for RL, 0.94 for the pass-rate sampler (stop 27)


def process_cpu_seconds() -> float:
    """User + system CPU time of this process, all its threads."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class CpuShare:
    """The share of torch's compute threads' time a stage actually got while it ran.

    Two torch jobs on 2 cores made both several times slower (stop 26: RL at up to 368 s per step
    beside a probe, ~90-146 s alone in other stops), and nothing in the stage's own log said so.
    Stage summaries carry this share, so a reported time can be checked: 0.93 for RL alone on 2
    cores (stop 27), about half or less when another job shares them. A model too small for many
    cores also scores low, so the warning says what it may mean, not what happened. A stage whose
    work runs on a GPU is not warned about: its CPU mostly waits.
    """

    def __init__(self):
        import torch

        self.threads = torch.get_num_threads()  # read before the clocks start: a first torch import costs CPU time
        self.cpu_start = process_cpu_seconds()
        self.wall_start = time.perf_counter()

    def seconds(self) -> float:
        """Wall time since the stage started (the stage's own timing: one clock for both)."""
        return time.perf_counter() - self.wall_start

    def share(self) -> float:
        return round((process_cpu_seconds() - self.cpu_start) / max(self.seconds() * self.threads, 1e-9), 3)

    def report(self, on_cpu: bool) -> float:
        """The share so far, printing a warning when a CPU stage got too little of the CPU."""
        share = self.share()
        warning = shared_cpu_warning(share) if on_cpu else None
        if warning:
            print(f"warning: {warning}")
        return share


def shared_cpu_warning(share: float) -> str | None:
    if share >= SHARED_CPU_BELOW:
        return None
    return (f"this run got {share:.0%} of its CPU threads' time (alone on 2 cores: ~93%): if another job "
            "shared the machine, its wall time is not the recipe's (run stages one at a time to time them)")
