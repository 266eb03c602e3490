"""The migrated template new test stores start from (tests/fresh_store.py)
holds what the migrations themselves write on a new file."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import text

from memstore import Settings
from memstore.assembly import default_projections
from memstore.db import migrate
from memstore.db.engine import Database, SqliteDatabase
from memstore.errors import MigrationError
from memstore.store import Store
from tests import fresh_store


def _contents(db: Database) -> dict[str, object]:
    """Schema and every ordinary table's rows."""
    with db.read() as conn:
        schema = conn.execute(
            text("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name")
        ).all()
        tables = [
            r[0]
            for r in conn.execute(
                text(
                    "SELECT name FROM sqlite_master WHERE type = 'table' "
                    "AND sql NOT LIKE 'CREATE VIRTUAL TABLE%' ORDER BY name"
                )
            )
        ]
        rows = {t: sorted(map(tuple, conn.exec_driver_sql(f'SELECT * FROM "{t}"'))) for t in tables}
    return {"schema": schema, "rows": rows}


def test_a_copied_store_equals_a_migrated_one(
    tmp_path: Path, migrated_template: Path | None
) -> None:
    # (With MEMSTORE_TESTS_FRESH_MIGRATIONS=1 both sides run Alembic.)
    owners = migrate.projection_tables(default_projections())
    copied, migrated = (
        SqliteDatabase(tmp_path / "copied.db"),
        SqliteDatabase(tmp_path / "migrated.db"),
    )
    try:
        migrate.ensure_current(copied, owners=owners)  # what Store.open calls: the copy
        fresh_store._real_ensure_current(migrated, owners=owners)  # Alembic
        assert _contents(copied) == _contents(migrated)
        assert migrate.current_revision(copied) == migrate.head_revision()
    finally:
        copied.close()
        migrated.close()


def test_an_empty_file_is_refused_without_upgrades(tmp_path: Path, settings: Settings) -> None:
    with pytest.raises(MigrationError, match="none \\(empty\\)"):
        Store.open(tmp_path / "new.db", settings=settings, upgrade=False)
