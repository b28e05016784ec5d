"""Where the training tests run: the CPU always, and a CUDA GPU where the machine has one.

    make test-gpu   # on a GPU machine: only the GPU cases (python -m pytest -m gpu tests)

CI has no GPU, so the cuda cases are skipped there; the README says when they last ran on one.
"""
import pytest
import torch

CUDA = pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA GPU here; `make test-gpu` on a GPU machine runs it")])
DEVICES = ["cpu", CUDA]


def trainer_flags(device: str) -> tuple:
    """Recipe overrides for a training run on `device`: the CPU recipes say use_cpu, a GPU trains in bf16."""
    return () if device == "cpu" else ("--use_cpu", "false", "--bf16", "true")
