"""Derivation state, L2 scenes, L3 persona

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "l1_cursors",
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.Column("session_id", sa.Text(), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("cursor_position", sa.Integer(), nullable=False),
        sa.Column("runs", sa.Integer(), nullable=False),
        sa.Column("last_run_id", sa.Text(), nullable=False),
        sa.Column("updated_position", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("user_id", "session_id", "generation", name=op.f("pk_l1_cursors")),
    )
    op.create_table(
        "derive_generations",
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("from_layer", sa.Text(), nullable=False),
        sa.Column("base_generation", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("started_position", sa.Integer(), nullable=False),
        sa.Column("activated_position", sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint("user_id", "generation", name=op.f("pk_derive_generations")),
    )
    op.create_table(
        "derive_failures",
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.Column("stage", sa.Text(), nullable=False),
        sa.Column("session_id", sa.Text(), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=False),
        sa.Column("updated_position", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("user_id", "stage", "session_id", name=op.f("pk_derive_failures")),
    )
    op.create_table(
        "l2_scenes",
        sa.Column("scene_id", sa.Text(), nullable=False),
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("heat", sa.Integer(), nullable=False),
        sa.Column("memory_ids", sa.Text(), nullable=False),
        sa.Column("created_position", sa.Integer(), nullable=False),
        sa.Column("updated_position", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("scene_id", name=op.f("pk_l2_scenes")),
    )
    op.create_index("ix_l2_scenes_user_id_generation", "l2_scenes", ["user_id", "generation"])
    op.create_table(
        "l2_state",
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("memory_cursor", sa.Integer(), nullable=False),
        sa.Column("runs", sa.Integer(), nullable=False),
        sa.Column("refresh_requested", sa.Integer(), nullable=False),
        sa.Column("last_run_id", sa.Text(), nullable=False),
        sa.Column("updated_position", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("user_id", "generation", name=op.f("pk_l2_state")),
    )
    op.create_table(
        "l3_persona",
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("persona", sa.Text(), nullable=False),
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("deriver", sa.Text(), nullable=False),
        sa.Column("model", sa.Text(), nullable=False),
        sa.Column("prompt_version", sa.Text(), nullable=False),
        sa.Column("trigger", sa.Text(), nullable=False),
        sa.Column("updated_position", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("user_id", "generation", name=op.f("pk_l3_persona")),
    )


def downgrade() -> None:
    op.drop_table("l3_persona")
    op.drop_table("l2_state")
    op.drop_index("ix_l2_scenes_user_id_generation", table_name="l2_scenes")
    op.drop_table("l2_scenes")
    op.drop_table("derive_failures")
    op.drop_table("derive_generations")
    op.drop_table("l1_cursors")
