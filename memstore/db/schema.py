"""Table definitions (SQLAlchemy Core). The Alembic revisions create exactly these.

Virtual tables (FTS5, sqlite-vec vec0) and their shadow tables are created by
raw SQL in migrations or at run time, and ``include_name`` keeps autogenerate
away from them: they cannot be reflected, renamed or batch-altered safely.
"""

from __future__ import annotations

from sqlalchemy import (
    Column,
    Index,
    Integer,
    MetaData,
    Table,
    Text,
    UniqueConstraint,
    text,
)

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING)

# Prefixes of tables that are virtual or belong to a virtual table; never
# touched by autogenerate.
VIRTUAL_PREFIXES = ("l0_fts", "l1_fts", "vec_", "apscheduler")


def include_name(name: str | None, type_: str, parent_names: object) -> bool:
    """Alembic filter: autogenerate must neither drop nor recreate virtual tables,
    their shadow tables, or APScheduler's job table (it manages its own)."""
    return not (type_ == "table" and name is not None and name.startswith(VIRTUAL_PREFIXES))

# --- the log ---------------------------------------------------------------

events = Table(
    "events",
    metadata,
    Column("position", Integer, primary_key=True, autoincrement=False),
    Column("event_id", Text, nullable=False, unique=True),
    Column("stream", Text, nullable=False),
    Column("seq", Integer, nullable=False),
    Column("type", Text, nullable=False),
    Column("version", Integer, nullable=False),
    Column("user_id", Text, nullable=False),
    Column("payload", Text, nullable=False),
    Column("occurred_at", Text, nullable=False),
    Column("recorded_at", Text, nullable=False),
    Column("idempotency_key", Text, nullable=True),
    Column("causation_id", Text, nullable=True),
    Column("correlation_id", Text, nullable=True),
    UniqueConstraint("stream", "seq"),
    Index("ix_events_type_position", "type", "position"),
    Index("ix_events_user_id_position", "user_id", "position"),
    Index(
        "ix_events_idempotency_key",
        "idempotency_key",
        unique=True,
        sqlite_where=text("idempotency_key IS NOT NULL"),
    ),
)

projection_checkpoints = Table(
    "projection_checkpoints",
    metadata,
    Column("name", Text, primary_key=True),
    Column("position", Integer, nullable=False, server_default="0"),
    Column("version", Integer, nullable=False, server_default="0"),
)

# A projection used by tests and the event-log benchmark: counts per type/user.
event_counts = Table(
    "event_counts",
    metadata,
    Column("type", Text, primary_key=True),
    Column("user_id", Text, primary_key=True),
    Column("n", Integer, nullable=False),
    Column("last_position", Integer, nullable=False),
)

__all__ = [
    "NAMING",
    "VIRTUAL_PREFIXES",
    "event_counts",
    "include_name",
    "events",
    "metadata",
    "projection_checkpoints",
]
