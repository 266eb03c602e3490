"""``memstore.search_reader``: what ``memstore search`` runs when the store is
already current. Its hits are the ``Store``'s; a store that is not current
(a projection left to rebuild, as ``memstore db upgrade`` leaves one) is
searched through a ``Store``, which brings it current first."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import text

from memstore import Settings
from memstore.db import migrate, revision
from memstore.db.connect import open_database
from memstore.search_reader import SearchReader, is_current, open_reader
from memstore.store import Store
from tests.porting_support import cli_target, run_cli

__all__ = ["cli_target"]

pytestmark = pytest.mark.both_backends

SETTINGS = Settings().replace(embedder="hashing", scheduler=False, background_indexer=False)
QUERIES = ("cat tuna", "hiking Alps", "咖啡", "tea", "thanks")


def _fill(target: str) -> None:
    with Store.open(target, settings=SETTINGS) as store:
        store.capture_turn("alice", "s1", "My cat is called Mochi and she loves tuna", "Cute!")
        store.capture_turn("alice", "s2", "I am planning a hiking trip to the Alps", "Fun")
        store.capture_turn("alice", "s2", "我每天早上都喝咖啡", "好的，记住了")
        store.capture_turn("alice", "s3", "I like green tea in the afternoon", "Noted")
        store.capture_turn("bob", "s1", "My cat is called Tiger and he hates tuna", "Ok")
        store.run_pipeline()  # memories, by the rules deriver
        store.reindex()  # and vectors: hybrid and vector search use them
        [tea] = [m for m in store.list_memories("alice") if "tea" in m.content]
        store.forget_memory("alice", tea.memory_id)  # its message is left out


def test_the_shipped_head_is_alembics() -> None:
    assert revision.shipped_head() == migrate.head_revision()


def test_a_current_store_is_searched_as_the_store_searches_it(target: str) -> None:
    _fill(target)
    with Store.open(target, settings=SETTINGS) as store:
        expected = {
            (q, strategy): (
                [h.to_dict() for h in store.search_conversations("alice", q, strategy=strategy)],
                [h.to_dict() for h in store.search_memories("alice", q, strategy=strategy)],
            )
            for q in QUERIES
            for strategy in ("keyword", "vector", "hybrid")
        }
    db = open_database(target)
    try:
        with open_reader(db, SETTINGS) as reader:
            assert isinstance(reader, SearchReader)
            got = {
                (q, strategy): (
                    [
                        h.to_dict()
                        for h in reader.search_conversations("alice", q, strategy=strategy)
                    ],
                    [h.to_dict() for h in reader.search_memories("alice", q, strategy=strategy)],
                )
                for q in QUERIES
                for strategy in ("keyword", "vector", "hybrid")
            }
    finally:
        db.close()
    assert got == expected
    assert any(hits for hits, _ in expected.values()) and any(m for _, m in expected.values())
    assert not any("green tea" in h["text"] for hits, _ in got.values() for h in hits)


def test_a_store_left_to_catch_up_is_searched_through_a_store(cli_target: str) -> None:
    _fill(cli_target)
    args = ("search", "conversations", "cat tuna", "--user", "alice", "--json")
    before = run_cli(*args)
    assert before.exit_code == 0, before.output
    db = open_database(cli_target)
    try:
        assert is_current(db)
        with db.write() as conn:  # what `memstore db upgrade` does to a projection it touched
            conn.execute(text("DELETE FROM projection_checkpoints WHERE name = 'stats'"))
        assert not is_current(db)
        after = run_cli(*args)
        assert is_current(db)  # the Store the search opened rebuilt it
    finally:
        db.close()
    assert after.exit_code == 0, after.output
    assert json.loads(after.output) == json.loads(before.output) != []
