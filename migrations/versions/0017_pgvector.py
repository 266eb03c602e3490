"""pgvector on PostgreSQL: vector spaces there too

Until this revision a store on PostgreSQL ran keyword-only (no embedder, no
vector space). From here on each space is a table with a ``vector(dims)``
column, created by the indexer when it first meets an embedding model
(memstore.db.backend.pgvector), like the vec0 tables on SQLite; this revision only
makes sure the ``vector`` type exists. SQLite: nothing to do (sqlite-vec is
loaded per connection).

Downgrade drops the PostgreSQL vector tables and their bookkeeping (the
earlier code cannot read them; the vectors are derived data, re-embedded on
a later upgrade). It leaves the extension installed: other schemas of the
database may use it, and an unused extension costs nothing.

Revision ID: 0017_pgvector
Revises: 0014_keyword_stats
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from memstore._migrations.frozen import ddl

revision: str = "0017_pgvector"
down_revision: str | None = "0014_keyword_stats"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    if not ddl.is_postgres():
        return
    op.execute("CREATE EXTENSION IF NOT EXISTS vector")


def downgrade() -> None:
    if not ddl.is_postgres():
        return
    conn = op.get_bind()
    for (table,) in conn.execute(sa.text("SELECT table_name FROM vector_spaces")).all():
        op.execute(f'DROP TABLE IF EXISTS "{table}"')
    for table in ("vector_index", "vector_quarantine", "vector_spaces"):
        op.execute(f"DELETE FROM {table}")
