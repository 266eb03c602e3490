"""Vector spaces: one vector table per (kind, embedding model), in the
backend's format (memstore.db.backend: sqlite-vec's ``vec0``, pgvector).

A space is a cache over a source table (``l0_messages`` or ``l1_memories``).
Changing the embedding model creates a new space; until the indexer has
filled it once, search is keyword-only, so two vector spaces are never mixed
and a dimension mismatch can never reach a query. A table is never renamed
(vec0 breaks): a new model gets a new table.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, select, text, update

from memstore.db import backend, elements, rawexec
from memstore.db.schema import vector_index, vector_quarantine, vector_spaces
from memstore.db.sqlfn import driver_rows, driver_sql
from memstore.errors import ConfigError

KINDS = ("l0", "l1")


@dataclass(frozen=True)
class Space:
    name: str
    kind: str
    model_id: str
    dims: int
    table_name: str
    cursor: int
    ready: bool
    epoch: int
    rewrites: int = 0
    element: str = "float32"


def _space(r: Any) -> Space:
    """A space from a row of ``_SELECT`` (its columns in that order)."""
    return Space(
        r[0], r[1], r[2], int(r[3]), r[4], int(r[5]), bool(r[6]), int(r[7]), int(r[8]), str(r[9])
    )


def space_model_id(kind: str, embedder_model_id: str, context_vectors: bool) -> str:
    """The model id a space is keyed by: L0 vectors of "previous + this message"
    live in their own space, never mixed with vectors of single messages."""
    return f"{embedder_model_id}+ctx1" if kind == "l0" and context_vectors else embedder_model_id


def space_name(kind: str, model_id: str) -> str:
    return f"{kind}:{model_id}"


def _table_name(kind: str, model_id: str, dims: int) -> str:
    digest = hashlib.sha256(f"{model_id}/{dims}".encode()).hexdigest()[:12]
    return f"vec_{kind}_{digest}"


# Driver-level: every search reads its space, and building and compiling a
# Core select cost more than the read (0.3-0.6 ms against ~0.05 ms).
_SELECT = (
    'SELECT name, kind, model_id, dims, table_name, "cursor", ready, epoch, rewrites, '
    "element FROM vector_spaces"
)


def get_space_ahead(conn: Connection, kind: str, model_id: str) -> None:
    """``get_space`` follows in this transaction: on PostgreSQL its read
    goes with the next round trip."""
    rawexec.prefetch(
        conn, _SELECT + " WHERE name = ?", (space_name(kind, model_id),), reads=("vector_spaces",)
    )


def get_space(conn: Connection, kind: str, model_id: str) -> Space | None:
    sql = driver_sql(conn, _SELECT + " WHERE name = ?")
    rows = driver_rows(conn, sql, (space_name(kind, model_id),))
    return _space(rows[0]) if rows else None


def list_spaces(conn: Connection) -> list[Space]:
    return [_space(r) for r in driver_rows(conn, _SELECT + " ORDER BY name")]


def ensure_space(
    conn: Connection, kind: str, model_id: str, dims: int, now_iso: str, element: str = "float32"
) -> Space:
    """The space of (kind, model), made if missing. A new space stores
    ``element`` where the backend can (PostgreSQL: float32 only); an existing
    one keeps its own (``convert`` changes it)."""
    if kind not in KINDS:
        raise ConfigError(f"unknown vector kind {kind!r}")
    if dims <= 0 or dims > 8192:
        raise ConfigError(f"embedding dimension {dims} is out of range for the vector tables")
    existing = get_space(conn, kind, model_id)
    if existing is not None:
        if existing.dims != dims:
            raise ConfigError(
                f"embedder {model_id!r} now reports {dims} dimensions, its vectors have "
                f"{existing.dims}; give the changed model a new name"
            )
        return existing
    element = elements.check(element)
    if element not in backend.of(conn).vector_elements:
        element = "float32"
    table = _table_name(kind, model_id, dims)
    _create(conn, table, kind, dims, element)
    conn.execute(
        vector_spaces.insert().values(
            name=space_name(kind, model_id),
            kind=kind,
            model_id=model_id,
            dims=dims,
            table_name=table,
            cursor=0,
            ready=0,
            epoch=0,
            rewrites=0,
            created_at=now_iso,
            element=element,
        )
    )
    got = get_space(conn, kind, model_id)
    assert got is not None
    return got


def reset_kind(conn: Connection, kind: str, *, recreate: bool = False) -> None:
    """Forget every vector of a kind (source rows were renumbered or erased).

    The indexer refills the spaces from the embedding cache in the background;
    until it has caught up, vector search falls back to keyword (``ready`` 0),
    and the bumped ``epoch`` makes it discard any batch it read before the reset.
    ``recreate`` drops and recreates the vec0 tables instead of deleting rows:
    vec0 only flags deleted rows, their bytes stay in its chunk blobs.
    """
    for space in list_spaces(conn):
        if space.kind != kind:
            continue
        if recreate:
            conn.execute(text(f'DROP TABLE IF EXISTS "{space.table_name}"'))
            _create(conn, space.table_name, kind, space.dims, space.element)
        else:
            conn.execute(text(f'DELETE FROM "{space.table_name}"'))
        conn.execute(vector_index.delete().where(vector_index.c.space == space.name))
        # Row ids are renumbered or gone: quarantined rows are met again.
        conn.execute(vector_quarantine.delete().where(vector_quarantine.c.space == space.name))
        conn.execute(
            update(vector_spaces)
            .where(vector_spaces.c.name == space.name)
            .values(cursor=0, ready=0, epoch=vector_spaces.c.epoch + 1)
        )


def _create(conn: Connection, table: str, kind: str, dims: int, element: str) -> None:
    backend.of(conn).create_vector_table(conn, table, kind, dims, element)


def mark_ready(conn: Connection, sp: Space) -> None:
    """The space was filled once: vector search may use it (unless a reset
    moved its epoch on since ``sp`` was read)."""
    conn.execute(
        update(vector_spaces)
        .where(vector_spaces.c.name == sp.name, vector_spaces.c.epoch == sp.epoch)
        .values(ready=1)
    )


def current_epoch(conn: Connection, name: str) -> int | None:
    # Driver-level: the indexer reads it first in every write transaction.
    row = rawexec.first(conn, "SELECT epoch FROM vector_spaces WHERE name = ?", (name,))
    return None if row is None else int(row[0])


def natural_ids(conn: Connection, kind: str, *, without_user: str) -> dict[Any, int]:
    """Row id of each source row by its stable key: (user, session, message
    id) for messages, the memory id for memories."""
    if kind == "l0":
        q = "SELECT user_id, session_id, message_id, id FROM l0_messages WHERE user_id != :u"
        return {(r[0], r[1], r[2]): int(r[3]) for r in conn.execute(text(q), {"u": without_user})}
    q = "SELECT memory_id, id FROM l1_memories WHERE user_id != :u"
    return {r[0]: int(r[1]) for r in conn.execute(text(q), {"u": without_user})}


def carry_over(conn: Connection, kind: str, moved: dict[int, int]) -> int:
    """After rows were renumbered (erasure), keep the vectors of rows that
    survive (``moved``: old id -> new id) and nothing else; returns how many
    vectors were left behind.

    Each space gets a new table holding only the survivors, and the old one
    is dropped (``Backend.copy_vectors``), so no erased vector's bytes stay
    in a live table. No text is embedded again.
    """
    dropped = 0
    for sp in list_spaces(conn):
        if sp.kind != kind:
            continue
        epoch = sp.epoch + 1
        table = f"{_table_name(kind, sp.model_id, sp.dims)}_{epoch}"
        dropped += backend.of(conn).copy_vectors(
            conn, sp.table_name, table, kind, sp.dims, moved, sp.element
        )
        _carry_done(conn, sp, moved, table, epoch)
    return dropped


def _carry_done(conn: Connection, sp: Space, moved: dict[int, int], table: str, epoch: int) -> None:
    """The space now lives in ``table``: bookkeeping follows the new ids."""
    _carry_bookkeeping(conn, sp, moved)
    # Ids only shrink and keep their order, so the cursor maps to the new
    # id of the last surviving row at or below it.
    cursor = max((n for o, n in moved.items() if o <= sp.cursor), default=0)
    conn.execute(
        update(vector_spaces)
        .where(vector_spaces.c.name == sp.name)
        .values(table_name=table, cursor=cursor, epoch=epoch)
    )


def _carry_bookkeeping(conn: Connection, sp: Space, moved: dict[int, int]) -> None:
    """Quarantine and (L1) vector_index rows follow their rows' new ids."""
    for table in (vector_quarantine, vector_index):
        rows = [
            dict(r._mapping)
            for r in conn.execute(select(table).where(table.c.space == sp.name))
            if int(r.source_id) in moved
        ]
        conn.execute(table.delete().where(table.c.space == sp.name))
        for r in rows:
            r["source_id"] = moved[int(r["source_id"])]
        if rows:
            conn.execute(table.insert(), rows)


def convert(conn: Connection, element: str) -> list[tuple[str, int]]:
    """Store every space's vectors as ``element`` (spaces already so are left
    alone); returns (space, vectors converted) per space changed.

    Each changed space gets a new table and a new epoch (in-memory copies
    reload); its cursor, readiness and bookkeeping stay, as the row ids do.
    float32 -> int8 gives the vectors int8 would have held from the start;
    int8 -> float32 cannot restore the precision int8 dropped.
    """
    element = elements.check(element)
    engine = backend.of(conn)
    out = []
    for sp in list_spaces(conn):
        if sp.element == element:
            continue
        epoch = sp.epoch + 1
        table = f"{_table_name(sp.kind, sp.model_id, sp.dims)}_{epoch}"
        n = engine.convert_vectors(
            conn, sp.table_name, table, sp.kind, sp.dims, (sp.element, element)
        )
        conn.execute(
            update(vector_spaces)
            .where(vector_spaces.c.name == sp.name)
            .values(table_name=table, epoch=epoch, element=element)
        )
        out.append((sp.name, n))
    return out
