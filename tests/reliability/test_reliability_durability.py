"""The durability setting reaches SQLite ("Durability setting")."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from memstore import Settings
from memstore.config import StorageSettings
from memstore.errors import ConfigError
from memstore.store import Store


def _synchronous(store: Store) -> int:
    with store._db.read() as conn:
        return int(conn.exec_driver_sql("PRAGMA synchronous").scalar_one())


@pytest.mark.parametrize(("mode", "level"), [("normal", 1), ("full", 2)])
def test_durability_sets_synchronous(db_path: Path, mode: str, level: int) -> None:
    settings = Settings().replace(embedder="none", scheduler=False, background_indexer=False)
    with Store.open(db_path, settings=settings.replace(durability=mode)) as store:
        store.capture_turn("alice", "s1", "hello")
        assert _synchronous(store) == level
        with store._db.read() as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar_one() == "wal"


def test_durability_from_the_environment(
    db_path: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("MEMSTORE_DURABILITY", "full")
    settings = Settings.load(tmp_path / "none.toml").replace(
        embedder="none", scheduler=False, background_indexer=False
    )
    assert settings.storage.durability == "full"
    with Store.open(db_path, settings=settings) as store:
        assert _synchronous(store) == 2


def test_unknown_durability_is_refused(db_path: Path) -> None:
    with pytest.raises(ConfigError, match="durability"):
        Settings().replace(durability="paranoid")
    # A section built by hand skips that check; opening the store still refuses it.
    storage = StorageSettings(durability="paranoid")  # type: ignore[arg-type]
    settings = Settings(storage=storage).replace(embedder="none", scheduler=False)
    with pytest.raises(ConfigError, match="durability"):
        Store.open(db_path, settings=settings)
    assert not db_path.exists() or db_path.stat().st_size == 0


def test_every_connection_reads_through_a_memory_map(db_path: Path) -> None:
    # memstore.db.engine.MMAP_BYTES: searches read through the OS page cache
    # instead of each connection's own 2 MB cache; writes and the WAL stay as
    # they were (a capture and a read of it through two connections).
    from memstore.db.engine import MMAP_BYTES

    settings = Settings().replace(embedder="none", scheduler=False, background_indexer=False)
    with Store.open(db_path, settings=settings) as store:
        store.capture_turn("alice", "s1", "I moved to Lisbon")
        with store._db.read() as one, store._db.read() as two:
            for conn in (one, two):
                assert conn.exec_driver_sql("PRAGMA mmap_size").scalar_one() == MMAP_BYTES
        assert MMAP_BYTES > 0 or sys.maxsize <= 2**32
        hits = store.search_conversations("alice", "Lisbon", strategy="keyword")
        assert [h.text for h in hits] == ["I moved to Lisbon"]
