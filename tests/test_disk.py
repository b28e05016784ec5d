"""The disk-room check training runs make before their first step (common/disk.py)."""
import logging
from collections import namedtuple
from types import SimpleNamespace

import pytest
import torch

from common import disk
from common.errors import UserError

Usage = namedtuple("Usage", "total used free")


def steps_args(max_steps=76, save_steps=24, limit=2, strategy="steps"):
    return SimpleNamespace(save_strategy=strategy, save_steps=save_steps, save_total_limit=limit, max_steps=max_steps)


def test_checkpoint_holds_weights_and_two_moments_per_trainable_parameter():
    model = torch.nn.Sequential(torch.nn.Linear(10, 10), torch.nn.Linear(10, 2))  # 110 + 22 parameters, fp32
    model[0].requires_grad_(False)
    assert disk.checkpoint_bytes(model) == (132 * 4 + 22 * 8, 132 * 4)
    model.peft_config = {}  # an adapter checkpoint saves only the trainable weights
    assert disk.checkpoint_bytes(model) == (22 * 4 + 22 * 8, 22 * 4)


def test_checkpoints_on_disk_counts_the_saves_and_the_rotation_peak():
    assert disk.checkpoints_on_disk(steps_args()) == 3  # saves at 24, 48, 72, 76; the limit of 2 plus the new one
    assert disk.checkpoints_on_disk(steps_args(limit=None)) == 4
    assert disk.checkpoints_on_disk(steps_args(limit=10)) == 4
    assert disk.checkpoints_on_disk(steps_args(max_steps=10, save_steps=0.5, limit=None)) == 2
    assert disk.checkpoints_on_disk(steps_args(strategy="no")) == 0
    assert disk.checkpoints_on_disk(steps_args(max_steps=-1, strategy="epoch")) == 3


def test_checkpoints_on_disk_reads_real_training_arguments(tmp_path):
    from transformers import TrainingArguments

    args = TrainingArguments(output_dir=str(tmp_path), max_steps=76, save_strategy="steps", save_steps=24,
                             save_total_limit=2, use_cpu=True, report_to="none")
    assert disk.checkpoints_on_disk(args) == 3


@pytest.mark.parametrize("free, outcome", [(500, "error"), (3000, "warning"), (10_000, "quiet")])
def test_check_disk_room(monkeypatch, tmp_path, caplog, free, outcome):
    model = torch.nn.Linear(10, 10)  # 110 parameters: a checkpoint of 1,320 bytes, a final model of 440
    monkeypatch.setattr(disk.shutil, "disk_usage", lambda path: Usage(0, 0, free))
    run = tmp_path / "not" / "made" / "yet"
    with caplog.at_level(logging.WARNING, logger="common.disk"):
        if outcome == "error":
            with pytest.raises(UserError, match="clean-checkpoints"):
                disk.check_disk_room(run, model, steps_args())
        else:
            disk.check_disk_room(run, model, steps_args())
    assert ("may fill the disk" in caplog.text) == (outcome == "warning")
