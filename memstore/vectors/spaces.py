"""Vector spaces: one sqlite-vec ``vec0`` table per (kind, embedding model)
(on PostgreSQL one pgvector table with the same columns: memstore.vectors.pg).

A space is a cache over a source table (``l0_messages`` or ``l1_memories``).
Changing the embedding model creates a new space; until the indexer has
filled it once, search is keyword-only, so two vector spaces are never mixed
and a dimension mismatch can never reach a query. sqlite-vec facts that shape
this: ``INSERT OR REPLACE`` fails (we DELETE then INSERT), ``ALTER TABLE
RENAME`` breaks vec0 (we never rename; a new model gets a new table), and
filters belong inside the KNN query (``user_id`` is the partition key).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, select, text, update

from memstore.db.schema import vector_index, vector_quarantine, vector_spaces
from memstore.db.sqlfn import driver_rows, driver_sql
from memstore.errors import ConfigError
from memstore.vectors import pg

# Extra vec0 columns per kind: metadata columns can be filtered inside KNN.
_KIND_COLUMNS = {
    "l0": "user_id text partition key, session_id text",
    "l1": "user_id text partition key, mtype text, scene text",
}
KINDS = tuple(_KIND_COLUMNS)

# vec0 allocates a whole chunk per partition (user). The default of 1024 costs
# 1.5 MB per user at 384-d (100 users of 5 messages: 158 MB); 256 left chunks
# 39% full at 100 users x 100 messages. Small chunks slow the KNN
# of a large partition (64 was 40% slower than 256 at 50k rows), but those are
# searched in memory now (memstore.vectors.hot), so vec0 serves partitions
# under hot.MIN_ROWS rows, where 128 costs a few chunks more per query.
# Users hold far fewer memories than messages (bench vectors, 100 users x 100
# messages: a few memories each, one 128-slot chunk apiece, 1.96 KB per
# message of L1 vector chunks), so L1 chunks are smaller still.
CHUNK_SIZE = {"l0": 128, "l1": 32}


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


def ddl(table: str, kind: str, dims: int) -> str:
    """The sqlite-vec table of a space (PostgreSQL: ``pg.ddl``)."""
    return (
        f'CREATE VIRTUAL TABLE IF NOT EXISTS "{table}" USING vec0({_KIND_COLUMNS[kind]}, '
        f"embedding float[{dims}] distance_metric=cosine, chunk_size={CHUNK_SIZE[kind]})"
    )


def _space(r: Any) -> Space:
    """A space from a row of ``_SELECT`` (its columns in that order)."""
    return Space(r[0], r[1], r[2], int(r[3]), r[4], int(r[5]), bool(r[6]), int(r[7]), int(r[8]))


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
    'SELECT name, kind, model_id, dims, table_name, "cursor", ready, epoch, rewrites '
    "FROM vector_spaces"
)


def get_space(conn: Connection, kind: str, model_id: str) -> Space | None:
    sql = driver_sql(conn, _SELECT + " WHERE name = ?")
    rows = driver_rows(conn, sql, (space_name(kind, model_id),))
    return _space(rows[0]) if rows else None


def list_spaces(conn: Connection) -> list[Space]:
    return [_space(r) for r in driver_rows(conn, _SELECT + " ORDER BY name")]


def ensure_space(conn: Connection, kind: str, model_id: str, dims: int, now_iso: str) -> Space:
    if kind not in _KIND_COLUMNS:
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
    table = _table_name(kind, model_id, dims)
    _create(conn, table, kind, dims)
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
            _create(conn, space.table_name, kind, space.dims)
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


def _create(conn: Connection, table: str, kind: str, dims: int) -> None:
    if conn.dialect.name == "postgresql":
        pg.create(conn, table, kind, dims)
    else:
        conn.execute(text(ddl(table, kind, dims)))


def mark_ready(conn: Connection, sp: Space) -> None:
    """The space was filled once: vector search may use it (unless a reset
    moved its epoch on since ``sp`` was read)."""
    conn.execute(
        update(vector_spaces)
        .where(vector_spaces.c.name == sp.name, vector_spaces.c.epoch == sp.epoch)
        .values(ready=1)
    )


def current_epoch(conn: Connection, name: str) -> int | None:
    row = conn.execute(select(vector_spaces.c.epoch).where(vector_spaces.c.name == name)).first()
    return None if row is None else int(row[0])


def _columns(kind: str) -> tuple[str, ...]:
    return ("user_id", "session_id") if kind == "l0" else ("user_id", "mtype", "scene")


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

    Each space gets a new vec0 table, filled by point lookups in the old one,
    which is dropped: vec0 only flags deleted rows, so copying out is the way
    to leave no erased vector's bytes in its chunks. No text is embedded again.
    PostgreSQL does the same in one INSERT ... SELECT (``pg.copy_moved``).
    """
    dropped = 0
    for sp in list_spaces(conn):
        if sp.kind != kind:
            continue
        epoch = sp.epoch + 1
        table = f"{_table_name(kind, sp.model_id, sp.dims)}_{epoch}"
        if conn.dialect.name == "postgresql":
            before = pg.count(conn, sp.table_name)
            conn.execute(text(f'DROP TABLE IF EXISTS "{table}"'))
            dropped += before - pg.copy_moved(conn, sp.table_name, table, kind, sp.dims, moved)
            _carry_done(conn, sp, moved, table, epoch)
            continue
        # vec0's own rowid table: a count(*) on vec0 would read every vector.
        dropped += int(
            conn.execute(text(f'SELECT count(*) FROM "{sp.table_name}_rowids"')).scalar_one()
        )
        conn.execute(text(f'DROP TABLE IF EXISTS "{table}"'))
        conn.execute(text(ddl(table, kind, sp.dims)))
        cols = _columns(kind)
        read = text(f'SELECT {", ".join(cols)}, embedding FROM "{sp.table_name}" WHERE rowid = :i')
        names = ", ".join(["rowid", *cols, "embedding"])
        marks = ", ".join([":rowid", *(f":{c}" for c in cols), ":embedding"])
        ins = text(f'INSERT INTO "{table}"({names}) VALUES ({marks})')
        batch: list[dict[str, Any]] = []
        for old, new in sorted(moved.items()):
            row = conn.execute(read, {"i": old}).first()
            if row is None:
                continue
            dropped -= 1
            batch.append({"rowid": new, **dict(zip([*cols, "embedding"], row, strict=True))})
            if len(batch) >= 500:
                conn.execute(ins, batch)
                batch = []
        if batch:
            conn.execute(ins, batch)
        conn.execute(text(f'DROP TABLE IF EXISTS "{sp.table_name}"'))
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
