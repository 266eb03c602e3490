"""Per-user BM25 statistics for keyword search

Keyword search ranks a user's messages with the user's own statistics
(``memstore.search.bm25``) instead of FTS5's ``bm25()``, whose term weights
were counted over every user's messages. Besides FTS5's per-message lengths
it needs the terms each message holds more than once (the new
``l0_term_repeats``, keyed like ``l0_fts``) and per user the message count
and token total (``l0_user_slots.docs``, ``tokens``). All are backfilled
from the stored text, on both engines.

Revision ID: 0014_keyword_stats
Revises: 0012_search_storage
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from memstore._migrations.frozen.fts import document_columns
from memstore._migrations.frozen.stem import stem_text
from memstore._migrations.frozen.terms import document_stats

revision: str = "0014_keyword_stats"
down_revision: str | None = "0012_search_storage"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_BATCH = 2000
# l0_fts keys: slot << 40 | message id (fixed here: a migration keeps its meaning).
_SHIFT = 40


def _backfill(conn: sa.Connection) -> None:
    totals: dict[str, list[int]] = {}
    last = -1
    while True:
        rows = conn.execute(
            sa.text(
                "SELECT m.id, m.user_id, s.slot, m.text FROM l0_messages m "
                "JOIN l0_user_slots s ON s.user_id = m.user_id "
                "WHERE m.id > :last ORDER BY m.id LIMIT :n"
            ),
            {"last": last, "n": _BATCH},
        ).all()
        if not rows:
            break
        last = int(rows[-1][0])
        repeated = []
        for mid, user, slot, body in rows:
            latin, cjk = document_columns(str(body))
            length, repeats = document_stats(latin, cjk, stem_text(latin))
            if repeats is not None:
                repeated.append({"k": (int(slot) << _SHIFT) | int(mid), "r": repeats})
            total = totals.setdefault(str(user), [0, 0])
            total[0] += 1
            total[1] += length
        if repeated:
            conn.execute(
                sa.text("INSERT INTO l0_term_repeats (key, repeats) VALUES (:k, :r)"), repeated
            )
    if totals:
        conn.execute(
            sa.text("UPDATE l0_user_slots SET docs = :d, tokens = :t WHERE user_id = :u"),
            [{"u": u, "d": d, "t": t} for u, (d, t) in totals.items()],
        )


def upgrade() -> None:
    op.create_table(
        "l0_term_repeats",
        sa.Column(
            "key",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=False,
            nullable=False,
        ),
        sa.Column("repeats", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_l0_term_repeats")),
    )
    # Plain ADD COLUMNs (no batch copy of the table): nothing else changes.
    op.add_column(
        "l0_user_slots", sa.Column("docs", sa.Integer(), server_default="0", nullable=False)
    )
    op.add_column(
        "l0_user_slots", sa.Column("tokens", sa.Integer(), server_default="0", nullable=False)
    )
    _backfill(op.get_bind())


def downgrade() -> None:
    with op.batch_alter_table("l0_user_slots") as batch:
        batch.drop_column("tokens")
        batch.drop_column("docs")
    op.drop_table("l0_term_repeats")
