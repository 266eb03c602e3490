"""The storage backends: everything that differs between the engines
memstore stores in, behind one interface (``base.Backend``).

A ``Database`` carries its backend (chosen once, when the database is
opened from a path or URL: ``memstore.db.connect``); code that holds only a
connection asks :func:`of`. Nothing above ``memstore.db`` tells the engines
apart in any other way (tests/test_architecture.py checks it).
"""

from __future__ import annotations

from sqlalchemy import Connection
from sqlalchemy.dialects.sqlite import insert as upsert

from memstore.db.backend.base import Backend, CompactionResult, Partition, Storage
from memstore.db.backend.postgres import PostgresBackend
from memstore.db.backend.sqlite import SqliteBackend

SQLITE = SqliteBackend()
POSTGRES = PostgresBackend()

# By SQLAlchemy dialect name: the one place a connection's engine is named.
BACKENDS: dict[str, Backend] = {b.name: b for b in (SQLITE, POSTGRES)}


def of(conn: Connection) -> Backend:
    """The backend of the database ``conn`` belongs to."""
    return BACKENDS[conn.dialect.name]


__all__ = [
    "BACKENDS",
    "POSTGRES",
    "SQLITE",
    "Backend",
    "CompactionResult",
    "Partition",
    "Storage",
    "of",
    "upsert",
]
