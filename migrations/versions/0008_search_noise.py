"""Word roots in FTS (l0_fts.stem, l1_fts.stem) and l0_messages.low_info, backfilled

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from memstore._migrations.frozen.ddl import is_postgres, reshape_fts_pg
from memstore._migrations.frozen.info import is_low_information
from memstore._migrations.frozen.stem import stem_text

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_FTS_TABLES = ("l0_fts", "l1_fts")
_TOKENIZE = "tokenize = 'unicode61 remove_diacritics 2'"
_BATCH = 2000


def _rebuild_fts(conn: sa.Connection, name: str, with_stem: bool) -> None:
    # FTS5 has no ADD COLUMN: copy into a new table, then swap names.
    cols = "text, cjk, stem" if with_stem else "text, cjk"
    conn.exec_driver_sql(f"CREATE VIRTUAL TABLE {name}_new USING fts5({cols}, {_TOKENIZE})")
    last = -1
    while True:
        rows = conn.exec_driver_sql(
            f"SELECT rowid, text, cjk FROM {name} WHERE rowid > ? ORDER BY rowid LIMIT ?",
            (last, _BATCH),
        ).all()
        if not rows:
            break
        last = int(rows[-1][0])
        if with_stem:
            conn.exec_driver_sql(
                f"INSERT INTO {name}_new(rowid, text, cjk, stem) VALUES (?, ?, ?, ?)",
                [(r[0], r[1], r[2], stem_text(str(r[1] or ""))) for r in rows],
            )
        else:
            conn.exec_driver_sql(
                f"INSERT INTO {name}_new(rowid, text, cjk) VALUES (?, ?, ?)",
                [(r[0], r[1], r[2]) for r in rows],
            )
    conn.exec_driver_sql(f"DROP TABLE {name}")
    conn.exec_driver_sql(f"ALTER TABLE {name}_new RENAME TO {name}")


def upgrade() -> None:
    op.add_column(
        "l0_messages", sa.Column("low_info", sa.Integer(), server_default="0", nullable=False)
    )
    if is_postgres():
        # Nothing to backfill: PostgreSQL databases start at this version.
        for name in _FTS_TABLES:
            reshape_fts_pg(name, ("text", "cjk", "stem"), add="stem")
        return
    conn = op.get_bind()
    last = -1
    while True:
        rows = conn.exec_driver_sql(
            "SELECT id, text FROM l0_messages WHERE id > ? ORDER BY id LIMIT ?", (last, _BATCH)
        ).all()
        if not rows:
            break
        last = int(rows[-1][0])
        filler = [(int(r[0]),) for r in rows if is_low_information(str(r[1]))]
        if filler:
            conn.exec_driver_sql("UPDATE l0_messages SET low_info = 1 WHERE id = ?", filler)
    for name in _FTS_TABLES:
        _rebuild_fts(conn, name, with_stem=True)


def downgrade() -> None:
    conn = op.get_bind()
    for name in _FTS_TABLES:
        if is_postgres():
            reshape_fts_pg(name, ("text", "cjk"), drop="stem")
        else:
            _rebuild_fts(conn, name, with_stem=False)
    with op.batch_alter_table("l0_messages") as batch:
        batch.drop_column("low_info")
