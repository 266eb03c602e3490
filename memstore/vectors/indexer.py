"""Fills vector spaces from their source tables, off the capture path.

Capture never waits for an embedder: rows land in ``l0_messages`` /
``l1_memories`` inline, and this indexer embeds them later (in a background
thread, or in the foreground for ``memstore reindex``). Each step reads a
batch, embeds only what the (model, content hash) cache lacks, and writes
vectors in one short write transaction, re-checking that each source row
still holds the text it embedded.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, select, text, update
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from memstore.db.engine import Database
from memstore.db.schema import embedding_cache, vector_index, vector_spaces
from memstore.embeddings import Embedder, check_vectors, content_hash, to_blob
from memstore.errors import MemstoreError
from memstore.timeutil import Clock, system_clock, to_iso
from memstore.vectors import spaces
from memstore.vectors.spaces import Space

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Row:
    id: int
    user_id: str
    text: str  # what is embedded
    hash: str  # cache key: content hash of ``text``
    src_hash: str  # content hash of the source row, to detect changes
    meta: tuple[str, ...]


# The previous message with content of the same session (same user), found
# through the (user_id, session_id, position) index: an acknowledgement
# ("Noted.") in between would otherwise replace the context that matters.
_PREV_TEXT = (
    "(SELECT p.text FROM l0_messages p WHERE p.user_id = m.user_id "
    "AND p.session_id = m.session_id AND p.position <= m.position AND p.id < m.id "
    "AND p.low_info = 0 ORDER BY p.position DESC, p.id DESC LIMIT 1)"
)


def _pending_l0(conn: Connection, space: Space, limit: int) -> list[_Row]:
    context = space.model_id.endswith("+ctx1")
    prev = _PREV_TEXT if context else "NULL"
    rows = conn.execute(
        text(
            f"SELECT m.id, m.user_id, m.text, m.content_hash, m.session_id, {prev} "
            "FROM l0_messages m WHERE m.id > :c ORDER BY m.id LIMIT :n"
        ),
        {"c": space.cursor, "n": limit},
    ).all()
    out = []
    for r in rows:
        body = f"{r[5]}\n{r[2]}" if r[5] else r[2]
        out.append(_Row(r[0], r[1], body, content_hash(body) if r[5] else r[3], r[3], (r[4],)))
    return out


def context_hashes(conn: Connection, user_id: str) -> set[str]:
    """Cache keys of a user's "previous + this message" texts (for erasure)."""
    rows = conn.execute(
        text(f"SELECT m.text, {_PREV_TEXT} FROM l0_messages m WHERE m.user_id = :u"),
        {"u": user_id},
    ).all()
    return {content_hash(f"{r[1]}\n{r[0]}") for r in rows if r[1]}


def _pending_l1(conn: Connection, space: Space, limit: int) -> list[_Row]:
    rows = conn.execute(
        text(
            "SELECT m.id, m.user_id, m.content, m.content_hash, m.type, m.scene_name "
            "FROM l1_memories m LEFT JOIN vector_index vi "
            "ON vi.space = :s AND vi.source_id = m.id AND vi.content_hash = m.content_hash "
            "WHERE m.status = 'active' AND vi.source_id IS NULL ORDER BY m.id LIMIT :n"
        ),
        {"s": space.name, "n": limit},
    ).all()
    return [_Row(r[0], r[1], r[2], r[3], r[3], (r[4], r[5])) for r in rows]


_PENDING = {"l0": _pending_l0, "l1": _pending_l1}


class Indexer:
    def __init__(
        self,
        db: Database,
        embedder: Embedder,
        clock: Clock = system_clock,
        *,
        context_vectors: bool = True,
    ) -> None:
        self.db = db
        self.embedder = embedder
        self.clock = clock
        self.context_vectors = context_vectors
        # Held for a whole step (read, embed, write); rebuild and erasure take it
        # too, so in one process a batch never straddles a renumbering.
        self.lock = threading.RLock()

    def model_for(self, kind: str) -> str:
        return spaces.space_model_id(kind, self.embedder.model_id, self.context_vectors)

    def space(self, kind: str) -> Space:
        model = self.model_for(kind)
        with self.db.read() as conn:
            got = spaces.get_space(conn, kind, model)
        if got is not None:
            return got
        dims = self.embedder.resolve_dimensions()
        with self.db.write() as conn:
            return spaces.ensure_space(conn, kind, model, dims, to_iso(self.clock()))

    def pending(self, kind: str) -> int:
        sp = self.space(kind)
        with self.db.read() as conn:
            if kind == "l0":
                q = "SELECT count(*) FROM l0_messages WHERE id > :c"
                return int(conn.execute(text(q), {"c": sp.cursor}).scalar_one())
            q = (
                "SELECT count(*) FROM l1_memories m LEFT JOIN vector_index vi ON vi.space = :s "
                "AND vi.source_id = m.id AND vi.content_hash = m.content_hash "
                "WHERE m.status = 'active' AND vi.source_id IS NULL"
            )
            return int(conn.execute(text(q), {"s": sp.name}).scalar_one())

    def step(self, kind: str, batch: int = 64) -> int:
        """Embed one batch; returns rows written (0 = caught up)."""
        with self.lock:
            sp = self.space(kind)
            with self.db.read() as conn:
                rows = _PENDING[kind](conn, sp, batch)
                hashes = sorted({r.hash for r in rows})
                cached: dict[str, bytes] = {}
                for i in range(0, len(hashes), 500):
                    for h, blob in conn.execute(
                        select(embedding_cache.c.content_hash, embedding_cache.c.vector).where(
                            embedding_cache.c.model_id == self.embedder.model_id,
                            embedding_cache.c.content_hash.in_(hashes[i : i + 500]),
                        )
                    ):
                        cached[h] = blob
            if not rows:
                if not sp.ready:
                    with self.db.write() as conn:
                        conn.execute(
                            update(vector_spaces)
                            .where(
                                vector_spaces.c.name == sp.name,
                                vector_spaces.c.epoch == sp.epoch,
                            )
                            .values(ready=1)
                        )
                return 0
            missing = [r for r in rows if r.hash not in cached]
            fresh: dict[str, bytes] = {}
            if missing:
                uniq: dict[str, str] = {r.hash: r.text for r in missing}
                vecs = check_vectors(self.embedder.embed_documents(list(uniq.values())), sp.dims)
                fresh = {h: to_blob(v) for h, v in zip(uniq, vecs, strict=True)}
            with self.db.write() as conn:
                if spaces.current_epoch(conn, sp.name) != sp.epoch:
                    # A rebuild or erasure emptied the space while we embedded:
                    # our row ids may now name other messages (or users).
                    return len(rows)
                if fresh:
                    conn.execute(
                        sqlite_insert(embedding_cache).on_conflict_do_nothing(),
                        [
                            {
                                "model_id": self.embedder.model_id,
                                "content_hash": h,
                                "dims": sp.dims,
                                "vector": b,
                            }
                            for h, b in fresh.items()
                        ],
                    )
                self._write_vectors(conn, sp, kind, rows, {**cached, **fresh})
            return len(rows)

    def _write_vectors(
        self, conn: Connection, sp: Space, kind: str, rows: list[_Row], blobs: dict[str, bytes]
    ) -> None:
        src = "l0_messages" if kind == "l0" else "l1_memories"
        ids = [r.id for r in rows]
        marks = ",".join(str(i) for i in ids)
        current = {
            int(i): (u, h)
            for i, u, h in conn.execute(
                text(f"SELECT id, user_id, content_hash FROM {src} WHERE id IN ({marks})")
            )
        }
        conn.execute(text(f'DELETE FROM "{sp.table_name}" WHERE rowid IN ({marks})'))
        if kind == "l0":
            ins = text(
                f'INSERT INTO "{sp.table_name}"(rowid, user_id, session_id, embedding) '
                "VALUES (:id, :u, :m0, :v)"
            )
        else:
            ins = text(
                f'INSERT INTO "{sp.table_name}"(rowid, user_id, mtype, scene, embedding) '
                "VALUES (:id, :u, :m0, :m1, :v)"
            )
        params: list[dict[str, Any]] = []
        index_rows: list[dict[str, Any]] = []
        for r in rows:
            if current.get(r.id) != (r.user_id, r.src_hash):
                continue  # changed or erased since we read it; a later step catches up
            p: dict[str, Any] = {"id": r.id, "u": r.user_id, "v": blobs[r.hash]}
            for j, m in enumerate(r.meta):
                p[f"m{j}"] = m
            params.append(p)
            index_rows.append({"space": sp.name, "source_id": r.id, "content_hash": r.src_hash})
        if params:
            conn.execute(ins, params)
        if kind == "l1" and index_rows:
            stmt = sqlite_insert(vector_index)
            conn.execute(
                stmt.on_conflict_do_update(
                    index_elements=[vector_index.c.space, vector_index.c.source_id],
                    set_={"content_hash": stmt.excluded.content_hash},
                ),
                index_rows,
            )
        if kind == "l0":
            new_cursor = max(ids)
            conn.execute(
                update(vector_spaces)
                .where(vector_spaces.c.name == sp.name, vector_spaces.c.cursor < new_cursor)
                .values(cursor=new_cursor)
            )

    def run_until_idle(
        self,
        kinds: tuple[str, ...] = ("l0", "l1"),
        *,
        batch: int = 64,
        progress: Callable[[int], None] | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> int:
        total = 0
        for kind in kinds:
            while not (should_stop and should_stop()):
                n = self.step(kind, batch)
                if n == 0:
                    break
                total += n
                if progress:
                    progress(n)
        return total


class BackgroundIndexer:
    """One daemon thread per Store: wakes on capture (``notify``) or every few seconds."""

    def __init__(self, indexer: Indexer, interval_s: float = 2.0) -> None:
        self.indexer = indexer
        self.interval_s = interval_s
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_error: str | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="memstore-indexer", daemon=True)
            self._thread.start()

    def notify(self) -> None:
        self._wake.set()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.interval_s)
            self._wake.clear()
            try:
                self.indexer.run_until_idle(should_stop=self._stop.is_set)
                self.last_error = None
            except MemstoreError as e:
                # Logged and retried on the next wake-up: search degrades to keyword
                # meanwhile; no source data is at risk.
                self.last_error = str(e)
                log.warning("background indexer: %s", e)
