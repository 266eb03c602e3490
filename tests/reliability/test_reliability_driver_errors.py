"""Statements that run on the DB-API connection itself (keyword search, hit
rows, capture) still fail with memstore errors, never the driver's own."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from memstore import Settings, Store
from memstore.errors import StorageError

pytestmark = pytest.mark.both_backends

SETTINGS = Settings().replace(embedder="none", scheduler=False, background_indexer=False)


@pytest.fixture
def damaged(target: str) -> str:
    with Store.open(target, settings=SETTINGS) as store:
        store.capture_turn("u", "s1", "I am allergic to peanuts", "noted")
        store.write_memory("u", "add", "The user is allergic to peanuts")
    return target


def _drop(target: str, table: str) -> None:
    # Another client than the store's own: the store finds the table gone.
    with Store.open(target, settings=SETTINGS) as other, other._db.write() as conn:
        conn.execute(text(f"DROP TABLE {table}"))


@pytest.mark.parametrize(
    ("table", "search"),
    [("l0_user_slots", "search_conversations"), ("l1_user_slots", "search_memories")],
)
def test_a_failing_keyword_statement_is_a_storage_error(
    damaged: str, table: str, search: str
) -> None:
    with Store.open(damaged, settings=SETTINGS) as store:
        _drop(damaged, table)
        # SQLite's and PostgreSQL's own words for a missing table.
        with pytest.raises(StorageError, match=r"no such table|does not exist"):
            getattr(store, search)("peanuts", user_id="u", strategy="keyword")
