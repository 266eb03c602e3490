from __future__ import annotations

from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

from memstore.db import migrate
from memstore.db.engine import Database, SqliteDatabase
from memstore.db.schema import include_name, metadata
from memstore.errors import MigrationError
from memstore.store import Store, default_projections


def _owners() -> dict[str, str]:
    """Which projection owns which table: what ``Store.open`` tells the migrations."""
    return migrate.projection_tables(default_projections())


def _tables(db: Database) -> set[str]:
    with db.read() as conn:
        return set(inspect(conn).get_table_names())


def test_blank_to_head_creates_every_model_table(db_path: Path) -> None:
    db = SqliteDatabase(db_path)
    try:
        assert migrate.current_revision(db) is None
        migrate.upgrade(db, owners=_owners())
        assert migrate.current_revision(db) == migrate.head_revision()
        assert set(metadata.tables) <= _tables(db)
    finally:
        db.close()


def test_head_to_base_to_head_round_trip(db_path: Path) -> None:
    db = SqliteDatabase(db_path)
    try:
        migrate.upgrade(db, owners=_owners())
        migrate.downgrade(db, "base", owners=_owners())
        assert migrate.current_revision(db) is None
        leftover = {t for t in _tables(db) if not t.startswith("alembic")}
        assert leftover == set()
        migrate.upgrade(db, owners=_owners())
        assert migrate.current_revision(db) == migrate.head_revision()
    finally:
        db.close()


def test_models_match_migrations(db_path: Path) -> None:
    db = SqliteDatabase(db_path)
    try:
        migrate.upgrade(db, owners=_owners())
        with db.read() as conn:
            ctx = MigrationContext.configure(
                conn,
                opts={
                    "include_name": include_name,
                    "compare_type": True,
                    "compare_server_default": True,
                    "target_metadata": metadata,
                },
            )
            diff = compare_metadata(ctx, metadata)
        assert diff == []
    finally:
        db.close()


def test_open_upgrades_unless_told_not_to(db_path: Path) -> None:
    db = SqliteDatabase(db_path)
    db.close()
    with pytest.raises(MigrationError, match="memstore db upgrade"):
        Store.open(db_path, upgrade=False)
    with Store.open(db_path) as s:
        assert s.info()["revision"] == migrate.head_revision()
    with Store.open(db_path, upgrade=False) as s:
        assert s.info()["revision"] == migrate.head_revision()


def test_unknown_newer_revision_is_refused(db_path: Path) -> None:
    Store.open(db_path).close()
    db = SqliteDatabase(db_path)
    with db.write() as conn:
        conn.exec_driver_sql("update alembic_version set version_num='9999'")
    db.close()
    with pytest.raises(MigrationError, match="newer version"):
        Store.open(db_path)
