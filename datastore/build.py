"""Build a search datastore (documents, passages, BM25, dense) under runs/datastore/<name>/.

    python -m datastore.build --name world --corpus runs/data/world/corpus.jsonl
    python -m datastore.build --name hotpot --corpus jsonl:hotpotqa_dev500/corpus.jsonl+title_text:2wiki/corpus.json

A manifest.json records the inputs (sha256 of each corpus file), the config and the counts.
A build whose manifest matches is skipped; a changed corpus or config rebuilds. The build is
made in `<name>.partial/` and renamed into place when complete, so a killed build never
leaves a datastore that a later stage would take for finished.
"""
from __future__ import annotations

import argparse
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from tqdm import tqdm

from common.errors import UserError, cli_main
from common.io import atomic_dir, atomic_write_json, file_sha256, read_manifest
from common.paths import datastore_dir
from datastore.readers import chunk_documents, parse_spec, read_corpus
from datastore.store import RowWriter

BUILD_VERSION = 1


@dataclass
class DatastoreConfig:
    name: str
    corpus: str
    retrievers: list[str] = field(default_factory=lambda: ["bm25", "dense"])
    chunk_words: int = 200
    chunk_overlap: int = 40
    bm25_k1: float = 1.5
    bm25_b: float = 0.75
    bm25_stemmer: str | None = "english"
    bm25_stopwords: str | None = "en"
    dense_model: str = "all-MiniLM-L6-v2"
    dense_index: str = "flat"

    def check(self) -> None:
        unknown = set(self.retrievers) - {"bm25", "dense"}
        if unknown or not self.retrievers:
            raise UserError(f"retrievers must be a non-empty subset of bm25,dense (got {','.join(self.retrievers)})")
        if self.dense_index not in ("flat", "ivf", "hnsw"):
            raise UserError(f"dense_index must be flat, ivf or hnsw (got {self.dense_index})")


def corpus_inputs(spec: str) -> list[dict]:
    """Identify each corpus part by content hash (a hub dataset by its name)."""
    inputs = []
    for fmt, path in parse_spec(spec):
        file = Path(path)
        digest = file_sha256(file) if file.is_file() else f"name:{path}"
        inputs.append({"format": fmt, "path": file.name, "sha256": digest})
    return inputs


def build(config: DatastoreConfig, root: Path | None = None, force: bool = False, progress: bool = True) -> dict:
    """Build (or skip) the datastore; return its manifest."""
    config.check()
    target = Path(root) if root else datastore_dir(config.name)
    inputs = corpus_inputs(config.corpus)
    old = read_manifest(target)
    wanted = {"version": BUILD_VERSION, "inputs": inputs, "config": asdict(config)}
    if not force and old and old.get("complete") and all(old.get(key) == value for key, value in wanted.items()):
        print(f"datastore {config.name}: up to date at {target} ({old['counts']['passages']} passages); skipped")
        return old
    with atomic_dir(target) as scratch:
        manifest = _build_into(scratch, config, progress)
        manifest.update(wanted)
        atomic_write_json(scratch / "manifest.json", manifest)
    print(f"datastore {config.name}: built at {target}: {manifest['counts']} in {manifest['seconds']['total']:.1f}s")
    return manifest


def _build_into(folder: Path, config: DatastoreConfig, progress: bool) -> dict:
    start = time.perf_counter()
    seconds: dict[str, float] = {}
    doc_ids, texts = [], []
    with RowWriter(folder, "docs") as docs, RowWriter(folder, "passages") as passages:
        for doc in tqdm(read_corpus(config.corpus), desc="read corpus", unit=" docs", disable=not progress):
            docs.add(doc)
            doc_ids.append(doc["id"])
            for passage in chunk_documents([doc], config.chunk_words, config.chunk_overlap):
                passages.add(passage)
                texts.append(f"{passage['title']}. {passage['text']}")
    if not doc_ids:
        raise UserError(f"corpus {config.corpus} has no documents")
    np.save(folder / "docs.ids.npy", np.asarray(doc_ids, dtype=str))
    seconds["read_and_store"] = time.perf_counter() - start
    if "bm25" in config.retrievers:
        from datastore.bm25 import BM25Index
        t0 = time.perf_counter()
        BM25Index.build(texts, folder / "bm25", config.bm25_k1, config.bm25_b, config.bm25_stemmer,
                        config.bm25_stopwords, show_progress=progress)
        seconds["bm25"] = time.perf_counter() - t0
    if "dense" in config.retrievers:
        from datastore.dense import DenseIndex
        t0 = time.perf_counter()
        DenseIndex.build(texts, folder / "dense", config.dense_model, config.dense_index, show_progress=progress)
        seconds["dense"] = time.perf_counter() - t0
    seconds["total"] = time.perf_counter() - start
    disk = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
    return {"complete": True, "counts": {"docs": len(doc_ids), "passages": len(texts)},
            "seconds": {k: round(v, 2) for k, v in seconds.items()}, "disk_bytes": disk}


def default_name(spec: str) -> str:
    """`.../hotpotqa_dev500/corpus.jsonl` -> hotpotqa_dev500; `wiki18.jsonl` -> wiki18."""
    path = Path(parse_spec(spec)[0][1])
    return path.parent.name if path.stem == "corpus" and path.parent.name else path.stem


def parse_args(argv=None) -> tuple[DatastoreConfig, bool]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--name", help="datastore name: runs/datastore/<name> (default: from the corpus path)")
    parser.add_argument("--corpus", required=True, help="[format:]path, parts joined by +; see datastore/readers.py")
    parser.add_argument("--retrievers", default="bm25,dense", help="comma list of bm25,dense (hybrid needs both)")
    parser.add_argument("--dense-index", default="flat", choices=["flat", "ivf", "hnsw"])
    parser.add_argument("--dense-model", default="all-MiniLM-L6-v2")
    parser.add_argument("--chunk-words", type=int, default=200)
    parser.add_argument("--chunk-overlap", type=int, default=40)
    parser.add_argument("--force", action="store_true", help="rebuild even if the manifest matches")
    args = parser.parse_args(argv)
    config = DatastoreConfig(name=args.name or default_name(args.corpus), corpus=args.corpus, retrievers=args.retrievers.split(","),
                             chunk_words=args.chunk_words, chunk_overlap=args.chunk_overlap,
                             dense_model=args.dense_model, dense_index=args.dense_index)
    return config, args.force


def main(argv=None) -> None:
    config, force = parse_args(argv)
    build(config, force=force)


if __name__ == "__main__":
    cli_main(main)
