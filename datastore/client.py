"""HTTP client with the same interface as `Datastore`: search, search_batch, open, find.

    client = RetrievalClient("http://127.0.0.1:8000")
    client.search("founder of Varnholt Industries", k=5)

A 4xx from the server raises RetrievalError with the server's reason, exactly as the
in-process datastore would; connection failures are retried with backoff, then raised.
"""
from __future__ import annotations

import time
from collections.abc import Collection

import httpx

from datastore.retriever import Hit, RetrievalError


class RetrievalClient:
    def __init__(self, base_url: str, timeout: float = 30.0, retries: int = 3, backoff: float = 0.5):
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout)
        self.retries, self.backoff = retries, backoff

    def _post(self, path: str, body: dict) -> dict:
        for attempt in range(self.retries + 1):
            try:
                response = self._http.post(path, json=body)
                break
            except httpx.TransportError:
                if attempt == self.retries:
                    raise
                time.sleep(self.backoff * 2 ** attempt)
        if 400 <= response.status_code < 500:
            detail = response.json().get("detail", response.text)
            raise RetrievalError(detail if isinstance(detail, str) else str(detail), response.status_code)
        response.raise_for_status()
        return response.json()

    def info(self) -> dict:
        return self._http.get("/health").raise_for_status().json()

    def search(self, query: str, k: int = 5, method: str | None = None, exclude: Collection[str] = ()) -> list[Hit]:
        body = {"query": query, "k": k, "method": method, "exclude": sorted(exclude)}
        hits = self._post("/search", body)["hits"]
        return [Hit(**hit) for hit in hits]

    def search_batch(self, queries: list[str], k: int = 5, method: str | None = None) -> list[list[Hit]]:
        results = self._post("/search_batch", {"queries": queries, "k": k, "method": method})["results"]
        return [[Hit(**hit) for hit in hits] for hits in results]

    def open(self, doc_id: str, page: int = 1) -> str:
        return self._post("/open", {"doc_id": doc_id, "page": page})["text"]

    def find(self, doc_id: str, text: str) -> list[str]:
        return self._post("/find", {"doc_id": doc_id, "text": text})["lines"]

    def close(self) -> None:
        self._http.close()
