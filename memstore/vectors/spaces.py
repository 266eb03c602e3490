"""Vector spaces: one sqlite-vec ``vec0`` table per (kind, embedding model).

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

from sqlalchemy import Connection, Row, select, text, update

from memstore.db.schema import vector_index, vector_quarantine, vector_spaces
from memstore.errors import ConfigError

# Extra vec0 columns per kind: metadata columns can be filtered inside KNN.
_KIND_COLUMNS = {
    "l0": "user_id text partition key, session_id text",
    "l1": "user_id text partition key, mtype text, scene text",
}
KINDS = tuple(_KIND_COLUMNS)

# vec0 allocates a whole chunk per partition (user). The default of 1024 costs
# 1.5 MB per user at 384-d (100 users of 5 messages: 158 MB); measured here on
# a 100k-row table, 256 kept a 50k-row partition's KNN within ~10% of 1024
# (69 vs 61 ms) at a third less space; 64 was 40% slower.
CHUNK_SIZE = 256


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


def _ddl(table: str, kind: str, dims: int) -> str:
    return (
        f'CREATE VIRTUAL TABLE IF NOT EXISTS "{table}" USING vec0({_KIND_COLUMNS[kind]}, '
        f"embedding float[{dims}] distance_metric=cosine, chunk_size={CHUNK_SIZE})"
    )


def _space(r: Row[Any]) -> Space:
    return Space(
        r.name,
        r.kind,
        r.model_id,
        int(r.dims),
        r.table_name,
        int(r.cursor),
        bool(r.ready),
        int(r.epoch),
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


def get_space(conn: Connection, kind: str, model_id: str) -> Space | None:
    row = conn.execute(
        select(vector_spaces).where(vector_spaces.c.name == space_name(kind, model_id))
    ).first()
    return None if row is None else _space(row)


def list_spaces(conn: Connection) -> list[Space]:
    return [_space(r) for r in conn.execute(select(vector_spaces).order_by(vector_spaces.c.name))]


def ensure_space(conn: Connection, kind: str, model_id: str, dims: int, now_iso: str) -> Space:
    if kind not in _KIND_COLUMNS:
        raise ConfigError(f"unknown vector kind {kind!r}")
    if dims <= 0 or dims > 8192:
        raise ConfigError(f"embedding dimension {dims} is out of range for sqlite-vec")
    existing = get_space(conn, kind, model_id)
    if existing is not None:
        if existing.dims != dims:
            raise ConfigError(
                f"embedder {model_id!r} now reports {dims} dimensions, its vectors have "
                f"{existing.dims}; give the changed model a new name"
            )
        return existing
    table = _table_name(kind, model_id, dims)
    conn.execute(text(_ddl(table, kind, dims)))
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
            conn.execute(text(_ddl(space.table_name, kind, space.dims)))
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


def current_epoch(conn: Connection, name: str) -> int | None:
    row = conn.execute(select(vector_spaces.c.epoch).where(vector_spaces.c.name == name)).first()
    return None if row is None else int(row[0])
