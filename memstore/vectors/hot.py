"""In-memory copies of users' vector partitions, for exact vector search.

sqlite-vec 0.1.9 answers a KNN by scanning every chunk of the user's
partition, re-reading it from the file on each query: one user with 100k
messages pays ~44 ms a query, where a matrix product over the same vectors
in memory takes ~3 ms (BENCHMARKS.md, "Large partitions"). Quantised vec0
columns did not help (an int8 or bit scan of 100k rows measured as slow as
the float one: the per-chunk work, not the bytes, dominates). Small users pay
vec0's fixed cost instead: 2.2 ms for 1k messages, 1 ms for 100 memories,
where the product takes 0.2-0.4 ms. Reading a partition's chunks costs less
than one vec0 query once the chunk join uses the vector table's rowid (0.9
ms at 1k rows; it was a scan of every user's chunks, ~15x slower), so every
partition, L0 (messages) and L1 (memories) alike, is searched here, with the
same exact cosine ranking as vec0 (ties, which vec0 orders by its chunk
layout, by id).

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
  embedded later): such a write reloads the partition. L1 has no cursor
  (memories are re-embedded in place when their text changes), so every L1
  vector write counts as one and the next search of each user reloads their
  copy (at the cost of one vec0 query).

What a copy cannot answer goes to vec0 (``search`` returns None): L1's type
and scene filters (vec0 metadata), and a session filter on an L0 copy that
has not read its rows' sessions (partitions under ``SESSION_ROWS``; larger
ones read them at the first such search). Retired memories and other
generations keep their vectors in both paths and are dropped by the engine.

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

from memstore.db.sqlfn import driver_rows
from memstore.vectors import pg
from memstore.vectors.spaces import Space

# Partitions smaller than this stay on vec0. Measured (BENCHMARKS.md, "Small
# partitions"): loading is cheaper than one vec0 query at every size, so none.
MIN_ROWS = 0
# Session filters of L0 copies with fewer rows go to vec0 rather than read
# every row's session (as costly as the vector load itself).
SESSION_ROWS = 10_000
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
    mat: np.ndarray[Any, np.dtype[np.float32]]  # the stored vectors
    # 1 / norm of each row: dividing the product costs less per query than
    # normalising the matrix costs per load (both as vec0's cosine).
    inv: np.ndarray[Any, np.dtype[np.float32]]
    # Session of each row (L0), read at the first session-filtered search.
    sessions: np.ndarray[Any, np.dtype[Any]] | None = None

    @property
    def nbytes(self) -> int:
        extra = 0 if self.sessions is None else self.sessions.nbytes
        return int(self.mat.nbytes + self.ids.nbytes + self.inv.nbytes + extra)


def _inverse_norms(mat: np.ndarray[Any, Any]) -> np.ndarray[Any, np.dtype[np.float32]]:
    norms = np.sqrt(np.einsum("ij,ij->i", mat, mat, dtype=np.float32))
    norms[norms == 0] = 1.0
    return np.asarray(1.0 / norms, dtype=np.float32)


def partition_vectors(
    conn: Connection, sp: Space, user_id: str
) -> tuple[np.ndarray[Any, Any], ...]:
    """(ids, vectors) of a user's partition, read from vec0's chunk tables.

    Layout of sqlite-vec 0.1.x: ``<t>_chunks`` holds per chunk a validity
    bitmap (LSB first) and the slots' rowids (int64); ``<t>_vector_chunks00``
    the slots' float32 vectors. A full ``SELECT`` from the vec0 table instead
    reads row by row and cannot use the partition key (14 s at 100k rows).
    The join goes through ``_rowid_``, the key vec0 itself reads chunks by:
    the table also declares a column named ``rowid``, and joining on that
    one was planned as a scan of every user's vector chunks.
    """
    if conn.dialect.name == "postgresql":
        return pg.partition(conn, sp.table_name, user_id, sp.dims)
    t = sp.table_name
    # Driver-level, and one copy per column: per-chunk arrays and SQLAlchemy's
    # row objects cost as much as the read itself for a 1k-row partition.
    rows = driver_rows(
        conn,
        f'SELECT c.validity, c.rowids, v.vectors FROM "{t}_chunks" c '
        f'JOIN "{t}_vector_chunks00" v ON v._rowid_ = c.chunk_id WHERE c.partition00 = ?',
        (user_id,),
    )
    if not rows:
        return np.zeros(0, dtype=np.int64), np.zeros((0, sp.dims), dtype=np.float32)
    slots = np.frombuffer(b"".join(r[1] for r in rows), dtype="<i8")
    valid = np.concatenate(
        [
            np.unpackbits(np.frombuffer(r[0], dtype=np.uint8), bitorder="little")[: len(r[1]) // 8]
            for r in rows
        ]
    ).astype(bool)
    mat = np.frombuffer(b"".join(r[2] for r in rows), dtype="<f4").reshape(len(slots), sp.dims)
    n = int(valid.sum())
    if valid[:n].all():
        # Only the free slots at the end of the last chunk: views, no copy.
        return slots[:n], mat[:n]
    return slots[valid], mat[valid]


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
    """Process-local, thread-safe cache of users' partitions (see module doc)."""

    def __init__(
        self,
        min_rows: int | None = None,
        max_bytes: int | None = None,
        kinds: tuple[str, ...] = ("l0", "l1"),
    ) -> None:
        """``min_rows``: L0 partitions with fewer rows stay on vec0; ``kinds``:
        the vector kinds searched here (tests compare against vec0 with ())."""
        self.min_rows = MIN_ROWS if min_rows is None else min_rows
        self.kinds = kinds
        self.max_bytes = MAX_BYTES if max_bytes is None else max_bytes
        self._parts: OrderedDict[tuple[str, str], _Part] = OrderedDict()
        # (space, user) -> (rows counted, at cursor, epoch): a partition grows by
        # at most (cursor - counted_at) rows, so small users are rarely recounted.
        self._sizes: dict[tuple[str, str], tuple[int, int, int]] = {}
        # Epoch each space's copies were checked against: the sweep for a new
        # epoch runs once, not over every copy at every search.
        self._epochs: dict[str, int] = {}
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
        if sp.kind not in self.kinds:
            return False
        if self.min_rows <= 0 or sp.kind != "l0":
            return True  # memories: always (loading 100 costs less than one vec0 query)
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
        """The user's k nearest (id, cosine distance), or None when vec0 must
        answer (a small partition, a filter the copy cannot serve). ``conn`` is
        the caller's read transaction, so the copy matches what the rest of the
        query sees."""
        with self._lock:
            self._sweep(sp)
            if not self._large(conn, sp, user_id):
                return None
            part = self._current(conn, sp, user_id)
            if session_id is not None and part.sessions is None:
                if len(part.ids) < SESSION_ROWS:
                    return None
                part.sessions = _sessions(conn, user_id, part.ids)
        if len(part.ids) == 0:
            return []
        q = np.asarray(query, dtype=np.float32).reshape(-1)
        norm = float(np.linalg.norm(q))
        sims = (part.mat @ (q / norm if norm else q)) * part.inv
        if session_id is not None:
            sims = np.where(part.sessions == session_id, sims, -np.inf)
        n = min(k, len(sims))
        top = np.argpartition(-sims, n - 1)[:n] if n < len(sims) else np.arange(len(sims))
        top = top[np.isfinite(sims[top])]
        dist = (1.0 - sims[top]).astype(np.float64)
        ids = part.ids[top]
        order = np.lexsort((ids, dist))  # by distance, ties by id
        return list(zip(ids[order].tolist(), dist[order].tolist(), strict=True))

    def _sweep(self, sp: Space) -> None:
        """A new epoch (erasure, a reset): copies of that space, erased users'
        among them, leave memory here, at the next search of any user."""
        if self._epochs.get(sp.name) == sp.epoch:
            return
        self._epochs[sp.name] = sp.epoch
        for key in [k_ for k_, p in self._parts.items() if k_[0] == sp.name]:
            if self._parts[key].epoch != sp.epoch:
                del self._parts[key]
        for key in [k_ for k_, v in self._sizes.items() if k_[0] == sp.name]:
            if self._sizes[key][2] != sp.epoch:
                del self._sizes[key]

    def _current(self, conn: Connection, sp: Space, user_id: str) -> _Part:
        key = (sp.name, user_id)
        part = self._parts.get(key)
        stale = part is None or part.epoch != sp.epoch or part.rewrites != sp.rewrites
        if part is not None and not stale and sp.cursor - part.cursor > _MAX_DELTA:
            stale = True
        if stale:
            ids, vecs = partition_vectors(conn, sp, user_id)
            part = _Part(sp.epoch, sp.rewrites, sp.cursor, ids, vecs, _inverse_norms(vecs))
        elif part is not None and sp.cursor > part.cursor:
            part = self._extend(conn, sp, user_id, part)
        assert part is not None
        if len(part.ids) == 0:
            # Nothing to keep (a user without vectors, an erased one): asking
            # again costs one indexed read, and erased users leave no entry.
            self._parts.pop(key, None)
            return part
        self._parts[key] = part
        self._parts.move_to_end(key)
        self._evict()
        return part

    def _extend(self, conn: Connection, sp: Space, user_id: str, part: _Part) -> _Part:
        """``part`` with the user's L0 vectors between its cursor and the space's."""
        if conn.dialect.name == "postgresql":
            got, mat = pg.partition(
                conn, sp.table_name, user_id, sp.dims, after=part.cursor, upto=sp.cursor
            )
            new_sessions = (
                None
                if part.sessions is None
                else np.concatenate(
                    [part.sessions, _sessions(conn, user_id, got, after=part.cursor)]
                )
            )
            return _Part(
                part.epoch,
                part.rewrites,
                sp.cursor,
                np.concatenate([part.ids, got]),
                np.concatenate([part.mat, mat]) if len(got) else part.mat,
                np.concatenate([part.inv, _inverse_norms(mat)]) if len(got) else part.inv,
                new_sessions,
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
            return _Part(
                part.epoch, part.rewrites, sp.cursor, part.ids, part.mat, part.inv, part.sessions
            )
        return _Part(
            part.epoch,
            part.rewrites,
            sp.cursor,
            np.concatenate([part.ids, np.array(ids, dtype=np.int64)]),
            np.concatenate([part.mat, np.stack(vecs)]),
            np.concatenate([part.inv, _inverse_norms(np.stack(vecs))]),
            None
            if part.sessions is None
            else np.concatenate([part.sessions, np.array(sess, dtype=object)]),
        )

    def _evict(self) -> None:
        total = sum(p.nbytes for p in self._parts.values())
        while total > self.max_bytes and len(self._parts) > 1:
            _, old = self._parts.popitem(last=False)
            total -= old.nbytes


def _matches(key: tuple[str, str], space: str | None, user_id: str | None) -> bool:
    return (space is None or key[0] == space) and (user_id is None or key[1] == user_id)
