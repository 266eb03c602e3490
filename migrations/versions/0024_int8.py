"""Record how each vector space stores its vectors (float32 or int8)

``vector_spaces.element`` is added with ``float32`` for every existing space:
their tables keep their vectors and work unchanged. New spaces on SQLite
store int8 (``embedding.vector_element``; memstore.db.elements), and an
existing store is converted only when asked (``memstore vectors convert``):
rewriting every vector on open would make the upgrade of a large store slow
and lose precision nobody asked to give up.

Downgrade converts int8 spaces back to float32 (the code before this
revision reads every vector table as float32) and drops the column.

Revision ID: 0024_int8
Revises: 0023_scrub
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0024_int8"
down_revision: str | None = "0023_scrub"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "vector_spaces",
        sa.Column("element", sa.Text(), nullable=False, server_default="float32"),
    )


# The vec0 layout at this revision (memstore.db.backend.sqlite then).
_COLUMNS = {
    "l0": ("user_id text partition key, session_id text", ("user_id", "session_id"), 128),
    "l1": ("user_id text partition key, mtype text, scene text", ("user_id", "mtype", "scene"), 32),
}


def _to_float32(conn: sa.Connection, name: str, kind: str, dims: int, table: str) -> None:
    """An int8 space's vectors into a float32 table (unit length), under a
    new table name and epoch, as memstore.vectors.spaces.convert does."""
    import numpy as np

    decl, cols, chunk = _COLUMNS[kind]
    new = f"{table}_f32"  # int8 tables never end so (convert names them by epoch)
    conn.execute(sa.text(f'DROP TABLE IF EXISTS "{new}"'))
    conn.execute(
        sa.text(
            f'CREATE VIRTUAL TABLE "{new}" USING vec0({decl}, embedding float[{dims}] '
            f"distance_metric=cosine, chunk_size={chunk})"
        )
    )
    names = ", ".join(["rowid", *cols, "embedding"])
    marks = ", ".join(f":{c}" for c in ("rowid", *cols, "embedding"))
    rows = conn.execute(sa.text(f'SELECT {names} FROM "{table}"')).all()
    out = []
    for r in rows:
        v = np.frombuffer(bytes(r[-1]), dtype=np.int8).astype(np.float32)
        norm = float(np.linalg.norm(v)) or 1.0
        out.append(
            {
                **dict(zip(("rowid", *cols), r[:-1], strict=True)),
                "embedding": (v / norm).astype("<f4").tobytes(),
            }
        )
    if out:
        conn.execute(sa.text(f'INSERT INTO "{new}"({names}) VALUES ({marks})'), out)
    conn.execute(sa.text(f'DROP TABLE "{table}"'))
    conn.execute(
        sa.text("UPDATE vector_spaces SET table_name = :t, epoch = epoch + 1 WHERE name = :n"),
        {"t": new, "n": name},
    )


def downgrade() -> None:
    conn = op.get_bind()
    int8 = conn.execute(
        sa.text("SELECT name, kind, dims, table_name FROM vector_spaces WHERE element = 'int8'")
    ).all()
    for name, kind, dims, table in int8:
        _to_float32(conn, name, kind, int(dims), table)
    with op.batch_alter_table("vector_spaces") as batch:
        batch.drop_column("element")
