"""Where the training tests run: the CPU always, and a CUDA GPU where the machine has one.

    make test-gpu   # on a GPU machine: only the GPU cases (python -m pytest -m gpu tests)

CI has no GPU, so the cuda cases are skipped there; the README says when they last ran on one.
"""
import pytest
import torch

CUDA = pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA GPU here; `make test-gpu` on a GPU machine runs it")])
DEVICES = ["cpu", CUDA]


def trainer_settings(device: str) -> dict:
    """TrainingArguments for a run on `device`: the CPU tests train in fp32, a GPU in bf16."""
    return {"use_cpu": device == "cpu", "bf16": device == "cuda"}


def trainer_flags(device: str) -> tuple:
    """The same as recipe overrides; on the CPU none, since the tiny recipes already say so."""
    if device == "cpu":
        return ()
    return tuple(arg for key, value in trainer_settings(device).items() for arg in (f"--{key}", str(value).lower()))
