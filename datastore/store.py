"""Row stores: JSONL files with a byte-offset table, so a 1M-passage datastore is read by row
without loading every text into memory.

`RowWriter(folder, name)` writes `<name>.jsonl` and `<name>.offsets.npy`;
`RowStore(folder, name)` reads row i with one positioned read (os.pread: safe from many
server threads at once, since no file position is shared).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np


class RowStore:
    def __init__(self, folder: Path, name: str):
        self.path = Path(folder) / f"{name}.jsonl"
        self.offsets = np.load(Path(folder) / f"{name}.offsets.npy")
        self._fd = os.open(self.path, os.O_RDONLY)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, row: int) -> dict:
        start, end = int(self.offsets[row]), int(self.offsets[row + 1])
        return json.loads(os.pread(self._fd, end - start, start))

    def __del__(self):
        fd = getattr(self, "_fd", None)
        if fd is not None:
            os.close(fd)


class RowWriter:
    """Append rows to `<name>.jsonl`, recording offsets; leaving the block writes the offset table."""

    def __init__(self, folder: Path, name: str):
        self.folder, self.name = Path(folder), name
        self._handle = open(self.folder / f"{name}.jsonl", "wb")
        self._offsets = [0]

    def add(self, row: dict) -> None:
        line = (json.dumps(row, ensure_ascii=False) + "\n").encode("utf-8")
        self._handle.write(line)
        self._offsets.append(self._offsets[-1] + len(line))

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def __enter__(self) -> "RowWriter":
        return self

    def __exit__(self, *exc) -> None:
        self._handle.close()
        np.save(self.folder / f"{self.name}.offsets.npy", np.asarray(self._offsets, dtype=np.int64))
