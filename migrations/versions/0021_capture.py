"""An index for the work queue's next due time (idle capture)

``memstore.pipeline.queue.next_run_after`` asks for the earliest
``run_after`` of the unclaimed items. Without an index that is a scan and a
sort of every unclaimed item: 5,050 queued sessions in the 100 x 1k bench
store, about 0.85 ms each time the timer thread arms timers after a capture
that opened a session. A partial index on ``run_after`` of the unclaimed
items answers it from its first entry, on SQLite and PostgreSQL alike. No
data changes; downgrade drops the index.

Revision ID: 0021_capture
Revises: 0020_l1kw
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0021_capture"
down_revision: str | None = "0020_l1kw"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index(
        "ix_pipeline_queue_next",
        "pipeline_queue",
        ["run_after"],
        sqlite_where=sa.text("claimed_by IS NULL"),
        postgresql_where=sa.text("claimed_by IS NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_pipeline_queue_next", table_name="pipeline_queue")
