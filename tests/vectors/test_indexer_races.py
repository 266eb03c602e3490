"""The vector indexer against what can happen between its read and its write:
an erasure or a rebuild in the middle of an embedding batch."""

from __future__ import annotations

import pytest

from memstore import Store

pytestmark = pytest.mark.both_backends


def _vector_owners_match(store: Store, backend: str) -> tuple[int, int]:
    """(vector rows, rows whose partition user differs from the message's user)."""
    assert store._indexer is not None
    sp = store._indexer.space("l0")
    key = "rowid" if backend == "sqlite" else "id"  # vec0's row key; pgvector's column
    with store._db.read() as conn:
        rows = conn.exec_driver_sql(f'SELECT {key}, user_id FROM "{sp.table_name}"').all()
        owners = dict(conn.exec_driver_sql("SELECT id, user_id FROM l0_messages").all())
    return len(rows), sum(1 for rid, user in rows if owners.get(rid) != user)


def test_erasure_during_an_embedding_batch_cannot_misfile_vectors(
    store: Store, backend: str
) -> None:
    for user in ("alice", "bob", "carol"):
        store.capture_turn(user, "s", f"good morning from {user}", "how are you")
    assert store._embedder is not None
    original = store._embedder.embed_documents
    fired: list[bool] = []

    def embed_and_erase(texts):  # type: ignore[no-untyped-def]
        # What another process could do between the indexer's read and write.
        if not fired:
            fired.append(True)
            store.forget_user("alice")
        return original(texts)

    store._embedder.embed_documents = embed_and_erase  # type: ignore[method-assign]
    store.reindex()
    n, wrong = _vector_owners_match(store, backend)
    assert fired and wrong == 0
    with store._db.read() as conn:
        messages = conn.exec_driver_sql("SELECT count(*) FROM l0_messages").scalar_one()
    assert n == messages == 4
    assert store.embedding_status()["l0"]["pending"] == 0


def test_rebuild_during_an_embedding_batch_leaves_nothing_unindexed(
    store: Store, backend: str
) -> None:
    for i in range(30):
        store.capture_turn("u", f"s{i % 3}", f"message number {i}", "ok")
    assert store._embedder is not None
    original = store._embedder.embed_documents
    fired: list[bool] = []

    def embed_and_rebuild(texts):  # type: ignore[no-untyped-def]
        if not fired:
            fired.append(True)
            store.rebuild()
        return original(texts)

    store._embedder.embed_documents = embed_and_rebuild  # type: ignore[method-assign]
    store.reindex()
    n, wrong = _vector_owners_match(store, backend)
    assert n == 60 and wrong == 0
    assert store._search_engine.vector_ready("l0")
