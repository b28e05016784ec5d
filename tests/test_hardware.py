"""bf16 only where it pays: the probe and its cache, the dtype choice and the training recipes' cpu_bf16 policy."""
import pytest

import common.hardware as hardware
from common.errors import UserError
from common.recipe import parse_training_recipe


@pytest.fixture
def cpu(monkeypatch, runs):
    """A CPU machine whose bf16 units and probe timings (fp32 / bf16 seconds) the test decides."""
    monkeypatch.setattr(hardware, "on_gpu", lambda: False)

    def machine(units: bool, fp32_s: float = 1.0, bf16_s: float = 0.5):
        monkeypatch.setattr(hardware, "cpu_has_bf16_units", lambda: units)
        monkeypatch.setattr(hardware, "time_matmuls", lambda: {"float32": fp32_s, "bfloat16": bf16_s})
        (runs / hardware.PROBE_FILE).unlink(missing_ok=True)
    return machine


def test_training_bf16_follows_the_units_and_the_probe(cpu):
    cpu(True)
    assert hardware.bf16_pays()
    cpu(False)
    assert not hardware.bf16_pays()
    cpu(True, bf16_s=1.7)  # units, but slower than fp32 (stop 24's Intel Xeon)
    assert not hardware.bf16_pays()
    cpu(True, bf16_s=1 / 1.05)  # a 5% gain is within the probe's noise: fp32
    assert not hardware.bf16_pays()


def test_generation_dtype_follows_the_units_only(cpu):
    cpu(True, bf16_s=1.7)  # slower matmuls, but generation reads half the bytes (1.3x faster there)
    assert hardware.fast_dtype() == "bfloat16"
    cpu(False)
    assert hardware.fast_dtype() == "float32"


def test_probe_is_measured_once_per_machine(cpu, runs, monkeypatch):
    cpu(True)
    first = hardware.bf16_probe()
    assert first["bf16_pays"] and first["bf16_speedup"] == 2.0
    assert (runs / hardware.PROBE_FILE).exists()
    monkeypatch.setattr(hardware, "time_matmuls", lambda: {"float32": 1.0, "bfloat16": 3.0})
    assert hardware.bf16_probe() == first  # cached: every stage of the machine decides alike
    monkeypatch.setattr(hardware, "cpu_name", lambda: "another CPU")
    again = hardware.bf16_probe()
    assert not again["bf16_pays"] and again["key"]["cpu"] == "another CPU"


def test_a_broken_cache_is_measured_again(cpu, runs):
    cpu(True)
    path = runs / hardware.PROBE_FILE
    for broken in ("{trunc", "[]", '{"x": 1}'):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(broken)
        assert hardware.bf16_probe()["bf16_pays"]
    assert len(hardware.read_probes(path)) == 2  # the stray entry stays; this machine's is added


def test_time_matmuls_times_both_dtypes():
    seconds = hardware.time_matmuls(rounds=1, size=(8, 8, 8))
    assert set(seconds) == {"float32", "bfloat16"} and all(value > 0 for value in seconds.values())


@pytest.mark.parametrize("units, bf16_s, policy, bf16, mixed, why", [
    (False, 0.5, "auto", False, "no", "no bf16 units"),  # emulated bf16: train in fp32
    (True, 0.5, "auto", True, "bf16", None),
    (True, 1.7, "auto", False, "no", "bf16 matmuls ran at 0.59x fp32 speed"),  # units, but slower
    (False, 0.5, "always", True, "bf16", None),
])
def test_sft_recipe_trains_in_bf16_only_where_it_pays(cpu, units, bf16_s, policy, bf16, mixed, why, capsys):
    from trl import ModelConfig, SFTConfig

    from sft.train import SFTScriptArguments

    cpu(units, bf16_s=bf16_s)
    script, args, _ = parse_training_recipe((SFTScriptArguments, SFTConfig, ModelConfig), [
        "--config", "recipes/tiny/sft.yaml", "--bf16", "true", "--cpu_bf16", policy])
    assert (args.bf16, args.mixed_precision) == (bf16, mixed)  # accelerate's autocast follows mixed_precision
    out = capsys.readouterr().out
    assert ("training in fp32" in out) == (not bf16)
    assert why is None or why in out


def test_rl_recipe_policy_and_a_bad_policy(cpu):
    from trl import GRPOConfig, ModelConfig

    from rl.train import RLScriptArguments

    cpu(False)
    types = (RLScriptArguments, GRPOConfig, ModelConfig)
    _, args, _ = parse_training_recipe(types, ["--config", "recipes/tiny/rl.yaml", "--bf16", "true"])
    assert not args.bf16 and args.mixed_precision == "no"
    with pytest.raises(UserError, match="cpu_bf16: 'sometimes' is not one of auto, always"):
        parse_training_recipe(types, ["--config", "recipes/tiny/rl.yaml", "--cpu_bf16", "sometimes"])


def test_cpu_share_warns_only_when_a_cpu_stage_was_starved(capsys):
    import time

    idle = hardware.CpuShare()
    time.sleep(0.3)  # a stage that got (almost) no CPU time, as when another job holds the cores
    share = idle.report(on_cpu=True)
    assert share < 0.2 and "if another job shared the machine" in capsys.readouterr().out
    assert idle.report(on_cpu=False) < 0.2 and capsys.readouterr().out == ""  # a GPU stage's CPU mostly waits
    assert hardware.shared_cpu_warning(hardware.SHARED_CPU_BELOW) is None
