"""core: the event log, projection checkpoints, event counts

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "events",
        sa.Column("position", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("event_id", sa.Text(), nullable=False),
        sa.Column("stream", sa.Text(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("type", sa.Text(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("occurred_at", sa.Text(), nullable=False),
        sa.Column("recorded_at", sa.Text(), nullable=False),
        sa.Column("idempotency_key", sa.Text(), nullable=True),
        sa.Column("causation_id", sa.Text(), nullable=True),
        sa.Column("correlation_id", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("position", name=op.f("pk_events")),
        sa.UniqueConstraint("event_id", name=op.f("uq_events_event_id")),
        sa.UniqueConstraint("stream", "seq", name=op.f("uq_events_stream_seq")),
    )
    op.create_index("ix_events_type_position", "events", ["type", "position"])
    op.create_index("ix_events_user_id_position", "events", ["user_id", "position"])
    op.create_index(
        "ix_events_idempotency_key",
        "events",
        ["idempotency_key"],
        unique=True,
        sqlite_where=sa.text("idempotency_key IS NOT NULL"),
        postgresql_where=sa.text("idempotency_key IS NOT NULL"),
    )
    op.create_table(
        "projection_checkpoints",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("position", sa.Integer(), server_default="0", nullable=False),
        sa.Column("version", sa.Integer(), server_default="0", nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_projection_checkpoints")),
    )
    op.create_table(
        "event_counts",
        sa.Column("type", sa.Text(), nullable=False),
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.Column("last_position", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("type", "user_id", name=op.f("pk_event_counts")),
    )


def downgrade() -> None:
    op.drop_table("event_counts")
    op.drop_table("projection_checkpoints")
    op.drop_index("ix_events_idempotency_key", table_name="events")
    op.drop_index("ix_events_user_id_position", table_name="events")
    op.drop_index("ix_events_type_position", table_name="events")
    op.drop_table("events")
