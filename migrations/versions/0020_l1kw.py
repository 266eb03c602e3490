"""Per-user keyword search of memories (issues 10 and 14)

L1's counterpart of ``0012_search_storage`` and ``0014_keyword_stats``:
``l1_fts`` rowids become ``slot << 40 | l1_memories.id`` with one slot per
user in the new ``l1_user_slots`` (in order of the user's first memory, as
the L1 projection hands them out), so a keyword match reads one user's
rowid range; ``l1_user_slots.docs`` / ``tokens`` and the new
``l1_term_repeats`` carry the user's BM25 statistics
(``memstore.search.bm25_memories``). All are filled from the rows ``l1_fts``
holds, on both engines. The new tables belong to the L1 projection, so the
next open also rebuilds it from the log (the same rows).

Downgrade puts the plain ``l1_memories.id`` rowids back and drops both tables.

Revision ID: 0020_l1kw
Revises: 0019_storage
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from memstore._migrations.frozen.terms import document_stats

revision: str = "0020_l1kw"
down_revision: str | None = "0019_storage"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_BATCH = 2000
# Fixed here rather than imported: a migration must keep meaning what it meant.
_SHIFT = 40
_LOW = (1 << _SHIFT) - 1


def _rekey(conn: sa.Connection) -> None:
    """Every l1_fts row to its user's range. Old keys are below 2**40 and new
    ones above, so none collide on the way (FTS5 moves a row whose rowid an
    UPDATE changes; PostgreSQL's l1_fts is a plain table)."""
    conn.exec_driver_sql("DELETE FROM l1_fts WHERE rowid NOT IN (SELECT id FROM l1_memories)")
    conn.exec_driver_sql(
        f"UPDATE l1_fts SET rowid = (SELECT (CAST(s.slot AS BIGINT) << {_SHIFT}) | m.id "
        "FROM l1_memories m JOIN l1_user_slots s ON s.user_id = m.user_id "
        "WHERE m.id = l1_fts.rowid)"
    )


def _backfill(conn: sa.Connection) -> None:
    """Repeats and per-user counts from the indexed columns themselves."""
    totals: dict[int, list[int]] = {}
    last = -1
    while True:
        rows = conn.execute(
            sa.text(
                "SELECT rowid, text, cjk, stem FROM l1_fts WHERE rowid > :last "
                "ORDER BY rowid LIMIT :n"
            ),
            {"last": last, "n": _BATCH},
        ).all()
        if not rows:
            break
        last = int(rows[-1][0])
        repeated = []
        for key, latin, cjk, stem in rows:
            length, repeats = document_stats(str(latin), str(cjk), str(stem))
            if repeats is not None:
                repeated.append({"k": int(key), "r": repeats})
            total = totals.setdefault(int(key) >> _SHIFT, [0, 0])
            total[0] += 1
            total[1] += length
        if repeated:
            conn.execute(
                sa.text("INSERT INTO l1_term_repeats (key, repeats) VALUES (:k, :r)"), repeated
            )
    if totals:
        conn.execute(
            sa.text("UPDATE l1_user_slots SET docs = :d, tokens = :t WHERE slot = :s"),
            [{"s": s, "d": d, "t": t} for s, (d, t) in totals.items()],
        )


def upgrade() -> None:
    op.create_table(
        "l1_user_slots",
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.Column("slot", sa.Integer(), nullable=False),
        sa.Column("docs", sa.Integer(), server_default="0", nullable=False),
        sa.Column("tokens", sa.Integer(), server_default="0", nullable=False),
        sa.PrimaryKeyConstraint("user_id", name=op.f("pk_l1_user_slots")),
        sa.UniqueConstraint("slot", name=op.f("uq_l1_user_slots_slot")),
    )
    op.create_table(
        "l1_term_repeats",
        sa.Column(
            "key",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=False,
            nullable=False,
        ),
        sa.Column("repeats", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_l1_term_repeats")),
    )
    conn = op.get_bind()
    # Slots in order of each user's first memory (any status): the projection
    # gives a user a slot with their first memory when it replays the log.
    conn.exec_driver_sql(
        "INSERT INTO l1_user_slots (user_id, slot) "
        "SELECT user_id, row_number() OVER (ORDER BY min(id)) FROM l1_memories GROUP BY user_id"
    )
    _rekey(conn)
    _backfill(conn)
    if conn.dialect.name == "sqlite":
        # The moved rows were written as deletes and inserts: merge the segments.
        conn.exec_driver_sql("INSERT INTO l1_fts(l1_fts) VALUES ('optimize')")


def downgrade() -> None:
    conn = op.get_bind()
    conn.exec_driver_sql(f"UPDATE l1_fts SET rowid = rowid & {_LOW}")
    if conn.dialect.name == "sqlite":
        conn.exec_driver_sql("INSERT INTO l1_fts(l1_fts) VALUES ('optimize')")
    op.drop_table("l1_term_repeats")
    op.drop_table("l1_user_slots")
