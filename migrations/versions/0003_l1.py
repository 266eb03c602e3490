"""L1 memories with FTS5, active derivation generations

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from memstore._migrations.frozen.ddl import create_fts, drop_fts

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "l1_memories",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("memory_id", sa.Text(), nullable=False),
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("type", sa.Text(), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("scene_name", sa.Text(), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("content_hash", sa.Text(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("origin", sa.Text(), nullable=False),
        sa.Column("source_message_ids", sa.Text(), nullable=False),
        sa.Column("activity_start", sa.Text(), nullable=True),
        sa.Column("activity_end", sa.Text(), nullable=True),
        sa.Column("occurred_at", sa.Text(), nullable=False),
        sa.Column("created_position", sa.Integer(), nullable=False),
        sa.Column("updated_position", sa.Integer(), nullable=False),
        sa.Column("retired_by", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_l1_memories")),
        sa.UniqueConstraint("memory_id", name=op.f("uq_l1_memories_memory_id")),
    )
    op.create_index(
        "ix_l1_memories_user_id_generation_status",
        "l1_memories",
        ["user_id", "generation", "status"],
    )
    create_fts("l1_fts", ("text", "cjk"))
    op.create_table(
        "active_generations",
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("user_id", name=op.f("pk_active_generations")),
    )


def downgrade() -> None:
    op.drop_table("active_generations")
    drop_fts("l1_fts")
    op.drop_index("ix_l1_memories_user_id_generation_status", table_name="l1_memories")
    op.drop_table("l1_memories")
