"""Shared fixtures: the real-data samples (skipped with a reason when absent) and scratch runs/."""
import os

import pytest

from common.paths import models_dir, realdata_dir

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture
def realdata():
    folder = realdata_dir()
    if not (folder / "SOURCES.md").exists():
        pytest.skip(f"real-data samples not found at {folder}; set REALDATA_DIR to the shared/realdata folder")
    return folder


@pytest.fixture
def runs(tmp_path, monkeypatch):
    """A private RUNS_DIR so tests never touch the user's runs/ (models still come from there)."""
    folder = tmp_path / "runs"
    monkeypatch.setenv("MODELS_DIR", str(models_dir()))
    monkeypatch.setenv("RUNS_DIR", str(folder))
    return folder


@pytest.fixture(scope="session")
def tiny():
    """The tiny random model with the tool chat template (built by `make setup`)."""
    from agent.chat import prepare_tokenizer
    from agent.models import load_model
    from common.errors import UserError

    try:
        model, tokenizer = load_model("tiny")
    except UserError as exc:
        pytest.skip(f"tiny model not built ({exc})")
    return model, prepare_tokenizer(tokenizer)


@pytest.fixture(scope="session")
def tokenizer(tiny):
    return tiny[1]
