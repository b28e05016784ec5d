"""bf16 only where the hardware has it: the dtype choice and the training recipes' cpu_bf16 policy."""
import pytest

import common.hardware as hardware
from common.errors import UserError
from common.recipe import parse_training_recipe


@pytest.fixture
def cpu(monkeypatch):
    """A CPU machine whose bf16 units the test decides."""
    monkeypatch.setattr(hardware, "on_gpu", lambda: False)

    def has_units(value: bool):
        monkeypatch.setattr(hardware, "cpu_has_bf16_units", lambda: value)
    return has_units


def test_fast_dtype_follows_the_cpu(cpu):
    cpu(True)
    assert hardware.fast_dtype() == "bfloat16"
    cpu(False)
    assert hardware.fast_dtype() == "float32"


@pytest.mark.parametrize("units, policy, bf16, mixed", [
    (False, "auto", False, "no"),  # emulated bf16: train in fp32
    (True, "auto", True, "bf16"),
    (False, "always", True, "bf16"),
])
def test_sft_recipe_trains_in_bf16_only_where_it_pays(cpu, units, policy, bf16, mixed, capsys):
    from trl import ModelConfig, SFTConfig

    from sft.train import SFTScriptArguments

    cpu(units)
    script, args, _ = parse_training_recipe((SFTScriptArguments, SFTConfig, ModelConfig), [
        "--config", "recipes/tiny/sft.yaml", "--bf16", "true", "--cpu_bf16", policy])
    assert (args.bf16, args.mixed_precision) == (bf16, mixed)  # accelerate's autocast follows mixed_precision
    assert ("training in fp32" in capsys.readouterr().out) == (not bf16)


def test_rl_recipe_policy_and_a_bad_policy(cpu):
    from trl import GRPOConfig, ModelConfig

    from rl.train import RLScriptArguments

    cpu(False)
    types = (RLScriptArguments, GRPOConfig, ModelConfig)
    _, args, _ = parse_training_recipe(types, ["--config", "recipes/tiny/rl.yaml", "--bf16", "true"])
    assert not args.bf16 and args.mixed_precision == "no"
    with pytest.raises(UserError, match="cpu_bf16: 'sometimes' is not one of auto, always"):
        parse_training_recipe(types, ["--config", "recipes/tiny/rl.yaml", "--cpu_bf16", "sometimes"])
