"""Where the keyword index of messages has got to (SQLite)

On SQLite a capture no longer writes its messages' FTS5 rows, term repeats
and BM25 totals in its own transaction when a background indexer runs: the
indexer writes them a moment later, and keyword search scores the messages
not yet indexed from their text (memstore.derive.messages.keywords).
``l0_keyword_cursor.through`` is the highest ``l0_messages.id`` whose keyword
rows are written; every message up to it is indexed, none after it.

The table exists on PostgreSQL too (one schema) but stays empty there:
PostgreSQL writes its ``tsvector`` rows with the messages.

Upgrade: every stored message is indexed already (captures wrote their rows
inline until now), so the cursor starts at the highest id. Downgrade: the
code before this revision never indexes a message it did not capture itself,
so when messages are still waiting the L0 projection's checkpoint is dropped
and the next open rebuilds it from the log; then the table goes.

Revision ID: 0025_keyword_cursor
Revises: 0024_int8
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0025_keyword_cursor"
down_revision: str | None = "0024_int8"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "l0_keyword_cursor",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column(
            "through",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            nullable=False,
            server_default="0",
        ),
    )
    if op.get_bind().dialect.name == "sqlite":
        # PostgreSQL writes its keyword rows with the messages: no cursor.
        op.execute(
            "INSERT INTO l0_keyword_cursor (id, through) "
            "SELECT 1, coalesce(max(id), 0) FROM l0_messages"
        )


def downgrade() -> None:
    conn = op.get_bind()
    waiting = conn.execute(
        sa.text(
            "SELECT count(*) FROM l0_messages m, l0_keyword_cursor c WHERE m.id > c.through"
        )
    ).scalar_one()
    if waiting:
        conn.execute(sa.text("DELETE FROM projection_checkpoints WHERE name = 'l0_messages'"))
    op.drop_table("l0_keyword_cursor")
