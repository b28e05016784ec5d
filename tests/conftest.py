"""Shared fixtures: the real-data samples (skipped with a reason when absent) and scratch runs/."""
import os

import pytest

from common.paths import realdata_dir

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
    """A private RUNS_DIR so tests never touch the user's runs/."""
    folder = tmp_path / "runs"
    monkeypatch.setenv("RUNS_DIR", str(folder))
    return folder
