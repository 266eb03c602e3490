"""One stored copy of each vector; smaller vec0 chunks

vec0 becomes the one stored copy of each vector: the indexer no
longer writes ``embedding_cache``, rebuilds keep vec0 rows, erasure carries
them over. This revision

- adds ``vector_spaces.rewrites`` (in-memory copies of large partitions reload
  when a vector is written below the space's cursor);
- copies every vec0 table into one with smaller chunks (128 slots for
  messages, 32 for memories; 256-slot chunks were 39% full at 100 users x
  100 messages), without embedding anything again;
- deletes the cached embeddings when every space has caught up (each of them
  is then also in vec0); otherwise the indexer uses and deletes them as it
  catches up. Vectors of the recall null sentences are embedded again once.

Revision ID: 0013
Revises: 0010
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0011_projections"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The vec0 layout at this revision (memstore.vectors.spaces.ddl then).
_COLUMNS = {
    "l0": ("user_id text partition key, session_id text", ("user_id", "session_id")),
    "l1": ("user_id text partition key, mtype text, scene text", ("user_id", "mtype", "scene")),
}


def _copy(conn: sa.Connection, old: str, new: str, kind: str, dims: int, chunk: int) -> None:
    decl, cols = _COLUMNS[kind]
    conn.execute(sa.text(f'DROP TABLE IF EXISTS "{new}"'))
    conn.execute(
        sa.text(
            f'CREATE VIRTUAL TABLE "{new}" USING vec0({decl}, embedding float[{dims}] '
            f"distance_metric=cosine, chunk_size={chunk})"
        )
    )
    names = ", ".join(["rowid", *cols, "embedding"])
    conn.execute(sa.text(f'INSERT INTO "{new}"({names}) SELECT {names} FROM "{old}"'))
    conn.execute(sa.text(f'DROP TABLE "{old}"'))


def _caught_up(conn: sa.Connection) -> bool:
    last = conn.execute(sa.text("SELECT coalesce(max(id), 0) FROM l0_messages")).scalar_one()
    spaces = conn.execute(sa.text("SELECT name, kind, cursor, ready FROM vector_spaces")).all()
    for name, kind, cursor, ready in spaces:
        if not ready:
            return False
        if kind == "l0" and cursor < last:
            return False
        if kind == "l1":
            missing = conn.execute(
                sa.text(
                    "SELECT count(*) FROM l1_memories m LEFT JOIN vector_index vi "
                    "ON vi.space = :s AND vi.source_id = m.id "
                    "AND vi.content_hash = m.content_hash "
                    "LEFT JOIN vector_quarantine q ON q.space = :s AND q.source_id = m.id "
                    "WHERE m.status = 'active' AND vi.source_id IS NULL AND q.source_id IS NULL"
                ),
                {"s": name},
            ).scalar_one()
            if missing:
                return False
    return True


def _rechunk(chunks: dict[str, int], suffix: str) -> None:
    conn = op.get_bind()
    rows = conn.execute(sa.text("SELECT name, kind, dims, table_name FROM vector_spaces")).all()
    for name, kind, dims, table in rows:
        base = table.split("__")[0]
        new = f"{base}__{suffix}"
        _copy(conn, table, new, kind, int(dims), chunks[kind])
        conn.execute(
            sa.text("UPDATE vector_spaces SET table_name = :t WHERE name = :n"),
            {"t": new, "n": name},
        )


def upgrade() -> None:
    # Plain ADD COLUMN: batch mode would copy the table, and must stay away from vec0.
    op.add_column(
        "vector_spaces",
        sa.Column("rewrites", sa.Integer(), nullable=False, server_default="0"),
    )
    _rechunk({"l0": 128, "l1": 32}, "c128")
    conn = op.get_bind()
    if _caught_up(conn):
        conn.execute(sa.text("DELETE FROM embedding_cache"))


def downgrade() -> None:
    # Vectors stay in vec0 (256-slot chunks again); older code refills the
    # embedding cache as it embeds new text.
    _rechunk({"l0": 256, "l1": 256}, "c256")
    with op.batch_alter_table("vector_spaces") as batch:
        batch.drop_column("rewrites")
