"""Fills vector spaces from their source tables, off the capture path.

Capture never waits for an embedder: rows land in ``l0_messages`` /
``l1_memories`` inline, and this indexer embeds them later (in a background
thread, or in the foreground for ``memstore reindex``). Each step reads a
batch, embeds it, and writes vectors in one short write transaction,
re-checking that each source row still holds the text it embedded.

The vec0 table is the one stored copy of each vector: a
projection rebuild keeps it (row ids are assigned in log order, so they name
the same messages again) and erasure carries the other users' vectors over
(``spaces.carry_over``). ``embedding_cache`` is no longer written for source
rows; vectors a file from before migration 0013 still holds there are used
once, instead of embedding their text again, and then deleted.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import Connection, select, text, update

from memstore.db import backend, rawexec
from memstore.db.backend import upsert
from memstore.db.engine import Database
from memstore.db.schema import embedding_cache, vector_index, vector_spaces
from memstore.db.sqlfn import in_list, in_named
from memstore.db.sqlfn import limit as limit_sql
from memstore.derive.messages.columns import labelled_sql
from memstore.embeddings import Embedder, check_vectors, content_hash, to_blob
from memstore.errors import EmbeddingError, MemstoreError
from memstore.timeutil import Clock, system_clock, to_iso
from memstore.vectors import quarantine, spaces
from memstore.vectors.spaces import Space

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Known:
    cached: dict[str, bytes]  # legacy embedding_cache vectors by content hash
    held: set[int]  # ids of the batch that are in quarantine


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
# Both texts carry their speaker's name (memstore.derive.messages.columns.labelled_text).
_PREV_TEXT = (
    f"(SELECT {labelled_sql('p')} FROM l0_messages p WHERE p.user_id = m.user_id "
    "AND p.session_id = m.session_id AND p.position <= m.position AND p.id < m.id "
    "AND p.low_info = 0 ORDER BY p.position DESC, p.id DESC LIMIT 1)"
)


def _l0_rows(conn: Connection, space: Space, where: str, params: Sequence[Any]) -> list[_Row]:
    context = space.model_id.endswith("+ctx1")
    prev = _PREV_TEXT if context else "NULL"
    # Driver-level (memstore.db.rawexec): once per batch, and compiling the
    # text() clause cost more than running it.
    rows = rawexec.rows(
        conn,
        f"SELECT m.id, m.user_id, {labelled_sql('m')}, m.session_id, {prev}, m.text "
        f"FROM l0_messages m WHERE {where}",
        params,
    )
    out = []
    for r in rows:
        # l0_messages keeps no hash column (migration 0019: 65 B a message);
        # hashing a message here costs a microsecond.
        own = content_hash(r[5])
        body = f"{r[4]}\n{r[2]}" if r[4] else r[2]
        out.append(_Row(r[0], r[1], body, content_hash(body), own, (r[3],)))
    return out


def _pending_l0(conn: Connection, space: Space, limit: int) -> list[_Row]:
    return _l0_rows(conn, space, f"m.id > ? ORDER BY m.id {limit_sql(limit)}", (space.cursor,))


def context_texts(conn: Connection, user_id: str) -> dict[tuple[str, str, str], str]:
    """The "previous + this message" text a context space embeds for each of a
    user's messages that has a previous one, by (user, session, message id)."""
    rows = conn.execute(
        text(
            f"SELECT m.session_id, m.message_id, {labelled_sql('m')}, {_PREV_TEXT} "
            "FROM l0_messages m WHERE m.user_id = :u"
        ),
        {"u": user_id},
    ).all()
    return {(user_id, str(r[0]), str(r[1])): f"{r[3]}\n{r[2]}" for r in rows if r[3]}


def context_hashes(conn: Connection, user_id: str) -> set[str]:
    """Cache keys of a user's "previous + this message" texts (for erasure)."""
    return {content_hash(t) for t in context_texts(conn, user_id).values()}


_L1_SELECT = (
    "SELECT m.id, m.user_id, m.content, m.content_hash, m.type, m.scene_name FROM l1_memories m "
)


def _l1_rows(conn: Connection, sql: str, params: dict[str, Any]) -> list[_Row]:
    rows = conn.execute(text(_L1_SELECT + sql), params).all()
    return [_Row(r[0], r[1], r[2], r[3], r[3], (r[4], r[5])) for r in rows]


def _pending_l1(conn: Connection, space: Space, limit: int) -> list[_Row]:
    return _l1_rows(
        conn,
        "LEFT JOIN vector_index vi "
        "ON vi.space = :s AND vi.source_id = m.id AND vi.content_hash = m.content_hash "
        f"WHERE m.status = 'active' AND vi.source_id IS NULL AND {quarantine.NOT_QUARANTINED} "
        f"ORDER BY m.id {limit_sql(limit)}",
        {"s": space.name},
    )


def _ids_l0(conn: Connection, space: Space, ids: list[int]) -> list[_Row]:
    if not ids:
        return []
    marks, values = in_list([int(i) for i in ids])
    return _l0_rows(conn, space, f"m.id IN ({marks}) ORDER BY m.id", values)


def _ids_l1(conn: Connection, space: Space, ids: list[int]) -> list[_Row]:
    if not ids:
        return []
    marks, params = in_named([int(i) for i in ids], "i")
    return _l1_rows(conn, f"WHERE m.status = 'active' AND m.id IN ({marks}) ORDER BY m.id", params)


_PENDING = {"l0": _pending_l0, "l1": _pending_l1}
_BY_ID = {"l0": _ids_l0, "l1": _ids_l1}


class Indexer:
    def __init__(
        self,
        db: Database,
        embedder: Embedder,
        clock: Clock = system_clock,
        *,
        context_vectors: bool = True,
        vector_element: str = "float32",
    ) -> None:
        self.db = db
        self.embedder = embedder
        self.clock = clock
        self.context_vectors = context_vectors
        # How spaces this indexer makes store their vectors (an existing
        # space keeps its own: memstore.db.elements).
        self.vector_element = vector_element
        # Held for a whole step (read, embed, write); rebuild and erasure take it
        # too, so in one process a batch never straddles a renumbering.
        self.lock = threading.RLock()
        # Whether the embedding cache may hold vectors of source rows (a file
        # from before migration 0013); None until first looked at.
        self._legacy: bool | None = None

    def model_for(self, kind: str) -> str:
        return spaces.space_model_id(kind, self.embedder.model_id, self.context_vectors)

    def space(self, kind: str) -> Space:
        with self.db.read() as conn:
            got = spaces.get_space(conn, kind, self.model_for(kind))
        return got if got is not None else self._create_space(kind)

    def _create_space(self, kind: str) -> Space:
        dims = self.embedder.resolve_dimensions()
        with self.db.write() as conn:
            return spaces.ensure_space(
                conn, kind, self.model_for(kind), dims, to_iso(self.clock()), self.vector_element
            )

    def pending(self, kind: str) -> int:
        sp = self.space(kind)
        with self.db.read() as conn:
            if kind == "l0":
                q = "SELECT count(*) FROM l0_messages WHERE id > :c"
                return int(conn.execute(text(q), {"c": sp.cursor}).scalar_one())
            q = (
                "SELECT count(*) FROM l1_memories m LEFT JOIN vector_index vi ON vi.space = :s "
                "AND vi.source_id = m.id AND vi.content_hash = m.content_hash "
                "WHERE m.status = 'active' AND vi.source_id IS NULL "
                f"AND {quarantine.NOT_QUARANTINED}"
            )
            return int(conn.execute(text(q), {"s": sp.name}).scalar_one())

    def step(self, kind: str, batch: int = 64) -> int:
        """Embed one batch; returns rows handled (0 = caught up). A row that
        cannot be embedded is quarantined, not retried in every batch."""
        return self._step(kind, batch)[0]

    def _step(self, kind: str, batch: int) -> tuple[int, bool]:
        """(rows handled, caught up): a partial batch that was written is the
        last one, so the loop needs no extra read to find nothing."""
        with self.lock:
            # One read transaction for the space, the batch and what is known
            # about it (legacy cache vectors, quarantined ids): the write
            # transaction that follows only writes.
            with self.db.read() as conn:
                sp = spaces.get_space(conn, kind, self.model_for(kind))
                if sp is not None:
                    rows = _PENDING[kind](conn, sp, batch)
                    known = self._known(conn, sp, rows)
            if sp is None:
                sp = self._create_space(kind)
                with self.db.read() as conn:
                    rows = _PENDING[kind](conn, sp, batch)
                    known = self._known(conn, sp, rows)
            if not rows:
                if not sp.ready:
                    with self.db.write() as conn:
                        spaces.mark_ready(conn, sp)
                return 0, True
            cursor = max(r.id for r in rows) if kind == "l0" else None
            last = len(rows) < batch
            kept = self._index(sp, kind, rows, known, cursor=cursor, ready=last) is not None
            return len(rows), last and kept

    def retry_quarantined(self, kind: str, batch: int = 64) -> int:
        """Try once more the quarantined rows whose ``retry_after`` passed;
        returns how many were embedded this time (a failure only backs off)."""
        with self.lock:
            sp = self.space(kind)
            with self.db.read() as conn:
                ids = quarantine.due(conn, sp.name, now=self.clock(), limit=batch)
                if not ids:
                    return 0
                rows = _BY_ID[kind](conn, sp, ids)
                known = self._known(conn, sp, rows)
            gone = sorted(set(ids) - {r.id for r in rows})
            known.held.update(gone)
            return self._index(sp, kind, rows, known, cursor=None, gone=gone, isolate=True) or 0

    def quarantined(self) -> list[quarantine.Quarantined]:
        with self.db.read() as conn:
            return quarantine.items(conn, limit=1000)

    def _known(self, conn: Connection, sp: Space, rows: list[_Row]) -> _Known:
        """What the write needs to know about ``rows``, read before it: vectors
        a pre-0013 file still holds in the embedding cache, and which rows sit
        in quarantine (only those are released when written)."""
        known = _Known({}, quarantine.held(conn, sp.name, [r.id for r in rows]))
        if self._legacy is None:
            # Nothing writes source vectors to the cache since 0013: a file
            # whose cache holds none of this model's never will, so the
            # look-up is skipped for the life of this indexer.
            self._legacy = (
                conn.execute(
                    select(embedding_cache.c.content_hash)
                    .where(embedding_cache.c.model_id == self.embedder.model_id)
                    .limit(1)
                ).first()
                is not None
            )
        if not self._legacy:
            return known
        hashes = sorted({r.hash for r in rows})
        for i in range(0, len(hashes), 500):
            for h, blob in conn.execute(
                select(embedding_cache.c.content_hash, embedding_cache.c.vector).where(
                    embedding_cache.c.model_id == self.embedder.model_id,
                    embedding_cache.c.content_hash.in_(hashes[i : i + 500]),
                )
            ):
                known.cached[h] = blob
        return known

    def _index(
        self,
        sp: Space,
        kind: str,
        rows: list[_Row],
        known: _Known,
        *,
        cursor: int | None,
        gone: list[int] | None = None,
        isolate: bool = False,
        ready: bool = False,
    ) -> int | None:
        """Embed what vec0 and the legacy cache lack; write it in one short
        transaction that only writes (and checks the rows did not change);
        returns rows written, None if a reset made the batch void."""
        cached = known.cached
        uniq: dict[str, str] = {r.hash: r.text for r in rows if r.hash not in cached}
        fresh, bad = self._embed(uniq, sp.dims, isolate=isolate)
        good = [r for r in rows if r.hash not in bad]
        with self.db.write() as conn:
            if spaces.current_epoch(conn, sp.name) != sp.epoch:
                # A rebuild or erasure emptied the space while we embedded:
                # our row ids may now name other messages (or users).
                return None
            written = self._write_vectors(conn, sp, kind, good, {**cached, **fresh})
            if cached:
                # Legacy cache rows now live in vec0: drop the second copy.
                used = sorted(cached)
                for i in range(0, len(used), 500):
                    conn.execute(
                        embedding_cache.delete().where(
                            embedding_cache.c.model_id == self.embedder.model_id,
                            embedding_cache.c.content_hash.in_(used[i : i + 500]),
                        )
                    )
            if written and cursor is None:
                # Written below the cursor (L1 has none: every write): in-memory
                # partition copies reload (memstore.vectors.hot).
                conn.execute(
                    update(vector_spaces)
                    .where(vector_spaces.c.name == sp.name)
                    .values(rewrites=vector_spaces.c.rewrites + 1)
                )
            now = self.clock()
            for error in sorted(set(bad.values())):
                quarantine.record(
                    conn,
                    sp.name,
                    [(r.id, r.user_id, r.src_hash) for r in rows if bad.get(r.hash) == error],
                    error,
                    now=now,
                )
            done = [i for i in [*written, *(gone or [])] if i in known.held]
            if done:
                quarantine.release(conn, sp.name, done)
            if ready and not sp.ready:
                spaces.mark_ready(conn, sp)
            if cursor is not None:
                rawexec.run(
                    conn,
                    "UPDATE vector_spaces SET cursor = ? WHERE name = ? AND cursor < ?",
                    (cursor, sp.name, cursor),
                )
        if bad:
            log.debug("indexer quarantined %d row(s) of %s", len(rows) - len(good), sp.name)
        return len(written)

    def _embed(
        self, texts: dict[str, str], dims: int, *, isolate: bool = False
    ) -> tuple[dict[str, bytes], dict[str, str]]:
        """Vectors by content hash, and the errors of texts that got none.

        A vector that is NaN, infinite or all zeros belongs to its text alone:
        that text is set aside. When the model raises for a whole batch, each
        text is tried alone; unless ``isolate``, if every one fails it is the
        model's fault (down, misconfigured) and the error propagates, so the
        batch is retried later rather than quarantined."""
        if not texts:
            return {}, {}
        keys = list(texts)
        try:
            arr = self.embedder.embed_documents([texts[k] for k in keys])
        except MemstoreError as whole:
            if len(keys) == 1:
                if isolate:
                    return {}, {keys[0]: f"{type(whole).__name__}: {whole}"}
                raise
            out: dict[str, bytes] = {}
            bad: dict[str, str] = {}
            for k in keys:
                one, err = self._embed({k: texts[k]}, dims, isolate=True)
                out.update(one)
                bad.update(err)
            if not out and not isolate:
                raise whole
            return out, bad
        try:
            vecs = check_vectors(arr, dims, rows=len(keys))
            return {h: to_blob(v) for h, v in zip(keys, vecs, strict=True)}, {}
        except EmbeddingError:
            pass
        # Some row is unusable: a wrong shape is the model's fault (raised),
        # bad values (NaN, inf, zeros) are their text's.
        raw = np.asarray(arr, dtype=np.float32)
        if raw.ndim != 2 or raw.shape[0] != len(keys):
            check_vectors(arr, dims, rows=len(keys))
        good_v: dict[str, bytes] = {}
        bad_v: dict[str, str] = {}
        for i, k in enumerate(keys):
            try:
                good_v[k] = to_blob(check_vectors(raw[i : i + 1], dims)[0])
            except EmbeddingError as e:
                bad_v[k] = str(e).replace("vector 0 ", "vector ")
        return good_v, bad_v

    def _write_vectors(
        self, conn: Connection, sp: Space, kind: str, rows: list[_Row], blobs: dict[str, bytes]
    ) -> list[int]:
        """Replace the rows' vectors; returns the ids written (rows changed or
        erased since they were read are skipped: a later step catches up)."""
        if not rows:
            return []
        marks, ids = in_list([r.id for r in rows])
        sql = (
            f"SELECT id, user_id, text FROM l0_messages WHERE id IN ({marks})"
            if kind == "l0"
            else f"SELECT id, user_id, content_hash FROM l1_memories WHERE id IN ({marks})"
        )
        current = {
            int(i): (u, content_hash(v) if kind == "l0" else v)
            for i, u, v in rawexec.rows(conn, sql, ids)
        }
        rows = [r for r in rows if current.get(r.id) == (r.user_id, r.src_hash)]
        if not rows:
            return []
        params: list[dict[str, Any]] = []
        for r in rows:
            p: dict[str, Any] = {"id": r.id, "u": r.user_id, "v": blobs[r.hash]}
            for j, m in enumerate(r.meta):
                p[f"m{j}"] = m
            params.append(p)
        backend.of(conn).write_vectors(conn, sp.table_name, kind, params, sp.element)
        if kind == "l1":
            stmt = upsert(vector_index)
            conn.execute(
                stmt.on_conflict_do_update(
                    index_elements=[vector_index.c.space, vector_index.c.source_id],
                    set_={"content_hash": stmt.excluded.content_hash},
                ),
                [{"space": sp.name, "source_id": r.id, "content_hash": r.src_hash} for r in rows],
            )
        return [r.id for r in rows]

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
                n, caught_up = self._step(kind, batch)
                total += n
                if n and progress:
                    progress(n)
                if caught_up:
                    break
            # Each failure moves its retry_after forward, so this loop ends.
            while not (should_stop and should_stop()):
                n = self.retry_quarantined(kind, batch)
                if n == 0:
                    break
                total += n
        return total
