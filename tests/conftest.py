from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from memstore import Settings
from memstore.store import Store

# The pipeline tests' shared fixtures (clock, env) live with their helpers;
# new stores start as a copy of a migrated template (tests/fresh_store.py);
# which engine a test's store is on comes from tests/backends.py.
pytest_plugins = ["tests.pipeline_support", "tests.fresh_store", "tests.backends"]

# The developer's home as the session started (an xdist worker is handed it
# by the controller, whose HOME is already the session's temporary one);
# tests/reliability/test_reliability_hermetic.py checks that no test sees it.
REAL_HOME = os.environ.get("MEMSTORE_TESTS_REAL_HOME") or os.path.expanduser("~")
# Variables that would point a test at the developer's settings, keys or servers.
CLEARED_ENV = ("MEMSTORE_", "TDAI_", "OPENAI_")


def home_variables(home: Path) -> dict[str, str]:
    """HOME, HERMES_HOME and the XDG folders, all inside ``home``."""
    return {
        "HOME": str(home),
        "HERMES_HOME": str(home / ".hermes"),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "XDG_CACHE_HOME": str(home / ".cache"),
    }


def pytest_configure(config: pytest.Config) -> None:
    """Before collection, a temporary home for the whole session: test modules
    import hermes-agent at module level, and importing it creates
    $HERMES_HOME (SOUL.md, state.db, logs/...) — in the developer's ~/.hermes
    if HOME were still theirs. Each test then gets its own (``hermetic_home``).
    An xdist worker inherits the controller's; the controller removes it."""
    # One OpenMP thread per process (unless the developer chose otherwise):
    # xdist already runs one worker per core, and e5's default thread pool
    # spins on the other worker's core; the e5 tests took 3x the CPU time.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if "MEMSTORE_TESTS_REAL_HOME" in os.environ:
        return
    home = Path(tempfile.mkdtemp(prefix="memstore-tests-home-"))
    config.stash[_SESSION_HOME] = home
    os.environ["MEMSTORE_TESTS_REAL_HOME"] = REAL_HOME
    os.environ.update(home_variables(home))


def pytest_unconfigure(config: pytest.Config) -> None:
    home = config.stash.get(_SESSION_HOME, None)
    if home is not None:
        shutil.rmtree(home, ignore_errors=True)
        del os.environ["MEMSTORE_TESTS_REAL_HOME"]


_SESSION_HOME = pytest.StashKey[Path]()


@pytest.fixture(autouse=True)
def hermetic_home(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """Every test (and every process it starts) gets its own empty HOME,
    HERMES_HOME and XDG folders, and none of the developer's MEMSTORE_*,
    TDAI_* or OPENAI_* variables: nothing reads the developer's config, keys
    or endpoints, or writes into ~/.hermes/logs, ~/.config, ~/.cache or ~/.local."""
    home = tmp_path_factory.mktemp("home")
    for var, value in home_variables(home).items():
        monkeypatch.setenv(var, value)
    for var in list(os.environ):
        if var.startswith(CLEARED_ENV):
            monkeypatch.delenv(var)
    return home


@pytest.fixture
def settings() -> Settings:
    # Tests never read the developer's config file or environment.
    return Settings().replace(embedder="hashing", scheduler=False, background_indexer=False)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "memstore.db"


@pytest.fixture
def store(target: str, settings: Settings) -> Iterator[Store]:
    """A fresh store on the test's engine (SQLite unless the module runs on
    both: tests/backends.py); on SQLite it is the file at ``db_path``."""
    s = Store.open(target, settings=settings)
    try:
        yield s
    finally:
        s.close()
