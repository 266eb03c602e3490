"""The Store's views for the inspector and the MCP server read the same on
SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from memstore.errors import NotFoundError
from memstore.recall.preview import INJECTED
from memstore.store import Store


def test_views_on_both_backends(store: Store) -> None:
    at = "2023-05-08T10:00:00Z"
    store.capture("u", "s1", [
        {"role": "user", "id": "m1", "timestamp": at,
         "content": "My name is Dana and I am allergic to peanuts."},
        {"role": "assistant", "id": "m2", "timestamp": at, "content": "Noted!"},
    ])  # fmt: skip
    store.capture("v", "s1", [{"role": "user", "id": "m1", "content": "I am allergic to cats."}])
    store.run_pipeline()
    assert [u["user_id"] for u in store.list_users()] == ["u", "v"]
    [peanuts] = [m for m in store.list_memories("u") if "peanuts" in m["content"]]
    mid = peanuts["memory_id"]
    assert store.get_memory("u", mid).content == peanuts["content"]
    with pytest.raises(NotFoundError):
        store.get_memory("v", mid)
    assert [(s["session_id"], s["message_id"]) for s in store.memory_sources("u", mid)] == [
        ("s1", "m1")
    ]
    assert [(s["session_id"], s["messages"]) for s in store.list_sessions("u")] == [("s1", 2)]
    msgs = store.session_messages("u", "s1")
    assert [m["message_id"] for m in msgs] == ["m1", "m2"]
    assert mid in msgs[0]["memory_ids"]
    assert "Health" in store.scene_navigation("u")
    assert [g["generation"] for g in store.list_generations("u")] == [0]
    p = store.recall_preview("u", "what is the user allergic to?")
    assert p.recall.text == store.recall("u", "what is the user allergic to?").text
    assert {c.ref: c.outcome for c in p.candidates}[mid] == INJECTED
    assert all("cats" not in c.text for c in p.candidates)
