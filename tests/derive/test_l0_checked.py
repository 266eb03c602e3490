"""Message keys a capture read absent vouch for its own transaction only
(memstore.derive.messages.checked): the L0 projection writes them without a
savepoint there, and guards everything else."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import event

from memstore.derive.messages import checked
from memstore.derive.messages.capture import capture_event, prepare_messages
from memstore.store import Store
from memstore.timeutil import system_clock

pytestmark = pytest.mark.both_backends


def test_keys_noted_in_a_transaction_vouch_for_nothing_in_the_next(store: Store) -> None:
    key = ("u", "s", "m1")
    with store._db.write() as conn:
        assert not checked.all_new(conn, [key])
        checked.note_new(conn, "u", "s", ["m1"])
        assert checked.all_new(conn, [key])
        assert not checked.all_new(conn, [key, ("u", "s", "m2")])
        assert not checked.all_new(conn, [("u", "other", "m1")])
    with store._db.write() as conn:
        assert not checked.all_new(conn, [key])


def _append_directly(store: Store, message_id: str, text: str) -> None:
    """A capture event of user "u", session "s", appended past the capture
    path (nobody checks its message id)."""
    fresh = prepare_messages(
        "s",
        [{"role": "user", "content": text, "id": message_id}],
        now=system_clock(),
        max_bytes=1000,
    )
    store.append([capture_event("u", "s", None, fresh)])


def test_an_event_appended_past_the_capture_path_keeps_the_duplicate_guard(
    store: Store,
) -> None:
    store.capture("u", "s", [{"role": "user", "content": "the dinner is on Friday", "id": "m1"}])
    # The same id appended directly, with other text: nobody checked it, so
    # the projection finds it through the unique index and skips it.
    _append_directly(store, "m1", "zebra crossing")
    got = store.capture(
        "u",
        "s",
        [
            {"role": "user", "content": "and Saturday", "id": "m2"},
            {"role": "user", "content": "again", "id": "m1"},
        ],
    )
    assert got.stored == ["m2"] and got.duplicates == ["m1"]
    with store._db.read() as conn:
        rows = conn.exec_driver_sql("SELECT message_id, text FROM l0_messages ORDER BY id").all()
    assert [tuple(r) for r in rows] == [("m1", "the dinner is on Friday"), ("m2", "and Saturday")]
    assert [h.text for h in store.search_conversations("u", "zebra", strategy="keyword")] == []
    assert [h.text for h in store.search_conversations("u", "saturday", strategy="keyword")] == [
        "and Saturday"
    ]


def test_a_capture_inserts_without_the_guard_and_an_append_with_it(store: Store) -> None:
    seen: list[str] = []

    def on_execute(_c: Any, _cur: Any, statement: str, *_: Any) -> None:
        seen.append(statement)

    engine = store._db.engine
    # A listener also makes every statement go through SQLAlchemy, where it is seen.
    event.listen(engine, "before_cursor_execute", on_execute)
    try:
        store.capture("u", "s", [{"role": "user", "content": "the dinner is on Friday"}])
        captured = [s for s in seen if "l0_rows" in s]
        seen.clear()
        _append_directly(store, "m9", "zebra crossing")
        appended = [s for s in seen if "l0_rows" in s]
    finally:
        event.remove(engine, "before_cursor_execute", on_execute)
    assert captured == []
    assert appended == ["SAVEPOINT l0_rows", "RELEASE SAVEPOINT l0_rows"]
