"""An erased message leaves no vector behind, and the message after it,
whose context vector was embedded with the erased text, is embedded again
with its new context."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from memstore import Settings
from memstore.store import Store
from tests.backends import Targets

pytestmark = pytest.mark.both_backends


def _vectors(store: Store) -> dict[int, bytes]:
    with store._db.read() as conn:
        table = conn.execute(
            text("SELECT table_name FROM vector_spaces WHERE kind = 'l0'")
        ).scalar()
        # Through the backend: vec0 and pgvector tables name their key differently.
        return store._db.backend.vectors_by_id(conn, table, list(range(1, 100)))


def test_the_next_message_is_embedded_again_without_the_erased_context(
    new_target: Targets, settings: Settings
) -> None:
    assert settings.embedding.context_vectors  # the default: "previous + this message"
    with Store.open(new_target("v.db"), settings=settings) as store:
        texts = ("first thing", "second secret thing", "third thing")
        got = store.capture("a", "s", [{"role": "user", "content": t} for t in texts])
        store.reindex()
        before = _vectors(store)
        assert sorted(before) == [1, 2, 3]
        store.forget_messages("a", [got.stored[1]])
        after = _vectors(store)
        assert after == {1: before[1]}  # row 3 (now 2) was built from the erased text
        assert store.reindex() == 1
        again = _vectors(store)
        assert sorted(again) == [1, 2] and again[2] != before[3]
        with store._db.read() as conn:
            assert conn.execute(text("SELECT count(*) FROM vector_quarantine")).scalar() == 0
        hits = store.search_conversations("a", "third thing", strategy="vector")
        assert hits[0].text == "third thing"
