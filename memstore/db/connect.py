"""Open the database a target names: a SQLite file or a PostgreSQL server."""

from __future__ import annotations

import os
from pathlib import Path

from memstore.db.engine import Database, SqliteDatabase
from memstore.db.target import Target, parse


def resolve(path: str | os.PathLike[str] | None) -> Target:
    """``path`` if given, else ``$MEMSTORE_DB`` (which may hold a URL), else the
    user data directory's file."""
    if path is not None:
        return parse(path)
    env = os.environ.get("MEMSTORE_DB")
    if env:
        return parse(env)
    from memstore.config import default_db_path

    return Target(path=default_db_path())


def open_database(
    target: Target | str | Path, *, busy_timeout_ms: int = 5000, durability: str = "normal"
) -> Database:
    t = target if isinstance(target, Target) else parse(target)
    if t.url is not None:
        from memstore.db.postgres import PostgresDatabase

        return PostgresDatabase(t.url, busy_timeout_ms=busy_timeout_ms, durability=durability)
    assert t.path is not None
    return SqliteDatabase(t.path, busy_timeout_ms=busy_timeout_ms, durability=durability)
