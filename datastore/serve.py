"""Serve a datastore over HTTP so RL workers on several GPUs or nodes can share one index.

    python -m datastore.serve --name world --port 8000        # binds 127.0.0.1 unless --host is given

Endpoints (JSON): GET /health; POST /search {query, k, method}; POST /search_batch {queries, k,
method}; POST /open {doc_id, page}; POST /find {doc_id, text}. Bad arguments get a 4xx with a
`detail` that says what to change. `datastore.client.RetrievalClient` speaks this protocol.
"""
from __future__ import annotations

import argparse
import os
import socket
import threading
import time
from contextlib import contextmanager
from typing import Iterator

from fastapi import FastAPI, HTTPException
from pydantic import BaseModel

from common.errors import cli_main
from datastore.retriever import Datastore, RetrievalError


class SearchRequest(BaseModel):
    query: str
    k: int = 5
    method: str | None = None
    exclude: list[str] = []   # doc ids left out of the hits (missed-evidence rows replayed against a server)


class BatchRequest(BaseModel):
    queries: list[str]
    k: int = 5
    method: str | None = None


class OpenRequest(BaseModel):
    doc_id: str
    page: int = 1


class FindRequest(BaseModel):
    doc_id: str
    text: str


def _call(fn, *args):
    try:
        return fn(*args)
    except RetrievalError as exc:
        raise HTTPException(status_code=exc.status, detail=str(exc)) from None


def create_app(store: Datastore) -> FastAPI:
    app = FastAPI(title=f"datastore {store.name}")

    @app.get("/health")
    def health() -> dict:
        return store.info()

    @app.post("/search")
    def search(request: SearchRequest) -> dict:
        hits = _call(store.search, request.query, request.k, request.method, request.exclude)
        return {"hits": [hit._asdict() for hit in hits]}

    @app.post("/search_batch")
    def search_batch(request: BatchRequest) -> dict:
        results = _call(store.search_batch, request.queries, request.k, request.method)
        return {"results": [[hit._asdict() for hit in hits] for hits in results]}

    @app.post("/open")
    def open_doc(request: OpenRequest) -> dict:
        return {"text": _call(store.open, request.doc_id, request.page)}

    @app.post("/find")
    def find(request: FindRequest) -> dict:
        return {"lines": _call(store.find, request.doc_id, request.text)}

    return app


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


@contextmanager
def serve_in_thread(store: Datastore, host: str = "127.0.0.1", port: int | None = None) -> Iterator[str]:
    """Run the datastore server in a background thread (tests, benchmarks); yield its base URL."""
    with app_in_thread(create_app(store), host, port) as url:
        yield url


@contextmanager
def app_in_thread(app, host: str = "127.0.0.1", port: int | None = None, start_timeout: float = 20.0) -> Iterator[str]:
    """Serve any ASGI app on loopback from a daemon thread until the block ends."""
    import uvicorn

    port = port or free_port(host)
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + start_timeout
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            server.should_exit = True
            raise RuntimeError(f"server did not start on {host}:{port}")
        time.sleep(0.05)
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def main(argv=None) -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description="Serve a datastore over HTTP (loopback by default).")
    parser.add_argument("--name", default="world", help="datastore name or folder")
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind; 127.0.0.1 keeps it on this machine")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--bm25-backend", default="numba", choices=["auto", "numpy", "numba"],
                        help="numba: fastest queries, ~7 s to compile at start (worth it for a server)")
    args = parser.parse_args(argv)
    store = Datastore.load(args.name, bm25_backend=args.bm25_backend)
    if "dense" in store.retrievers:
        import torch

        # query embedding is tiny work: one thread per process beats two fighting over 2 cores
        # (measured 31 vs 1.5 dense queries/s under load); set only here, since it is process-wide
        torch.set_num_threads(int(os.environ.get("DATASTORE_TORCH_THREADS", "1")))
    for kind in store.retrievers:  # load (and compile) before the first request, not during it
        store.search("warm up", 1, kind)
    uvicorn.run(create_app(store), host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    cli_main(main)
