"""A new SQLite store in a test starts as a copy of one migrated at head.

Opening a store on a new file runs every Alembic migration (about 0.15 CPU-s:
loading and compiling the revision files, then the DDL), and the quick suite
opens some 400 new files: a quarter of its CPU time. Each test worker runs the
real migrations once, on a template file, exactly as ``Store.open`` does; after
that, ``migrate.ensure_current`` on an empty SQLite database first copies the
template's pages in with SQLite's backup API and then runs as usual (and finds
the file at head). The bytes are what the migrations wrote, so every test still
reads a real, migrated SQLite file.

Only ``ensure_current`` on an empty file is served this way:
``migrate.upgrade``/``downgrade`` called directly (the migration tests) run
Alembic, as does an open with ``upgrade=False`` (which must refuse an empty
file). ``MEMSTORE_TESTS_FRESH_MIGRATIONS=1`` turns the copy off and migrates
every new file.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from memstore.assembly import default_projections
from memstore.db import migrate
from memstore.db.driver import load_vec
from memstore.db.engine import Database, SqliteDatabase

_real_ensure_current = migrate.ensure_current


def _is_empty_sqlite(db: Any) -> bool:
    if getattr(db, "dialect", None) != "sqlite":
        return False
    with db.read() as conn:
        return conn.execute(text("SELECT count(*) FROM sqlite_master")).scalar_one() == 0


def _copy_into(template: Path, db: Database) -> None:
    """The template's pages into ``db``'s file, through one of its own
    connections (outside any transaction, as the backup API needs)."""
    source = db.module.connect(str(template))
    try:
        load_vec(source)
        with db.engine.connect() as conn:
            source.backup(conn.connection.dbapi_connection)
    finally:
        source.close()


@pytest.fixture(scope="session", autouse=True)
def migrated_template(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path | None]:
    if os.environ.get("MEMSTORE_TESTS_FRESH_MIGRATIONS") == "1":
        yield None
        return
    path = tmp_path_factory.mktemp("template") / "migrated.db"
    db = SqliteDatabase(path)
    try:
        _real_ensure_current(db, owners=migrate.projection_tables(default_projections()))
    finally:
        db.close()

    def ensure_current(
        db: Database, *, owners: Mapping[str, str], upgrade_schema: bool = True
    ) -> str:
        if upgrade_schema and _is_empty_sqlite(db):
            _copy_into(path, db)
        return _real_ensure_current(db, owners=owners, upgrade_schema=upgrade_schema)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(migrate, "ensure_current", ensure_current)
        yield path
