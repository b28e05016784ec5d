"""Atomic writes and manifests, so a killed stage never leaves a half-written artifact.

A file is written to `<name>.tmp-<pid>` and renamed into place; a folder is built under
`<name>.partial` and renamed when complete. A manifest.json records what made an artifact
(inputs with hashes, config, counts); a stage compares it to decide whether to skip.
"""
import hashlib
import json
import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator


def atomic_write_text(path: Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


@contextmanager
def atomic_dir(path: Path) -> Iterator[Path]:
    """Yield a scratch folder that replaces `path` only if the block finishes."""
    path = Path(path)
    partial = path.with_name(path.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    try:
        yield partial
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    if path.exists():
        shutil.rmtree(path)
    os.replace(partial, path)


def file_sha256(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def config_hash(config: dict) -> str:
    """A short stable hash of a settings dict (values JSON cannot encode are hashed as their str())."""
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:16]


# training settings a run's identity leaves out: a longer run of the same recipe resumes a shorter one
LENGTH_KEYS = ("max_steps", "num_train_epochs")


def run_fingerprints(settings: dict, training_key: str) -> tuple[str, str]:
    """(fingerprint, identity) of a training run from one settings dict: the identity leaves the
    LENGTH_KEYS out of settings[training_key], so a longer run of the same recipe resumes."""
    training = {k: v for k, v in settings[training_key].items() if k not in LENGTH_KEYS}
    return config_hash(settings), config_hash({**settings, training_key: training})


def resumable_checkpoint(out: Path, digest: str) -> str | None:
    """The last checkpoint in `out` if it belongs to this run (same fingerprint), else None.

    A training folder remembers the fingerprint it was started with (run_fingerprint.txt). When
    the recipe, data or start model changed, the old checkpoints and final model are removed (with
    a line saying so) instead of being resumed: resuming them would mix two runs.
    """
    from transformers.trainer_utils import get_last_checkpoint

    out = Path(out)
    marker = out / "run_fingerprint.txt"
    if out.is_dir() and (marker.read_text().strip() if marker.exists() else None) != digest:
        stale = [p for p in out.iterdir() if p.name.startswith("checkpoint-") or p.name in ("final", "train_summary.json")]
        if stale:
            print(f"{out} holds a run with another recipe, data or start model; removing its "
                  f"{len(stale)} checkpoint(s)/results and starting over")
        for path in stale:
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    atomic_write_text(marker, digest + "\n")
    return get_last_checkpoint(str(out))


def resume_message(checkpoint: str, training_args) -> str:
    """The line a resumed run prints. A checkpoint of a shorter run resumed to more steps continues the straight
    longer run exactly only under a constant learning rate (RL's recipe; tests/test_rl.py checks it): under any
    other schedule the steps so far followed the shorter run's. A run sized by epochs (max_steps -1) is not judged."""
    saved = json.loads((Path(checkpoint) / "trainer_state.json").read_text()).get("max_steps")
    schedule = getattr(training_args.lr_scheduler_type, "value", training_args.lr_scheduler_type)
    if training_args.max_steps <= 0 or saved in (None, training_args.max_steps) or schedule == "constant":
        return f"resuming from {checkpoint}"
    return (f"resuming from {checkpoint}, saved by a {saved}-step run: its steps so far followed that run's {schedule} "
            f"learning rate, so this is not what a straight run with max_steps {training_args.max_steps} would train")


def finished_run(out: Path, digest: str) -> dict | None:
    """The train_summary.json of a training run in `out` that finished with this fingerprint, else None."""
    summary = Path(out) / "train_summary.json"
    if not (Path(out) / "final" / "config.json").exists() or not summary.exists():
        return None
    record = json.loads(summary.read_text())
    return record if record.get("fingerprint") == digest else None


def read_manifest(folder: Path) -> dict | None:
    path = Path(folder) / "manifest.json"
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError:
        return None


def write_jsonl(path: Path, rows) -> int:
    """Write rows atomically; return how many were written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    count = 0
    with open(tmp, "w") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
            count += 1
    os.replace(tmp, path)
    return count


def iter_jsonl(path, expected: str):
    """Yield (line number, object) for each non-blank line; a bad line is a UserError naming the
    file, the line and `expected` (what a line should look like)."""
    from common.errors import UserError

    with open(path, encoding="utf-8") as handle:
        for lineno, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise UserError(f"{path}, line {lineno}: not valid JSON ({exc.msg}); expected {expected}") from None
            if not isinstance(row, dict):
                raise UserError(f"{path}, line {lineno}: not a JSON object; expected {expected}")
            yield lineno, row
