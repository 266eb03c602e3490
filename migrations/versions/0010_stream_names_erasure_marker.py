"""Escaped stream names; the pending erasure-compaction marker

Stream names join their parts with "/" and now percent-escape "%" and "/"
inside a part (``memstore.events.log.stream_name``), so user "a" session
"b/s1" and user "a/b" session "s1" no longer share ``l0/a/b/s1``. Only
streams of ids containing "%" or "/" change name; the rest are untouched.

Revision ID: 0010
Revises: 0007
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from memstore._migrations.frozen.ddl import is_postgres

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TMP = "~0010~"


def _enc(col: str) -> str:
    return f"replace(replace({col}, '%', '%25'), '/', '%2F')"


_SESSION = "json_extract(payload, '$.session_id')"
# (prefix, unescaped name, escaped name) of the two per-id stream families.
_FAMILIES = (
    (
        "l0",
        f"'l0/' || user_id || '/' || {_SESSION}",
        f"'l0/' || {_enc('user_id')} || '/' || {_enc(_SESSION)}",
    ),
    ("derive", "'derive/' || user_id", f"'derive/' || {_enc('user_id')}"),
)


def upgrade() -> None:
    op.create_table(
        "erasure_compaction",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("requested_at", sa.Text(), nullable=False),
        sa.Column("tombstone_position", sa.Integer(), nullable=False),
        sa.Column("vacuumed", sa.Integer(), server_default="0", nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_erasure_compaction")),
    )
    if is_postgres():
        return  # no old stream names there: PostgreSQL databases start at this version
    for prefix, plain, escaped in _FAMILIES:
        where = f"stream LIKE '{prefix}/%' AND stream = {plain} AND {escaped} <> {plain}"
        # Via a temporary prefix: a renamed stream may equal another row's old
        # name (an id that literally contained "%2F"), and SQLite checks the
        # unique (stream, seq) constraint row by row.
        op.execute(f"UPDATE events SET stream = '{_TMP}' || ({escaped}) WHERE {where}")
        op.execute(
            f"UPDATE events SET stream = substr(stream, {len(_TMP) + 1}) "
            f"WHERE stream LIKE '{_TMP}%'"
        )


def downgrade() -> None:
    # Back to unescaped names. Where two streams would merge into one name
    # with clashing sequence numbers, the row keeps its escaped name
    # (projections read user_id and payload, never the stream, so nothing is
    # lost; only ``read_stream`` by the old name misses it).
    for prefix, plain, escaped in _FAMILIES:
        if is_postgres():
            break  # escaped names are what this version writes there; keep them
        where = f"stream LIKE '{prefix}/%' AND stream = {escaped} AND {escaped} <> {plain}"
        op.execute(f"UPDATE OR IGNORE events SET stream = {plain} WHERE {where}")
    op.drop_table("erasure_compaction")
