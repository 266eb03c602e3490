"""One contract, two backends: every test here runs on a SQLite file and on
PostgreSQL.

The PostgreSQL side needs a server: ``MEMSTORE_TEST_PG_URL`` names a database
on it whose user may create databases (``scripts/pg.sh start`` prints one;
``.ci/run`` starts it and exports the URL). Each test gets a fresh database,
dropped afterwards. Without the variable the PostgreSQL cases are skipped —
except under CI, where a missing server is a failure, not a silent skip.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from memstore import Settings
from memstore.store import Store

PG_URL_ENV = "MEMSTORE_TEST_PG_URL"
# Read once at collection: the hermetic fixture (tests/conftest.py) clears every
# MEMSTORE_* variable before each test.
_PG_URL = os.environ.get(PG_URL_ENV) or None


def pg_admin_url() -> str | None:
    return _PG_URL


def _libpq(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


def _with_db(url: str, name: str) -> str:
    base, _, _ = url.rpartition("/")
    return f"{base}/{name}"


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest) -> str:
    if request.param == "postgresql" and pg_admin_url() is None:
        if os.environ.get("CI"):
            pytest.fail(f"{PG_URL_ENV} is not set under CI: .ci/run must start PostgreSQL")
        pytest.skip(f"no PostgreSQL server: set {PG_URL_ENV} (scripts/pg.sh start prints one)")
    return str(request.param)


@pytest.fixture
def target(backend: str, tmp_path: Path) -> Iterator[str]:
    """Where a fresh store lives: a file path or the URL of a new database."""
    if backend == "sqlite":
        yield str(tmp_path / "memstore.db")
        return
    import psycopg

    admin = pg_admin_url()
    assert admin is not None
    name = f"mt_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(_libpq(admin), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield _with_db(admin, name)
    finally:
        with psycopg.connect(_libpq(admin), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def settings() -> Settings:
    return Settings().replace(embedder="hashing", scheduler=False, background_indexer=False)


@pytest.fixture
def store(target: str, settings: Settings) -> Iterator[Store]:
    s = Store.open(target, settings=settings)
    try:
        yield s
    finally:
        s.close()
