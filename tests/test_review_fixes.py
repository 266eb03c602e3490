"""Regression tests for defects found in review (each failed before its fix)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from memstore import Settings, Store
from memstore.errors import InvalidInputError
from memstore.events.log import NewEvent
from memstore.l0.events import MessagesCaptured


def _vector_owners_match(store: Store) -> tuple[int, int]:
    """(vector rows, rows whose partition user differs from the message's user)."""
    assert store.indexer is not None
    sp = store.indexer.space("l0")
    with store.db.read() as conn:
        rows = conn.exec_driver_sql(f'SELECT rowid, user_id FROM "{sp.table_name}"').all()
        owners = dict(conn.exec_driver_sql("SELECT id, user_id FROM l0_messages").all())
    return len(rows), sum(1 for rid, user in rows if owners.get(rid) != user)


def test_erasure_during_an_embedding_batch_cannot_misfile_vectors(store: Store) -> None:
    for user in ("alice", "bob", "carol"):
        store.capture_turn(user, "s", f"good morning from {user}", "how are you")
    assert store.embedder is not None
    original = store.embedder.embed_documents
    fired: list[bool] = []

    def embed_and_erase(texts):  # type: ignore[no-untyped-def]
        # What another process could do between the indexer's read and write.
        if not fired:
            fired.append(True)
            store.forget_user("alice")
        return original(texts)

    store.embedder.embed_documents = embed_and_erase  # type: ignore[method-assign]
    store.reindex()
    n, wrong = _vector_owners_match(store)
    assert fired and wrong == 0
    with store.db.read() as conn:
        messages = conn.exec_driver_sql("SELECT count(*) FROM l0_messages").scalar_one()
    assert n == messages == 4
    assert store.embedding_status()["l0"]["pending"] == 0


def test_rebuild_during_an_embedding_batch_leaves_nothing_unindexed(store: Store) -> None:
    for i in range(30):
        store.capture_turn("u", f"s{i % 3}", f"message number {i}", "ok")
    assert store.embedder is not None
    original = store.embedder.embed_documents
    fired: list[bool] = []

    def embed_and_rebuild(texts):  # type: ignore[no-untyped-def]
        if not fired:
            fired.append(True)
            store.rebuild()
        return original(texts)

    store.embedder.embed_documents = embed_and_rebuild  # type: ignore[method-assign]
    store.reindex()
    n, wrong = _vector_owners_match(store)
    assert n == 60 and wrong == 0
    assert store.search_engine.vector_ready("l0")


def test_a_duplicate_message_in_the_log_does_not_break_capture(store: Store) -> None:
    store.capture("u", "s", [{"role": "user", "content": "hello", "id": "m1"}])
    msg = {
        "id": "m1",
        "role": "user",
        "text": "hello again",
        "occurred_at": "2024-01-01T00:00:00.000000Z",
        "truncated": False,
        "original_bytes": 11,
    }
    store.append(
        [NewEvent("l0/u/s", MessagesCaptured(session_id="s", messages=[msg]), user_id="u")]
    )
    res = store.capture("u", "s", [{"role": "user", "content": "next", "id": "m2"}])
    assert res.stored == ["m2"]
    assert [
        h.text for h in store.search_conversations("hello", user_id="u", strategy="keyword")
    ] == ["hello"]
    store.rebuild()
    assert [h.ref for h in store.search_conversations("next", user_id="u", strategy="keyword")] == [
        "m2"
    ]


def test_message_ids_are_scoped_to_their_session(store: Store) -> None:
    store.capture("u", "a", [{"role": "user", "content": "I adopted a cat named Mia", "id": "1"}])
    res = store.capture(
        "u", "b", [{"role": "user", "content": "I started learning piano", "id": "1"}]
    )
    assert res.stored == ["1"]
    assert store.search_conversations("piano", user_id="u", strategy="keyword")


@pytest.mark.parametrize("ts", ["0999-05-01T00:00:00", -62135596800, "10000-01-01"])
def test_out_of_range_timestamps_are_refused(store: Store, ts: object) -> None:
    with pytest.raises(InvalidInputError):
        store.capture("u", "s", [{"role": "user", "content": "x", "timestamp": ts}])
    assert store.read_events() == []


def test_in_memory_database_is_a_clear_error() -> None:
    with pytest.raises(InvalidInputError, match="in-memory"):
        Store.open(":memory:", settings=Settings().replace(embedder="none"))


def test_positions_never_repeat_after_erasing_the_newest_events(store: Store) -> None:
    store.capture_turn("keep", "s", "first", "ok")
    store.capture_turn("gone", "s", "second", "ok")
    store.capture_turn("gone", "s", "third", "ok")
    highest = store.event_count()
    store.forget_user("gone")
    (tomb,) = store.read_events(types=["erasure.user"])
    assert tomb.position > highest
    res = store.capture_turn("keep", "s", "fourth", "ok")
    assert res.event_position is not None and res.event_position > tomb.position


def test_vector_search_falls_back_to_keyword_while_a_reset_space_refills(store: Store) -> None:
    store.capture_turn("u", "s", "the zebra crossing", "ok")
    store.reindex()
    store.rebuild()
    hits = store.search_conversations("zebra", user_id="u", strategy="vector")
    assert hits and hits[0].keyword_rank == 1 and hits[0].vector_rank is None
    store.reindex()
    hits = store.search_conversations("zebra", user_id="u", strategy="vector")
    assert hits and hits[0].vector_rank == 1


def test_store_is_importable_from_the_package(db_path: Path) -> None:
    import memstore

    assert memstore.Store is Store
    assert isinstance(np.float32(1), np.floating)
