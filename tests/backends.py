"""Where a test's store lives: a SQLite file, or a new PostgreSQL database.

A test asks for ``target`` (one fresh location), ``new_target`` (a factory: one
fresh location per name, the same one for the same name) or the ``store``
fixture built on them. Which engines it runs on:

- every test under ``tests/contract/``, and every test in a module marked
  ``pytestmark = pytest.mark.both_backends``: SQLite and PostgreSQL, as
  ``test_x[sqlite]`` and ``test_x[postgresql]``;
- a test that applies to one engine only says so itself, with
  ``@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)`` and a
  comment saying why;
- any other test: SQLite only, under its plain name.

The PostgreSQL side needs a server: ``MEMSTORE_TEST_PG_URL`` names a database
on it whose user may create databases (``scripts/pg.sh start`` prints one;
``.ci/run`` starts it and exports the URL). Each location is a new database,
dropped afterwards; it is cloned from a template database that each test
process migrates once, as ``tests/fresh_store.py`` does for SQLite files
(``MEMSTORE_TESTS_FRESH_MIGRATIONS=1`` migrates every new database instead).
Without the variable the PostgreSQL cases are skipped — except under CI, where
a missing server is a failure, not a silent skip.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

PG_URL_ENV = "MEMSTORE_TEST_PG_URL"
ENGINES = ("sqlite", "postgresql")
# Read once at collection: the hermetic fixture (tests/conftest.py) clears every
# MEMSTORE_* variable before each test.
_PG_URL = os.environ.get(PG_URL_ENV) or None
_FRESH = os.environ.get("MEMSTORE_TESTS_FRESH_MIGRATIONS") == "1"


def pg_admin_url() -> str | None:
    return _PG_URL


def _libpq(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


def _with_db(url: str, name: str) -> str:
    base, _, _ = url.rpartition("/")
    return f"{base}/{name}"


def _admin(sql: str) -> None:
    import psycopg

    admin = pg_admin_url()
    assert admin is not None
    with psycopg.connect(_libpq(admin), autocommit=True) as conn:
        conn.execute(sql)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "both_backends: run every test of the module on SQLite and on PostgreSQL"
    )


def runs_on_both(node: pytest.Item, path: Path) -> bool:
    in_contract = path.parent.name == "contract" and path.parent.parent.name == "tests"
    return in_contract or node.get_closest_marker("both_backends") is not None


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" not in metafunc.fixturenames:
        return
    # A test parametrized for one engine by itself keeps that choice.
    for mark in metafunc.definition.iter_markers("parametrize"):
        names = mark.args[0] if mark.args else mark.kwargs.get("argnames", "")
        if "backend" in (names.replace(" ", "").split(",") if isinstance(names, str) else names):
            return
    if runs_on_both(metafunc.definition, Path(str(metafunc.definition.path))):
        metafunc.parametrize("backend", ENGINES, indirect=True)


@pytest.fixture(scope="module")
def backend(request: pytest.FixtureRequest) -> str:
    name = str(getattr(request, "param", "sqlite"))
    if name == "postgresql" and pg_admin_url() is None:
        if os.environ.get("CI"):
            pytest.fail(f"{PG_URL_ENV} is not set under CI: .ci/run must start PostgreSQL")
        pytest.skip(f"no PostgreSQL server: set {PG_URL_ENV} (scripts/pg.sh start prints one)")
    return name


class _Template:
    """A database migrated at head that new test databases are cloned from,
    made on first use so a run without PostgreSQL tests never pays for it."""

    def __init__(self) -> None:
        self._name: str | None = None

    def name(self) -> str:
        if self._name is None:
            from memstore import Settings
            from memstore.store import Store

            name = f"mt_tmpl_{uuid.uuid4().hex[:12]}"
            _admin(f'CREATE DATABASE "{name}"')
            self._name = name
            settings = Settings().replace(
                embedder="hashing", scheduler=False, background_indexer=False
            )
            # Closed at once: a template with an open connection cannot be cloned.
            Store.open(_with_db(str(pg_admin_url()), name), settings=settings).close()
        return self._name

    def new_database(self) -> str:
        name = f"mt_{uuid.uuid4().hex[:16]}"
        if _FRESH:
            _admin(f'CREATE DATABASE "{name}"')
        else:
            _admin(f'CREATE DATABASE "{name}" TEMPLATE "{self.name()}"')
        return name

    def drop(self) -> None:
        if self._name is not None:
            _admin(f'DROP DATABASE IF EXISTS "{self._name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def pg_template() -> Iterator[_Template]:
    template = _Template()
    try:
        yield template
    finally:
        template.drop()


class Targets:
    """Fresh store locations on one engine, one per name, all removed at the end."""

    def __init__(self, backend: str, folder: Path, template: _Template) -> None:
        self.backend = backend
        self._folder = folder
        self._template = template
        self._made: dict[str, str] = {}
        self._databases: list[str] = []

    def __call__(self, name: str = "memstore.db") -> str:
        if name not in self._made:
            if self.backend == "sqlite":
                self._made[name] = str(self._folder / name)
            else:
                db = self._template.new_database()
                self._databases.append(db)
                self._made[name] = _with_db(str(pg_admin_url()), db)
        return self._made[name]

    def drop(self) -> None:
        for db in self._databases:
            _admin(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


@pytest.fixture
def new_target(backend: str, tmp_path: Path, pg_template: _Template) -> Iterator[Targets]:
    """``new_target("a.db")``: a fresh location on this test's engine (a file
    in ``tmp_path``, or a new database); the same name gives the same one."""
    targets = Targets(backend, tmp_path, pg_template)
    try:
        yield targets
    finally:
        targets.drop()


@pytest.fixture(scope="module")
def module_target(
    backend: str, tmp_path_factory: pytest.TempPathFactory, pg_template: _Template
) -> Iterator[Targets]:
    """As ``new_target``, for module-scoped stores."""
    targets = Targets(backend, tmp_path_factory.mktemp("module"), pg_template)
    try:
        yield targets
    finally:
        targets.drop()


@pytest.fixture
def target(new_target: Targets) -> str:
    """Where a fresh store lives: a file path or the URL of a new database."""
    return new_target()
