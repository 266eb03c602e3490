"""Pipeline scheduling: state projections, work queue, locks, APScheduler jobs

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "pipeline_sessions",
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.Column("session_id", sa.Text(), nullable=False),
        sa.Column("rounds_pending", sa.Integer(), nullable=False),
        sa.Column("messages_pending", sa.Integer(), nullable=False),
        sa.Column("cursor_position", sa.Integer(), nullable=False),
        sa.Column("extractions", sa.Integer(), nullable=False),
        sa.Column("last_capture_position", sa.Integer(), nullable=False),
        sa.Column("last_activity_at", sa.Text(), nullable=False),
        sa.Column("last_l1_at", sa.Text(), nullable=True),
        sa.Column("last_l1_position", sa.Integer(), nullable=True),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("last_failure_at", sa.Text(), nullable=True),
        sa.Column("ended_at", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("user_id", "session_id", name=op.f("pk_pipeline_sessions")),
    )
    op.create_table(
        "pipeline_pending",
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.Column("session_id", sa.Text(), nullable=False),
        sa.Column("position", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("rounds", sa.Integer(), nullable=False),
        sa.Column("messages", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint(
            "user_id", "session_id", "position", name=op.f("pk_pipeline_pending")
        ),
    )
    op.create_table(
        "pipeline_users",
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.Column("last_activity_at", sa.Text(), nullable=True),
        sa.Column("last_l1_at", sa.Text(), nullable=True),
        sa.Column("last_l1_position", sa.Integer(), nullable=False),
        sa.Column("last_l2_at", sa.Text(), nullable=True),
        sa.Column("last_l2_position", sa.Integer(), nullable=False),
        sa.Column("last_l3_at", sa.Text(), nullable=True),
        sa.Column("last_l3_position", sa.Integer(), nullable=False),
        sa.Column("l2_failures", sa.Integer(), nullable=False),
        sa.Column("l3_failures", sa.Integer(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("user_id", name=op.f("pk_pipeline_users")),
    )
    op.create_table(
        "pipeline_queue",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.Column("session_id", sa.Text(), nullable=False),
        sa.Column("stage", sa.Text(), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.Text(), nullable=False),
        sa.Column("run_after", sa.Text(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("claimed_by", sa.Text(), nullable=True),
        sa.Column("claimed_until", sa.Text(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_pipeline_queue")),
    )
    op.create_index(
        "ix_pipeline_queue_priority_created_at_id",
        "pipeline_queue",
        ["priority", "created_at", "id"],
    )
    op.create_index(
        "uq_pipeline_queue_open",
        "pipeline_queue",
        ["user_id", "session_id", "stage"],
        unique=True,
        sqlite_where=sa.text("claimed_by IS NULL"),
        postgresql_where=sa.text("claimed_by IS NULL"),
    )
    op.create_table(
        "pipeline_locks",
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("owner", sa.Text(), nullable=False),
        sa.Column("expires_at", sa.Text(), nullable=False),
        sa.Column("acquired_at", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_pipeline_locks")),
    )
    # APScheduler's own table, in the layout its SQLAlchemyJobStore creates
    # (it skips creation when the table exists). Created here so every process
    # can arm timers even before a scheduler ever started on this file.
    op.create_table(
        "apscheduler_jobs",
        sa.Column("id", sa.Unicode(191), nullable=False),
        sa.Column("next_run_time", sa.Float(25), nullable=True),
        sa.Column("job_state", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_apscheduler_jobs")),
    )
    op.create_index("ix_apscheduler_jobs_next_run_time", "apscheduler_jobs", ["next_run_time"])


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS apscheduler_jobs")
    op.drop_table("pipeline_locks")
    op.drop_index("uq_pipeline_queue_open", table_name="pipeline_queue")
    op.drop_index("ix_pipeline_queue_priority_created_at_id", table_name="pipeline_queue")
    op.drop_table("pipeline_queue")
    op.drop_table("pipeline_users")
    op.drop_table("pipeline_pending")
    op.drop_table("pipeline_sessions")
