"""Where artifacts and the real-data samples live.

Everything a stage writes goes under RUNS_DIR (default `runs/`, git-ignored). The real QA
samples are found through one setting, REALDATA_DIR (default `../shared/realdata`, beside
the clone); nothing from that folder is copied into the project.
"""
import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def runs_dir() -> Path:
    return Path(os.environ.get("RUNS_DIR", REPO_ROOT / "runs"))


def realdata_dir() -> Path:
    return Path(os.environ.get("REALDATA_DIR", REPO_ROOT.parent / "shared" / "realdata"))


def models_dir() -> Path:
    """Converted models; MODELS_DIR moves them apart from the other artifacts (tests use this)."""
    return Path(os.environ.get("MODELS_DIR", runs_dir() / "models"))


def datastore_dir(name: str) -> Path:
    return runs_dir() / "datastore" / name
