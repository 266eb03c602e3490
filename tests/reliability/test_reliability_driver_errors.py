"""Statements that run on the DB-API connection itself (keyword search, hit
rows, capture) still fail with memstore errors, never the driver's own."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from memstore import Settings, Store
from memstore.errors import StorageError


@pytest.fixture
def damaged(tmp_path: Path) -> Path:
    path = tmp_path / "d.db"
    settings = Settings().replace(embedder="none", scheduler=False, background_indexer=False)
    with Store.open(path, settings=settings) as store:
        store.capture_turn("u", "s1", "I am allergic to peanuts", "noted")
        store.write_memory("u", "add", "The user is allergic to peanuts")
    return path


def _drop(path: Path, table: str) -> None:
    con = sqlite3.connect(path)
    con.execute(f"DROP TABLE {table}")
    con.commit()
    con.close()


@pytest.mark.parametrize(
    ("table", "search"),
    [("l0_user_slots", "search_conversations"), ("l1_user_slots", "search_memories")],
)
def test_a_failing_keyword_statement_is_a_storage_error(
    damaged: Path, table: str, search: str
) -> None:
    settings = Settings().replace(embedder="none", scheduler=False, background_indexer=False)
    with Store.open(damaged, settings=settings) as store:
        _drop(damaged, table)
        with pytest.raises(StorageError, match="no such table"):
            getattr(store, search)("peanuts", user_id="u", strategy="keyword")
