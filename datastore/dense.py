"""Dense retrieval: sentence-transformers embeddings in a faiss index, persisted in a folder.

`flat` (exact inner product) is the default. For large corpora `ivf` (IndexIVFFlat, nlist ~ 4
sqrt(N), searched with nprobe lists) and `hnsw` (IndexHNSWFlat, M=32) trade a little recall for
speed; the bench measures that cost against flat on the same vectors.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import faiss
import numpy as np

INDEX_KINDS = ("flat", "ivf", "hnsw")


def load_encoder(model: str):
    from sentence_transformers import SentenceTransformer

    from agent.models import embedding_model_path

    return SentenceTransformer(embedding_model_path(model), device="cpu")


def make_index(vectors: np.ndarray, kind: str, nprobe: int = 16, ef_search: int = 64) -> faiss.Index:
    dim = vectors.shape[1]
    if kind == "flat":
        index = faiss.IndexFlatIP(dim)
    elif kind == "ivf":
        nlist = max(1, min(int(4 * math.sqrt(len(vectors))), len(vectors) // 39 or 1))
        index = faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, nlist, faiss.METRIC_INNER_PRODUCT)
        index.train(vectors)
        index.nprobe = nprobe
    elif kind == "hnsw":
        index = faiss.IndexHNSWFlat(dim, 32, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efSearch = ef_search
    else:
        raise ValueError(f"unknown dense index kind {kind!r}; use one of {INDEX_KINDS}")
    index.add(vectors)
    return index


class DenseIndex:
    def __init__(self, index: faiss.Index, encoder, model: str):
        self.index, self.encoder, self.model = index, encoder, model

    @staticmethod
    def embed(encoder, texts: list[str], batch_size: int = 64, show_progress: bool = True) -> np.ndarray:
        vectors = encoder.encode(texts, batch_size=batch_size, normalize_embeddings=True,
                                 show_progress_bar=show_progress, convert_to_numpy=True)
        return np.ascontiguousarray(vectors, dtype=np.float32)

    @classmethod
    def build(cls, texts: list[str], folder: Path, model: str, kind: str = "flat",
              show_progress: bool = True) -> "DenseIndex":
        encoder = load_encoder(model)
        vectors = cls.embed(encoder, texts, show_progress=show_progress)
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        np.save(folder / "vectors.npy", vectors)  # kept so another index kind needs no re-embedding
        index = make_index(vectors, kind)
        faiss.write_index(index, str(folder / "index.faiss"))
        (folder / "dense.json").write_text(json.dumps({"model": model, "kind": kind, "dim": vectors.shape[1]}))
        return cls(index, encoder, model)

    @classmethod
    def load(cls, folder: Path) -> "DenseIndex":
        meta = json.loads((Path(folder) / "dense.json").read_text())
        index = faiss.read_index(str(Path(folder) / "index.faiss"))
        return cls(index, load_encoder(meta["model"]), meta["model"])

    def embed_one(self, text: str) -> np.ndarray:
        return self.embed(self.encoder, [text], show_progress=False)[0]

    def embed_many(self, texts: list[str]) -> np.ndarray:
        return self.embed(self.encoder, texts, show_progress=False)

    def search_batch(self, queries: list[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        vectors = self.embed(self.encoder, queries, show_progress=False)
        scores, rows = self.index.search(vectors, min(k, self.index.ntotal))
        return rows, scores
