from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from memstore import Settings
from memstore.store import Store

# The pipeline tests' shared fixtures (clock, env) live with their helpers.
pytest_plugins = ["tests.pipeline_support"]

# The developer's home as the session started; tests/test_reliability_hermetic.py
# checks that no test sees it.
REAL_HOME = os.path.expanduser("~")
# Variables that would point a test at the developer's settings, keys or servers.
CLEARED_ENV = ("MEMSTORE_", "TDAI_", "OPENAI_")


@pytest.fixture(autouse=True)
def hermetic_home(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """Every test (and every process it starts) gets its own empty HOME,
    HERMES_HOME and XDG folders, and none of the developer's MEMSTORE_*,
    TDAI_* or OPENAI_* variables: nothing reads the developer's config, keys
    or endpoints, or writes into ~/.hermes/logs, ~/.config, ~/.cache or ~/.local."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("HERMES_HOME", str(home / ".hermes"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / ".local" / "share"))
    monkeypatch.setenv("XDG_STATE_HOME", str(home / ".local" / "state"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
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
def store(db_path: Path, settings: Settings) -> Iterator[Store]:
    s = Store.open(db_path, settings=settings)
    try:
        yield s
    finally:
        s.close()
