"""In-memory copies of large conversation partitions, for exact vector search.

sqlite-vec 0.1.9 answers a KNN by scanning every chunk of the user's
partition, re-reading it from the file on each query: one user with 100k
messages pays ~44 ms a query, where a matrix product over the same vectors
in memory takes ~3 ms (BENCHMARKS.md, "Large partitions"). Quantised vec0
columns did not help (an int8 or bit scan of 100k rows measured as slow as
the float one: the per-chunk work, not the bytes, dominates), so a user whose
partition holds at least ``MIN_ROWS`` vectors is searched here instead, with
the same exact cosine ranking as vec0. Small users stay on vec0.

vec0 remains the one stored copy. A partition is loaded from vec0's own chunk
tables (one sequential read, not a row-by-row scan; on PostgreSQL one indexed
read of the pgvector table, memstore.vectors.pg) and kept consistent by
what the write path records in ``vector_spaces``:

- ``epoch`` changes when a space is emptied (erasure, a model change): every
  copy of that space is dropped, so an erased user's vectors leave memory at
  the next search, and copies never outlive the rows they came from;
- ``cursor`` only grows: the messages between the copy's cursor and the
  space's are the only ones that can have gained a vector, and are read by id;
- ``rewrites`` counts vector writes below the cursor (a quarantined message
  embedded later): such a write reloads the partition.

Isolation: a copy is keyed by (space, user) and filled from that user's vec0
partition only; the engine still joins results to the user's own rows.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import Connection, text

from memstore.vectors import pg
from memstore.vectors.spaces import Space

# Partitions smaller than this stay on vec0 (4 ms at 10k rows, DESIGN.md).
MIN_ROWS = 10_000
# Total bytes of vectors kept per process (least recently used copies go).
MAX_BYTES = 512 * 1024 * 1024
# A larger gap since the copy's cursor is read again in one pass.
_MAX_DELTA = 2_000


@dataclass
class _Part:
    epoch: int
    rewrites: int
    cursor: int
    ids: np.ndarray[Any, np.dtype[np.int64]]
    sessions: np.ndarray[Any, np.dtype[Any]]
    mat: np.ndarray[Any, np.dtype[np.float32]]  # unit rows

    @property
    def nbytes(self) -> int:
        return int(self.mat.nbytes + self.ids.nbytes + self.sessions.nbytes)


def _unit(mat: np.ndarray[Any, Any]) -> np.ndarray[Any, np.dtype[np.float32]]:
    norms = np.linalg.norm(mat, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return np.ascontiguousarray(mat / norms, dtype=np.float32)


def partition_vectors(
    conn: Connection, sp: Space, user_id: str
) -> tuple[np.ndarray[Any, Any], ...]:
    """(ids, vectors) of a user's partition, read from vec0's chunk tables.

    Layout of sqlite-vec 0.1.x: ``<t>_chunks`` holds per chunk a validity
    bitmap (LSB first) and the slots' rowids (int64); ``<t>_vector_chunks00``
    the slots' float32 vectors. A full ``SELECT`` from the vec0 table instead
    reads row by row and cannot use the partition key (14 s at 100k rows).
    """
    if conn.dialect.name == "postgresql":
        return pg.partition(conn, sp.table_name, user_id, sp.dims)
    t = sp.table_name
    ids: list[np.ndarray[Any, Any]] = []
    vecs: list[np.ndarray[Any, Any]] = []
    rows = conn.execute(
        text(
            f'SELECT c.validity, c.rowids, v.vectors FROM "{t}_chunks" c '
            f'JOIN "{t}_vector_chunks00" v ON v.rowid = c.chunk_id WHERE c.partition00 = :u'
        ),
        {"u": user_id},
    )
    for validity, rowids, vectors in rows:
        slots = np.frombuffer(rowids, dtype="<i8")
        valid = np.unpackbits(np.frombuffer(validity, dtype=np.uint8), bitorder="little")
        keep = valid[: len(slots)].astype(bool)
        mat = np.frombuffer(vectors, dtype="<f4").reshape(len(slots), sp.dims)
        ids.append(slots[keep])
        vecs.append(mat[keep])
    if not ids:
        return np.zeros(0, dtype=np.int64), np.zeros((0, sp.dims), dtype=np.float32)
    return np.concatenate(ids), np.concatenate(vecs)


def _sessions(
    conn: Connection, user_id: str, ids: np.ndarray[Any, Any], *, after: int = 0
) -> np.ndarray[Any, Any]:
    got: dict[int, str] = {
        int(r[0]): r[1]
        for r in conn.execute(
            text("SELECT id, session_id FROM l0_messages WHERE user_id = :u AND id > :a"),
            {"u": user_id, "a": after},
        )
    }
    return np.array([got.get(int(i), "") for i in ids], dtype=object)


class HotPartitions:
    """Process-local, thread-safe cache of large L0 partitions (see module doc)."""

    def __init__(self, min_rows: int | None = None, max_bytes: int | None = None) -> None:
        self.min_rows = MIN_ROWS if min_rows is None else min_rows
        self.max_bytes = MAX_BYTES if max_bytes is None else max_bytes
        self._parts: OrderedDict[tuple[str, str], _Part] = OrderedDict()
        # (space, user) -> (rows counted, at cursor, epoch): a partition grows by
        # at most (cursor - counted_at) rows, so small users are rarely recounted.
        self._sizes: dict[tuple[str, str], tuple[int, int, int]] = {}
        self._lock = threading.Lock()

    def forget(self, space: str | None = None, user_id: str | None = None) -> None:
        with self._lock:
            for key in [k for k in self._parts if _matches(k, space, user_id)]:
                del self._parts[key]
            for key in [k for k in self._sizes if _matches(k, space, user_id)]:
                del self._sizes[key]

    def cached_users(self) -> list[tuple[str, str]]:
        with self._lock:
            return list(self._parts)

    def _large(self, conn: Connection, sp: Space, user_id: str) -> bool:
        key = (sp.name, user_id)
        seen = self._sizes.get(key)
        if seen is not None and seen[0] + (sp.cursor - seen[1]) < self.min_rows:
            return False
        if seen is not None and seen[0] >= self.min_rows:
            return True
        n = int(
            conn.execute(
                text("SELECT count(*) FROM l0_messages WHERE user_id = :u AND id <= :c"),
                {"u": user_id, "c": sp.cursor},
            ).scalar_one()
        )
        self._sizes[key] = (n, sp.cursor, sp.epoch)
        return n >= self.min_rows

    def search(
        self,
        conn: Connection,
        sp: Space,
        user_id: str,
        query: np.ndarray[Any, Any],
        k: int,
        session_id: str | None = None,
    ) -> list[tuple[int, float]] | None:
        """The user's k nearest (id, cosine distance), or None when the
        partition is small (the caller asks vec0). ``conn`` is the caller's
        read transaction, so the copy matches what the rest of the query sees."""
        with self._lock:
            # A new epoch (erasure, a reset): copies of that space, erased users'
            # among them, leave memory here, at the next search of any user.
            for key in [k_ for k_, p in self._parts.items() if k_[0] == sp.name]:
                if self._parts[key].epoch != sp.epoch:
                    del self._parts[key]
            for key in [k_ for k_, v in self._sizes.items() if k_[0] == sp.name]:
                if self._sizes[key][2] != sp.epoch:
                    del self._sizes[key]
            if not self._large(conn, sp, user_id):
                return None
            part = self._current(conn, sp, user_id)
        if len(part.ids) == 0:
            return []
        q = np.asarray(query, dtype=np.float32).reshape(-1)
        norm = float(np.linalg.norm(q))
        sims = part.mat @ (q / norm if norm else q)
        if session_id is not None:
            sims = np.where(part.sessions == session_id, sims, -np.inf)
        n = min(k, len(sims))
        top = np.argpartition(-sims, n - 1)[:n] if n < len(sims) else np.arange(len(sims))
        out = [(int(part.ids[i]), float(1.0 - sims[i])) for i in top if np.isfinite(sims[i])]
        out.sort(key=lambda r: (r[1], r[0]))
        return out

    def _current(self, conn: Connection, sp: Space, user_id: str) -> _Part:
        key = (sp.name, user_id)
        part = self._parts.get(key)
        stale = part is None or part.epoch != sp.epoch or part.rewrites != sp.rewrites
        if part is not None and not stale and sp.cursor - part.cursor > _MAX_DELTA:
            stale = True
        if stale:
            ids, vecs = partition_vectors(conn, sp, user_id)
            sess = _sessions(conn, user_id, ids)
            part = _Part(sp.epoch, sp.rewrites, sp.cursor, ids, sess, _unit(vecs))
        elif part is not None and sp.cursor > part.cursor:
            part = self._extend(conn, sp, user_id, part)
        assert part is not None
        self._parts[key] = part
        self._parts.move_to_end(key)
        self._evict()
        return part

    def _extend(self, conn: Connection, sp: Space, user_id: str, part: _Part) -> _Part:
        if conn.dialect.name == "postgresql":
            got, mat = pg.partition(
                conn, sp.table_name, user_id, sp.dims, after=part.cursor, upto=sp.cursor
            )
            return _Part(
                part.epoch,
                part.rewrites,
                sp.cursor,
                np.concatenate([part.ids, got]),
                np.concatenate([part.sessions, _sessions(conn, user_id, got, after=part.cursor)]),
                np.concatenate([part.mat, _unit(mat)]) if len(got) else part.mat,
            )
        new = conn.execute(
            text(
                "SELECT id, session_id FROM l0_messages "
                "WHERE id > :a AND id <= :b AND user_id = :u ORDER BY id"
            ),
            {"a": part.cursor, "b": sp.cursor, "u": user_id},
        ).all()
        ids, sess, vecs = [], [], []
        for mid, sid in new:
            # Point lookups (rowid = ?): vec0 plans rowid IN (...) as a full scan.
            row = conn.execute(
                text(f'SELECT user_id, embedding FROM "{sp.table_name}" WHERE rowid = :i'),
                {"i": int(mid)},
            ).first()
            if row is None or row[0] != user_id:
                continue  # quarantined: a later retry counts as a rewrite
            ids.append(int(mid))
            sess.append(sid)
            vecs.append(np.frombuffer(row[1], dtype="<f4"))
        if not ids:
            return _Part(part.epoch, part.rewrites, sp.cursor, part.ids, part.sessions, part.mat)
        return _Part(
            part.epoch,
            part.rewrites,
            sp.cursor,
            np.concatenate([part.ids, np.array(ids, dtype=np.int64)]),
            np.concatenate([part.sessions, np.array(sess, dtype=object)]),
            np.concatenate([part.mat, _unit(np.stack(vecs))]),
        )

    def _evict(self) -> None:
        total = sum(p.nbytes for p in self._parts.values())
        while total > self.max_bytes and len(self._parts) > 1:
            _, old = self._parts.popitem(last=False)
            total -= old.nbytes


def _matches(key: tuple[str, str], space: str | None, user_id: str | None) -> bool:
    return (space is None or key[0] == space) and (user_id is None or key[1] == user_id)
