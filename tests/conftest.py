from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from memstore import Settings
from memstore.store import Store

# The pipeline tests' shared fixtures (clock, env) live with their helpers.
pytest_plugins = ["tests.pipeline_support"]


@pytest.fixture
def settings() -> Settings:
    # Tests never read the developer's config file or environment.
    return Settings(embedder="hashing", scheduler=False, background_indexer=False)


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
