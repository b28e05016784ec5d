"""The one retrieval interface every stage uses: search, open, find.

    store = Datastore.load("world")                  # runs/datastore/world (built by `make datastore`)
    store.search("founder of Varnholt Industries", k=5)   -> [Hit(doc_id, title, snippet, score)]
    store.open("w-000123", page=1)                   -> "[w-000123] Title (page 1 of 2)\\n..."
    store.find("w-000123", "birthplace")             -> ["... was born in ...", ...]  (2 best sentences)

`datastore.client.RetrievalClient` offers the same methods over HTTP. Bad arguments raise
RetrievalError (a ValueError with an HTTP status); the agent's tools turn it into a message
for the model and the server into a 4xx response. `open` reads only rows of this datastore.
"""
from __future__ import annotations

import functools
import re
import threading
from collections.abc import Collection
from pathlib import Path
from typing import Callable, NamedTuple

import numpy as np

from common.errors import UserError
from common.io import read_manifest
from common.paths import datastore_dir
from datastore.store import RowStore

MAX_QUERY_CHARS = 1000
MAX_K = 100
MAX_BATCH = 256
METHODS = ("bm25", "dense", "hybrid")
RRF_K = 60  # the usual reciprocal-rank-fusion constant: damps the head of each list
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_WORD = re.compile(r"\w+")
# Sentences a find returns: the agent asks with its own words ("spouse", "population"), which the
# page often lacks ("married", "inhabitants"); the best two by meaning hold the fact ~85% of the
# time in the synthetic world, a literal match alone ~20% (python -m eval.tool_exposure).
FIND_SENTENCES = 2
# not evidence that a sentence is about what a find asks ("married to", "who is")
_FUNCTION_WORDS = frozenset("a an the of to in on at by for from with and or is was are were be who what "
                            "which where when how did does do has have had his her its their it this that there as".split())
# snippets by meaning cost an embedding of each new passage's sentences (~50 ms on 2 cores), so
# only the first hits get them (the agent and naive RAG read 3); deeper hits rank by shared words
MEANING_SNIPPET_HITS = 5
VECTOR_CACHE = 4096  # passages' sentence vectors (a passage is short) and query texts' vectors, kept
DOCUMENT_VECTOR_CACHE = 256  # whole documents can be long (hundreds of sentences)


class Hit(NamedTuple):
    doc_id: str
    title: str
    snippet: str
    score: float


class RetrievalError(ValueError):
    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


def rrf_fuse(rankings: list[list[int]], weights: list[float] | None = None, rrf_k: int = RRF_K) -> list[tuple[int, float]]:
    """Reciprocal-rank fusion: score(x) = sum_r w_r / (rrf_k + rank_r(x)), rank from 1.

    Ties go to the item that ranks higher in the earliest list, so fusion is deterministic.
    """
    weights = weights or [1.0] * len(rankings)
    scores: dict[int, float] = {}
    first_seen: dict[int, tuple[int, int]] = {}
    for list_index, (ranking, weight) in enumerate(zip(rankings, weights)):
        for rank, item in enumerate(ranking, 1):
            scores[item] = scores.get(item, 0.0) + weight / (rrf_k + rank)
            first_seen.setdefault(item, (rank, list_index))
    return sorted(scores.items(), key=lambda pair: (-pair[1], first_seen[pair[0]]))


def split_sentences(text: str) -> list[str]:
    return [s for s in _SENTENCE.split(text.strip()) if s]


def make_snippet(text: str, query: str, max_chars: int = 300,
                 closeness: Callable[[str], np.ndarray] | None = None) -> str:
    """The passage's first sentence (it names the entity) plus the sentence that best answers the
    query: the closest in meaning to the query's words the first sentence lacks (mostly what is
    asked: "spouse", "where was ... born") when `closeness(text)` scores sentences[1:] and such
    words remain, else the one sharing most query words. By meaning, the asked fact shows in the
    snippet of a name + relation query 85% of the time against 48% by shared words
    (python -m eval.tool_exposure; a bare-name query has nothing to rank by and stays ~39%)."""
    sentences = split_sentences(text)
    if not sentences:
        return ""
    rest, named = sentences[1:], set(_WORD.findall(sentences[0].lower()))
    asked = " ".join(w for w in _WORD.findall(query) if w.lower() not in named)
    if rest and closeness is not None and asked:
        best = rest[int(np.argmax(closeness(asked)))]
    else:
        words = set(_WORD.findall(query.lower()))
        best = max(rest, key=lambda s: len(words & set(_WORD.findall(s.lower()))), default=None)
    snippet = sentences[0] if best is None else f"{sentences[0]} ... {best}"
    return snippet if len(snippet) <= max_chars else snippet[:max_chars].rsplit(" ", 1)[0] + " ..."


class Datastore:
    def __init__(self, folder: Path, manifest: dict, page_words: int = 120, snippet_chars: int = 300,
                 bm25_backend: str = "auto"):
        self.folder = Path(folder)
        self.manifest = manifest
        self.name = manifest["config"]["name"]
        self.docs = RowStore(self.folder, "docs")
        self.passages = RowStore(self.folder, "passages")
        self.page_words = page_words
        self.snippet_chars = snippet_chars
        self.bm25_backend = bm25_backend
        self._indexes: dict[str, object] = {}
        self._lock = threading.Lock()
        # an episode finds in the same page more than once, and the oracle tries several words
        self._sentence_vectors = functools.lru_cache(maxsize=DOCUMENT_VECTOR_CACHE)(self._sentence_vectors_uncached)
        self._text_vector = functools.lru_cache(maxsize=VECTOR_CACHE)(self._text_vector_uncached)
        self._passage_vectors = functools.lru_cache(maxsize=VECTOR_CACHE)(self._passage_vectors_uncached)
        self.retrievers = list(manifest["config"]["retrievers"])
        self.default_method = "hybrid" if "dense" in self.retrievers and "bm25" in self.retrievers else self.retrievers[0]
        self._doc_ids = np.load(self.folder / "docs.ids.npy", allow_pickle=False)
        self._doc_row = {doc_id: row for row, doc_id in enumerate(self._doc_ids.tolist())}

    @classmethod
    def load(cls, name_or_path: str | Path, **kwargs) -> "Datastore":
        folder = Path(name_or_path)
        if not (folder / "manifest.json").exists():
            folder = datastore_dir(str(name_or_path))
        manifest = read_manifest(folder)
        if manifest is None or not manifest.get("complete"):
            raise UserError(f"no complete datastore at {folder}; build it with `make datastore` "
                            f"(or `python -m datastore.build --name {Path(str(name_or_path)).name} --corpus ...`)")
        return cls(folder, manifest, **kwargs)

    def index(self, kind: str):
        """Load an index on first use (the dense one pulls in torch and the encoder)."""
        with self._lock:
            if kind not in self._indexes:
                if kind == "bm25":
                    from datastore.bm25 import BM25Index
                    self._indexes[kind] = BM25Index.load(self.folder / "bm25", stemmer=self.manifest["config"]["bm25_stemmer"],
                                                         backend=self.bm25_backend)
                else:
                    from datastore.dense import DenseIndex
                    self._indexes[kind] = DenseIndex.load(self.folder / "dense")
            return self._indexes[kind]

    # ---- validation shared with the HTTP server -------------------------------------------
    def _check_method(self, method: str | None) -> str:
        method = method or self.default_method
        if method not in METHODS:
            raise RetrievalError(f"unknown search method {method!r}; use one of {', '.join(METHODS)}")
        needed = ("bm25", "dense") if method == "hybrid" else (method,)
        missing = [m for m in needed if m not in self.retrievers]
        if missing:
            raise RetrievalError(f"this datastore has no {' or '.join(missing)} index; built: {', '.join(self.retrievers)}")
        return method

    @staticmethod
    def _check_query(query) -> str:
        if not isinstance(query, str) or not query.strip():
            raise RetrievalError("the query is empty; search for some words")
        if len(query) > MAX_QUERY_CHARS:
            raise RetrievalError(f"the query has {len(query)} characters; the limit is {MAX_QUERY_CHARS}")
        return query.strip()

    @staticmethod
    def _check_k(k) -> int:
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
            raise RetrievalError(f"k must be an integer from 1 to {MAX_K} (got {k!r})")
        return k

    def _row_of(self, doc_id) -> int:
        row = self._doc_row.get(doc_id) if isinstance(doc_id, str) else None
        if row is None:
            raise RetrievalError(f"unknown document id {str(doc_id)[:80]!r}; use an id from the search results", 404)
        return row

    # ---- the interface --------------------------------------------------------------------
    def search(self, query: str, k: int = 5, method: str | None = None, exclude: Collection[str] = ()) -> list[Hit]:
        return self.search_batch([query], k, method, exclude=exclude)[0]

    def search_batch(self, queries: list[str], k: int = 5, method: str | None = None,
                     snippets_by_meaning: bool = True, exclude: Collection[str] = ()) -> list[list[Hit]]:
        """`snippets_by_meaning=False` for callers that only want the ranking (it skips embedding
        the hits' sentences). `exclude`: doc ids left out of the hits, which are then the ones the
        search ranks after them (data/trajectory_misses.py shows a search that missed its page)."""
        if not isinstance(queries, list) or not 1 <= len(queries) <= MAX_BATCH:
            raise RetrievalError(f"send a list of 1 to {MAX_BATCH} queries")
        queries = [self._check_query(q) for q in queries]
        k, method = self._check_k(k), self._check_method(method)
        depth = min(max(3 * k, 30), len(self.passages))  # passages per doc are deduplicated below
        rankings = self._rank(queries, depth, method)
        return [self._hits(query, ranking, k, snippets_by_meaning, frozenset(exclude))
                for query, ranking in zip(queries, rankings)]

    def _rank(self, queries: list[str], depth: int, method: str) -> list[list[tuple[int, float]]]:
        if method in ("bm25", "dense"):
            rows, scores = self.index(method).search_batch(queries, depth)
            return [[(int(r), float(s)) for r, s in zip(rr, ss) if r >= 0] for rr, ss in zip(rows, scores)]
        sparse = self._rank(queries, depth, "bm25")
        dense = self._rank(queries, depth, "dense")
        return [rrf_fuse([[r for r, _ in a], [r for r, _ in b]]) for a, b in zip(sparse, dense)]

    def _hits(self, query: str, ranking: list[tuple[int, float]], k: int, by_meaning: bool = True,
              exclude: frozenset = frozenset()) -> list[Hit]:
        hits, seen = [], set(exclude)
        for row, score in ranking:
            passage = self.passages[row]
            if passage["doc_id"] in seen:
                continue
            seen.add(passage["doc_id"])
            closeness = self._closeness_in_passage(row) if by_meaning and len(hits) < MEANING_SNIPPET_HITS else None
            snippet = make_snippet(passage["text"], query, self.snippet_chars, closeness)
            hits.append(Hit(passage["doc_id"], passage["title"], snippet, round(score, 4)))
            if len(hits) == k:
                break
        return hits

    def document(self, doc_id: str) -> dict:
        return self.docs[self._row_of(doc_id)]

    def open(self, doc_id: str, page: int = 1) -> str:
        doc = self.document(doc_id)
        words = doc["text"].split()
        pages = max(1, -(-len(words) // self.page_words))
        if isinstance(page, bool) or not isinstance(page, int) or not 1 <= page <= pages:
            raise RetrievalError(f"page {page!r} is out of range: [{doc_id}] has pages 1 to {pages}")
        body = " ".join(words[(page - 1) * self.page_words: page * self.page_words])
        return f"[{doc_id}] {doc['title']} (page {page} of {pages})\n{body}"

    def find(self, doc_id: str, text: str) -> list[str]:
        """The FIND_SENTENCES sentences of a document that best match `text`, in document order:
        those containing it literally first, then the closest in meaning (dense encoder; so with
        a dense index there is always an answer), or, in a datastore without one, those sharing
        most of its content words (none when no word is shared)."""
        row = self._row_of(doc_id)
        needle = self._check_query(text)
        sentences = self._sentences(row)
        if not sentences:
            return []
        literal = [float(needle.lower() in s.lower()) for s in sentences]
        if "dense" in self.retrievers:
            closeness = self._sentence_vectors(row) @ self._text_vector(needle)
            candidates = range(len(sentences))
        else:
            words = set(_WORD.findall(needle.lower())) - _FUNCTION_WORDS
            closeness = [len(words & set(_WORD.findall(s.lower()))) for s in sentences]
            candidates = [i for i in range(len(sentences)) if literal[i] or closeness[i]]
        ranked = sorted(candidates, key=lambda i: (-literal[i], -closeness[i], i))
        best = ranked[:FIND_SENTENCES]
        return [sentences[i] for i in sorted(best)]

    def _sentences(self, row: int) -> list[str]:
        return split_sentences(self.docs[row]["text"])

    def _closeness_in_passage(self, row: int) -> Callable[[str], np.ndarray] | None:
        """For make_snippet: text -> closeness of the passage's sentences after its first."""
        if "dense" not in self.retrievers:
            return None
        return lambda text: self._passage_vectors(row)[1:] @ self._text_vector(text)

    def _sentence_vectors_uncached(self, row: int) -> np.ndarray:
        return self.index("dense").embed_many(self._sentences(row))

    def _passage_vectors_uncached(self, row: int) -> np.ndarray:
        return self.index("dense").embed_many(split_sentences(self.passages[row]["text"]))

    def _text_vector_uncached(self, text: str) -> np.ndarray:
        return self.index("dense").embed_one(text)

    def info(self) -> dict:
        counts = self.manifest["counts"]
        return {"name": self.name, "docs": counts["docs"], "passages": counts["passages"],
                "retrievers": self.retrievers, "default_method": self.default_method}
