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
read of the pgvector table, memstore.db.backend.pgvector) and kept consistent by
what the write path records in ``vector_spaces``. Copies are float32 whatever
the space stores: an int8 space's rows are held scaled to unit length
(memstore.db.elements), the very rows the engine re-scores vec0's answers
with, so both paths give the same scores.

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

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import Connection, text

from memstore.db import backend
from memstore.vectors.spaces import Space, get_space

log = logging.getLogger("memstore.search")

# Partitions smaller than this stay on vec0. Measured (BENCHMARKS.md, "Small
# partitions"): loading is cheaper than one vec0 query at every size, so none.
MIN_ROWS = 0
# Session filters of L0 copies with fewer rows go to vec0 rather than read
# every row's session (as costly as the vector load itself).
SESSION_ROWS = 10_000
# The loader thread starts this long after the search that queued a copy.
LOAD_DELAY_S = 0.05
# Total bytes of vectors kept per process (least recently used copies go).
MAX_BYTES = 512 * 1024 * 1024
# A larger gap since the copy's cursor is read again in one pass.
_MAX_DELTA = 2_000


# A copy in more blocks than this is merged (see ``_Part.blocks``).
_MAX_BLOCKS = 16
# Blocks with fewer rows than a vec0 chunk are merged first.
_SMALL_BLOCK = 128

Array = np.ndarray[Any, Any]


@dataclass
class _Part:
    epoch: int
    rewrites: int
    cursor: int
    # Row ids, and the stored vectors in blocks, in the same order. A block is
    # a view of one vec0 chunk as SQLite returned it: a single matrix would
    # copy the partition once more, and touching that much fresh memory cost
    # as much as the read itself (1.5 MB of page faults at 1k rows). Large
    # partitions and many small appended blocks are merged (``_compact``).
    ids: Array
    blocks: list[Array]
    # 1 / norm of each row: scaling the product costs less per query than
    # normalising the vectors costs per load (both as vec0's cosine).
    inv: Array
    # Free or deleted slots of vec0's chunks (never returned); None: none.
    dead: Array | None
    # Session of each row (L0), read at the first session-filtered search.
    sessions: Array | None = None
    nbytes: int = 0

    def __post_init__(self) -> None:
        self.count()

    def count(self) -> None:
        """``nbytes``, counted once per change: summing every copy's arrays
        at each search cost more than the search (200 copies, 1k blocks)."""
        arrays = [self.ids, self.inv, *self.blocks]
        arrays += [a for a in (self.dead, self.sessions) if a is not None]
        self.nbytes = int(sum(a.nbytes for a in arrays))

    def stored(self, want: Array) -> dict[int, Array]:
        """The stored vectors of the ids in ``want`` this copy holds (live
        slots only), as vec0 returns them (not normalised)."""
        live = self.ids if self.dead is None else np.where(self.dead, -1, self.ids)
        order = np.argsort(live, kind="stable")
        at = np.searchsorted(live, want, sorter=order)
        at = np.minimum(at, len(order) - 1)
        rows = order[at]
        found = live[rows] == want
        ends = np.cumsum([len(b) for b in self.blocks])
        out: dict[int, Array] = {}
        for i, r in zip(want[found].tolist(), rows[found].tolist(), strict=True):
            b = int(np.searchsorted(ends, r, side="right"))
            out[i] = np.array(self.blocks[b][r - (int(ends[b - 1]) if b else 0)])
        return out

    def rows(self, at: Array) -> list[Array]:
        """The stored vectors at positions ``at`` of ``ids`` (a shortlist)."""
        ends = np.cumsum([len(b) for b in self.blocks])
        out = []
        for r in at.tolist():
            b = int(np.searchsorted(ends, r, side="right"))
            out.append(self.blocks[b][r - (int(ends[b - 1]) if b else 0)])
        return out

    def similarities(self, q: Array) -> Array:
        """Cosine similarity of every row to the unit vector ``q`` (-inf: no row)."""
        if len(self.blocks) == 1:
            sims = self.blocks[0] @ q
        else:
            sims = np.concatenate([b @ q for b in self.blocks])
        sims *= self.inv
        if self.dead is not None:
            sims[self.dead] = -np.inf
        return sims


def exact_distances(query: Array, vectors: list[tuple[int, Array]]) -> list[tuple[int, float]]:
    """``(id, cosine distance)`` of each vector to ``query``, nearest first,
    equal distances by id. Computed on the rows sorted by id, so the same rows
    give the same distances bit for bit, whichever search found them."""
    if not vectors:
        return []
    vectors = sorted(vectors, key=lambda r: r[0])
    ids = np.array([i for i, _ in vectors], dtype=np.int64)
    mat = np.stack([np.asarray(v, dtype=np.float32).reshape(-1) for _, v in vectors])
    q = np.asarray(query, dtype=np.float32).reshape(-1)
    norm = float(np.linalg.norm(q))
    sims = (mat @ (q / norm if norm else q)) * _inverse_norms(mat)
    dist = (1.0 - sims).astype(np.float64)
    order = np.lexsort((ids, dist))
    return list(zip(ids[order].tolist(), dist[order].tolist(), strict=True))


def _inverse_norms(mat: Array) -> Array:
    norms = np.sqrt(np.einsum("ij,ij->i", mat, mat, dtype=np.float32))
    norms[norms == 0] = 1.0
    return np.asarray(1.0 / norms, dtype=np.float32)


def _compact(blocks: list[Array]) -> list[Array]:
    """Fewer blocks: the small ones at the end (appended rows) merged, and
    everything merged when that is not enough (one matrix product per block
    costs more than the copy for a large partition)."""
    if len(blocks) <= _MAX_BLOCKS:
        return blocks
    i = len(blocks)
    while i > 0 and len(blocks[i - 1]) < _SMALL_BLOCK:
        i -= 1
    if len(blocks) - i >= 2:
        blocks = [*blocks[:i], np.concatenate(blocks[i:])]
    if len(blocks) > _MAX_BLOCKS:
        blocks = [np.concatenate(blocks)]
    return blocks


def partition_vectors(conn: Connection, sp: Space, user_id: str) -> tuple[Array, Array]:
    """(ids, vectors) of a user's partition, read in bulk by the backend."""
    got = backend.of(conn).vector_partition(conn, sp.table_name, user_id, sp.dims, sp.element)
    if not got.blocks:
        return got.ids, np.zeros((0, sp.dims), dtype=np.float32)
    mat = np.concatenate(got.blocks)
    return (got.ids, mat) if got.dead is None else (got.ids[~got.dead], mat[~got.dead])


def _load(conn: Connection, sp: Space, user_id: str, *, merge: bool = False) -> _Part:
    """A copy of the user's partition; ``merge``: in one block (the loader
    thread, off any search's path: one matrix product per search instead of
    one per chunk, 0.4 against ~0.15 ms at 1k rows)."""
    got = backend.of(conn).vector_partition(conn, sp.table_name, user_id, sp.dims, sp.element)
    ids, blocks, dead = got.ids, got.blocks, got.dead
    blocks = [np.concatenate(blocks)] if merge and len(blocks) > 1 else _compact(blocks)
    inv = (
        np.concatenate([_inverse_norms(b) for b in blocks])
        if blocks
        else np.zeros(0, dtype=np.float32)
    )
    return _Part(sp.epoch, sp.rewrites, sp.cursor, ids, blocks, inv, dead)


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
        background: Callable[[], AbstractContextManager[Connection]] | None = None,
    ) -> None:
        """``min_rows``: L0 partitions with fewer rows stay on vec0; ``kinds``:
        the vector kinds searched here (tests compare against vec0 with ());
        ``background``: how a loader thread opens a read transaction. With it,
        a search that finds no current copy is answered by vec0 while the copy
        loads in that thread; without it (tests), the search loads it."""
        self.background = background
        self._queue: OrderedDict[tuple[str, str], str] = OrderedDict()
        self._loader: threading.Thread | None = None
        # Set when the store closes: no load starts after it (a read would
        # open the file again while it is being released).
        self._closing = threading.Event()
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

    def close(self) -> None:
        """No more loads: the queue is dropped and a running load finishes."""
        self._closing.set()
        with self._lock:
            self._queue.clear()
            loader = self._loader
        if loader is not None:
            loader.join()

    def wait(self) -> None:
        """Until the copies queued for the loader thread are loaded."""
        while True:
            with self._lock:
                loader = self._loader
            if loader is None:
                return
            loader.join()

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
            if part is None:
                return None
            if session_id is not None and part.sessions is None:
                if len(part.ids) < SESSION_ROWS:
                    return None
                part.sessions = _sessions(conn, user_id, part.ids)
                part.count()
                self._evict()
        if len(part.ids) == 0:
            return []
        q = np.asarray(query, dtype=np.float32).reshape(-1)
        norm = float(np.linalg.norm(q))
        sims = part.similarities(q / norm if norm else q)
        if session_id is not None:
            sims = np.where(part.sessions == session_id, sims, -np.inf)
        n = min(k, len(sims))
        top = np.argpartition(-sims, n - 1)[:n] if n < len(sims) else np.arange(len(sims))
        top = top[np.isfinite(sims[top])]
        ids = part.ids[top]
        # The shortlist is scored again by the one function the database's
        # KNN results go through too: a product over the whole copy and
        # vec0's own arithmetic differ in the last digits, and equal messages
        # must score the same whichever path answered.
        return exact_distances(q, list(zip(ids.tolist(), part.rows(top), strict=True)))

    def stored(self, sp: Space, user_id: str, ids: list[int]) -> dict[int, Array]:
        """Stored vectors of ``ids`` from the user's copy, when the copy is
        exactly as of ``sp`` (the caller's snapshot: recall's gate reads its
        candidates' vectors in the transaction its searches used); ids the
        copy does not hold are left out, for the caller to read from the store."""
        with self._lock:
            part = self._parts.get((sp.name, user_id))
        if not ids or part is None or not len(part.ids):
            return {}
        if (part.epoch, part.rewrites, part.cursor) != (sp.epoch, sp.rewrites, sp.cursor):
            return {}
        return part.stored(np.asarray(ids, dtype=np.int64))

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

    def _current(self, conn: Connection, sp: Space, user_id: str) -> _Part | None:
        """The user's copy as of ``sp`` (new rows read inline), or None: vec0
        answers while the loader thread (re)loads it."""
        key = (sp.name, user_id)
        part = self._parts.get(key)
        if part is not None and part.epoch == sp.epoch:
            if part.rewrites > sp.rewrites or part.cursor > sp.cursor:
                return None  # loaded from a newer snapshot than the caller's
            if part.rewrites == sp.rewrites and sp.cursor - part.cursor <= _MAX_DELTA:
                if part.cursor == sp.cursor:
                    self._parts.move_to_end(key)
                    return part
                return self._keep(key, self._extend(conn, sp, user_id, part))
        if self.background is not None:
            if self._closing.is_set():
                return None
            self._queue[key] = sp.model_id
            if self._loader is None:
                self._loader = threading.Thread(
                    target=self._load_queued, name="memstore-hot-vectors", daemon=True
                )
                self._loader.start()
            return None
        return self._keep(key, _load(conn, sp, user_id))

    def _keep(self, key: tuple[str, str], part: _Part) -> _Part:
        if len(part.ids) == 0:
            # Nothing to keep (a user without vectors, an erased one): asking
            # again costs one indexed read, and erased users leave no entry.
            self._parts.pop(key, None)
            return part
        self._parts[key] = part
        self._parts.move_to_end(key)
        self._evict()
        return part

    def _load_queued(self) -> None:
        """The loader thread: each queued copy from its own read transaction
        (a snapshot at least as new as the search that asked for it)."""
        assert self.background is not None
        # After the search (or recall) that asked: loading alongside it would
        # take CPU and the GIL from it (2 cores; reading the chunks holds the
        # GIL while it copies them).
        self._closing.wait(LOAD_DELAY_S)
        while True:
            with self._lock:
                if not self._queue or self._closing.is_set():
                    self._loader = None
                    return
                (name, user_id), model_id = self._queue.popitem(last=False)
            kind = name.split(":", 1)[0]
            try:
                with self.background() as conn:
                    sp = get_space(conn, kind, model_id)
                    if sp is None or sp.name != name:
                        continue
                    part = _load(conn, sp, user_id, merge=True)
            except Exception:  # a closed store, a dropped table: vec0 still answers
                # Quiet while the store closes (its file is being released);
                # otherwise the copy is missing for a reason worth seeing.
                level = logging.DEBUG if self._closing.is_set() else logging.WARNING
                log.log(
                    level,
                    "loading the vectors of %s in %s failed; vec0 answers",
                    user_id,
                    name,
                    exc_info=True,
                )
                continue
            with self._lock:
                old = self._parts.get((name, user_id))
                if old is not None and old.epoch == part.epoch and old.cursor > part.cursor:
                    continue
                if self._epochs.get(name, part.epoch) == part.epoch:
                    self._keep((name, user_id), part)

    def _extend(self, conn: Connection, sp: Space, user_id: str, part: _Part) -> _Part:
        """``part`` with the user's L0 vectors between its cursor and the space's."""
        ids, mat, sess = backend.of(conn).vectors_after(
            conn, sp.table_name, user_id, sp.dims, part.cursor, sp.cursor, sp.element
        )
        if sess is None and part.sessions is not None:
            sess = _sessions(conn, user_id, ids, after=part.cursor)
        if not len(ids):
            return _Part(
                part.epoch,
                part.rewrites,
                sp.cursor,
                part.ids,
                part.blocks,
                part.inv,
                part.dead,
                part.sessions,
            )
        return _Part(
            part.epoch,
            part.rewrites,
            sp.cursor,
            np.concatenate([part.ids, ids]),
            _compact([*part.blocks, mat]),
            np.concatenate([part.inv, _inverse_norms(mat)]),
            None if part.dead is None else np.concatenate([part.dead, np.zeros(len(ids), bool)]),
            None
            if part.sessions is None or sess is None
            else np.concatenate([part.sessions, sess]),
        )

    def _evict(self) -> None:
        total = sum(p.nbytes for p in self._parts.values())
        while total > self.max_bytes and len(self._parts) > 1:
            _, old = self._parts.popitem(last=False)
            total -= old.nbytes


def _matches(key: tuple[str, str], space: str | None, user_id: str | None) -> bool:
    return (space is None or key[0] == space) and (user_id is None or key[1] == user_id)
