"""The query's vector, embedded once per query text.

A search that needs a query's vector while it is being embedded (by
``prefetch``, or by another search) waits for that embedding instead of
computing it again; the last 256 are kept.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from concurrent.futures import Future

from memstore.embeddings import Embedder, check_vectors, to_blob

CACHED = 256


class QueryVectors:
    def __init__(self, embedder: Embedder | None) -> None:
        self.embedder = embedder
        self.cache: OrderedDict[str, bytes] = OrderedDict()
        self.pending: dict[str, Future[bytes]] = {}
        self._lock = threading.Lock()

    def blob(self, query: str) -> bytes:
        """The query's vector as a blob, embedded once: a call for a query that
        is being embedded right now (``prefetch``, another search)
        waits for that embedding instead of computing it again."""
        assert self.embedder is not None
        with self._lock:
            hit = self.cache.get(query)
            if hit is not None:
                self.cache.move_to_end(query)
                return hit
            running = self.pending.get(query)
            mine = running is None
            if running is None:
                running = self.pending[query] = Future()
        if mine:
            self._embed(query, running)
        return running.result()

    def _embed(self, query: str, into: Future[bytes]) -> None:
        assert self.embedder is not None
        try:
            vec = check_vectors(
                self.embedder.embed_query(query).reshape(1, -1), self.embedder.dimensions
            )
            blob = to_blob(vec[0])
        except BaseException as exc:  # handed to every waiter; the next call retries
            with self._lock:
                self.pending.pop(query, None)
            into.set_exception(exc)
            return
        with self._lock:
            self.cache[query] = blob
            while len(self.cache) > CACHED:
                self.cache.popitem(last=False)
            self.pending.pop(query, None)
        into.set_result(blob)

    def prefetch(self, query: str) -> None:
        """Start embedding ``query`` in a daemon thread, so the embedding (native
        code that releases the GIL) overlaps the caller's other reads and the
        keyword searches; a search that needs the vector waits only for what
        is left of it. Registered before the thread starts, so no search can
        embed the same query a second time."""
        if self.embedder is None or not query.strip():
            return
        with self._lock:
            if query in self.cache or query in self.pending:
                return
            into: Future[bytes] = Future()
            self.pending[query] = into
        threading.Thread(
            target=self._embed, args=(query, into), name="memstore-query-embed", daemon=True
        ).start()
