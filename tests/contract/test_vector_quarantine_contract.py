"""The indexer's vector quarantine on both backends (poison rows,
on the second backend too): a row the model cannot embed is set aside with
its error, the rest is indexed, a failed retry counts one more attempt (the
upsert), a healed model clears it, and erasure removes the user's rows.

The misbehaving embedder is the one of ``tests/reliability/test_reliability_indexer``:
NaN for a text whose last line starts with ``POISON``, an error for
``REJECT``."""

from __future__ import annotations

import pytest

from memstore.errors import EmbeddingError
from memstore.store import Store
from memstore.vectors import quarantine
from tests.pipeline_support import FakeClock
from tests.reliability.test_reliability_indexer import (
    Flaky,
    _indexer,
    _vector_ids,
    index_one_bad_row,
)


@pytest.mark.parametrize("marker", ["POISON", "REJECT"])
def test_a_bad_message_is_set_aside_retried_and_cleared(store: Store, marker: str) -> None:
    clock = FakeClock()
    flaky = index_one_bad_row(store, marker, clock)
    with store._db.read() as conn:
        (held,) = quarantine.items(conn)
        assert (held.user_id, held.attempts) == ("alice", 1)
        assert quarantine.due(conn, held.space, now=clock(), limit=10) == []

    # A retry after the back-off that fails again: one more attempt, a longer wait.
    clock.advance(quarantine.FIRST_RETRY_S + 1)
    assert _indexer(store, flaky, clock).run_until_idle() == 0
    with store._db.read() as conn:
        (again,) = quarantine.items(conn)
        assert again.attempts == 2 and again.first_failed_at == held.first_failed_at
        assert quarantine.due(conn, held.space, now=clock(), limit=10) == []

    clock.advance(quarantine.backoff_s(2) + 1)
    flaky.healed = True
    assert _indexer(store, flaky, clock).run_until_idle() == 1
    assert store.embedding_status()["l0"]["quarantined"] == 0
    assert f"{marker} the first words of alice" in _vector_ids(store, "alice", "first words")


def test_a_bad_memory_is_skipped_while_its_text_is_unchanged(store: Store) -> None:
    assert store._embedder is not None
    clock = FakeClock()
    store.write_memory("alice", "add", "POISON memory text")
    store.write_memory("alice", "add", "alice is allergic to peanuts")
    flaky = Flaky(store._embedder)
    _indexer(store, flaky, clock).run_until_idle()
    status = store.embedding_status()
    assert status["l1"]["pending"] == 0 and status["l1"]["quarantined"] == 1
    hits = store.search_memories("alice", "peanuts allergy", strategy="vector")
    assert any("peanuts" in h.text for h in hits)
    # The L1 scan does not hand the quarantined memory back to the model.
    flaky.calls = 0
    _indexer(store, flaky, clock).run_until_idle()
    assert flaky.calls == 0


def test_a_model_that_is_down_is_not_quarantined(store: Store) -> None:
    """Every text failing is the model's fault: the error surfaces, nothing is set aside."""
    assert store._embedder is not None
    store.capture_turn("alice", "s1", "REJECT one")
    store.capture_turn("alice", "s1", "REJECT two")
    with pytest.raises(EmbeddingError):
        _indexer(store, Flaky(store._embedder), FakeClock()).run_until_idle()
    assert store.embedding_status()["l0"]["quarantined"] == 0


def test_erasure_removes_the_users_quarantined_rows(store: Store) -> None:
    assert store._embedder is not None
    store.capture_turn("alice", "s1", "POISON secret")
    store.capture_turn("bob", "s1", "POISON bob text")
    _indexer(store, Flaky(store._embedder), FakeClock()).run_until_idle()
    store.forget_user("alice")
    with store._db.read() as conn:
        assert [q.user_id for q in quarantine.items(conn)] == ["bob"]
