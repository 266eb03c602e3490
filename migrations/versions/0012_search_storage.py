"""Per-user keyword search and one copy of each message text

``l0_fts`` becomes contentless (``content=''``): FTS5 kept its own copy of
every message's three columns, although search reads the text from
``l0_messages``. Its rowids become ``slot << 40 | l0_messages.id``
(``memstore.l0.projection.fts_key``) with one slot per user in the new
``l0_user_slots``, so a keyword match can be limited to one user's rowid
range instead of ranking every user's messages before the user filter.

Revision ID: 0012_search_storage
Revises: 0013
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from memstore._migrations.frozen import ddl
from memstore._migrations.frozen.fts import document_columns
from memstore._migrations.frozen.stem import stem_text

revision: str = "0012_search_storage"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TOKENIZE = "tokenize = 'unicode61 remove_diacritics 2'"
_BATCH = 2000
# Fixed here rather than imported: a migration must keep meaning what it meant.
_SHIFT = 40


def _refill(conn: sa.Connection, *, keyed: bool) -> None:
    """Create l0_fts anew from l0_messages: contentless with per-user keys
    (``keyed``) or, going down, the earlier table with its own content."""
    content = ", content=''" if keyed else ""
    conn.exec_driver_sql(
        f"CREATE VIRTUAL TABLE l0_fts_new USING fts5(text, cjk, stem{content}, {_TOKENIZE})"
    )
    key = f"(s.slot << {_SHIFT}) | m.id" if keyed else "m.id"
    join = "JOIN l0_user_slots s ON s.user_id = m.user_id " if keyed else ""
    last = -1
    while True:
        rows = conn.exec_driver_sql(
            f"SELECT m.id, {key}, m.text FROM l0_messages m {join}"
            "WHERE m.id > ? ORDER BY m.id LIMIT ?",
            (last, _BATCH),
        ).all()
        if not rows:
            break
        last = int(rows[-1][0])
        values = []
        for _, rowid, body in rows:
            latin, cjk = document_columns(str(body))
            values.append((int(rowid), latin, cjk, stem_text(latin)))
        conn.exec_driver_sql(
            "INSERT INTO l0_fts_new(rowid, text, cjk, stem) VALUES (?, ?, ?, ?)", values
        )
    conn.exec_driver_sql("DROP TABLE l0_fts")
    conn.exec_driver_sql("ALTER TABLE l0_fts_new RENAME TO l0_fts")


def upgrade() -> None:
    op.create_table(
        "l0_user_slots",
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.Column("slot", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("user_id", name=op.f("pk_l0_user_slots")),
        sa.UniqueConstraint("slot", name=op.f("uq_l0_user_slots_slot")),
    )
    conn = op.get_bind()
    # Slots in order of each user's first message, as the projection hands
    # them out when it replays the log.
    conn.exec_driver_sql(
        "INSERT INTO l0_user_slots (user_id, slot) "
        "SELECT user_id, row_number() OVER (ORDER BY min(id)) FROM l0_messages GROUP BY user_id"
    )
    if ddl.is_postgres():
        # A plain table there (frozen.ddl): re-key the rows in place; the
        # new keys are all >= 2**40 and the old ones below, so none collide.
        conn.exec_driver_sql(
            f"UPDATE l0_fts f SET rowid = (s.slot::bigint << {_SHIFT}) | f.rowid "
            "FROM l0_messages m JOIN l0_user_slots s ON s.user_id = m.user_id "
            "WHERE m.id = f.rowid"
        )
        return
    _refill(conn, keyed=True)


def downgrade() -> None:
    conn = op.get_bind()
    if ddl.is_postgres():
        conn.exec_driver_sql(f"UPDATE l0_fts SET rowid = rowid & {(1 << _SHIFT) - 1}")
    else:
        _refill(conn, keyed=False)
    op.drop_table("l0_user_slots")
