"""The L0 projection's fast write path: a rebuild gives the same rows and the
same FTS index as capturing did, a message id the log holds twice is stored
once (found by the unique index, not a lookup per batch), and the indexes a
rebuild drops while replaying are back — or never gone, if it fails."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from memstore.bench.snapshot import snapshot
from memstore.derive.messages.capture import capture_event, prepare_messages
from memstore.derive.messages.events import MessagesCaptured, l0_stream
from memstore.events.log import NewEvent
from memstore.store import Store
from tests.derive_support import fts_index

_TEXTS = [
    "I am allergic to peanuts and my sister lives in Lyon.",
    "Noted 👍",
    "Bob: thanks!",
    "我每天早上喝咖啡, then I learn Python",
    "学Python编程 with ﾊｲ and 好的",
    "Café au lait, crème brûlée, İstanbul, Straße",
    "route66 peanut_butter 12th of May",
    "ok",
]


def _state(store: Store) -> tuple[dict[str, Any], list[tuple[Any, ...]]]:
    with store._db.read() as conn:
        return snapshot(store), fts_index(conn)


def _captured(user: str, session: str, msgs: list[tuple[str, str]]) -> NewEvent:
    """A capture event holding exactly ``msgs`` (id, text), whatever is stored."""
    now = datetime(2026, 1, 1, tzinfo=UTC)
    fresh = prepare_messages(
        session,
        [{"role": "user", "content": t, "id": i} for i, t in msgs],
        now=now,
        max_bytes=100_000,
    )
    return capture_event(user, session, None, fresh)


def test_rebuild_gives_the_rows_and_fts_index_capture_gave(store: Store) -> None:
    for i in range(60):
        user = f"u{i % 7}"
        store.capture(
            user,
            f"s{i % 3}",
            [
                {"role": "user", "content": _TEXTS[i % len(_TEXTS)] + f" #{i}"},
                {"role": "assistant", "content": _TEXTS[(i + 3) % len(_TEXTS)]},
            ],
        )
    before = _state(store)
    assert before[1], "the FTS index holds terms"
    store.rebuild()
    assert _state(store) == before


def test_a_message_id_the_log_holds_twice_is_stored_once(store: Store) -> None:
    first = _captured("u1", "s1", [("m1", "the dinner was on Friday"), ("m2", "in Lyon")])
    # Appended directly (capture would have dropped it): m1 again with other
    # text, in its own event and repeated within one event, next to a new m3.
    again = NewEvent(
        l0_stream("u1", "s1"),
        MessagesCaptured(
            session_id="s1",
            messages=[
                {**first.payload.messages[0], "text": "zebra crossing"},  # type: ignore[attr-defined]
                {**first.payload.messages[0], "id": "m3", "text": "kiwi"},  # type: ignore[attr-defined]
                {**first.payload.messages[0], "id": "m3", "text": "mango"},  # type: ignore[attr-defined]
            ],
        ),
        user_id="u1",
    )
    store.append([first])
    store.append([again])
    with store._db.read() as conn:
        rows = conn.exec_driver_sql("SELECT message_id, text FROM l0_messages ORDER BY id").all()
        terms = {t for t, *_ in fts_index(conn)}
    assert [tuple(r) for r in rows] == [
        ("m1", "the dinner was on Friday"),
        ("m2", "in Lyon"),
        ("m3", "kiwi"),
    ]
    assert "kiwi" in terms and "zebra" not in terms and "mango" not in terms
    incremental = _state(store)
    store.rebuild()
    assert _state(store) == incremental


def _index_sql(store: Store) -> list[tuple[str, str]]:
    with store._db.read() as conn:
        return [
            (str(n), str(s))
            for n, s in conn.exec_driver_sql(
                "SELECT name, sql FROM sqlite_master WHERE type = 'index' "
                "AND tbl_name = 'l0_messages' ORDER BY name"
            ).all()
        ]


def test_indexes_dropped_for_the_replay_are_back_after_it(store: Store) -> None:
    store.capture("u1", "s1", [{"role": "user", "content": "hello there"}])
    indexes = _index_sql(store)
    assert any(n == "ix_l0_messages_user_id_occurred_at" for n, _ in indexes)
    store.rebuild()
    assert _index_sql(store) == indexes


def test_a_failed_rebuild_leaves_indexes_and_rows_as_they_were(store: Store) -> None:
    for i in range(20):
        store.capture(f"u{i % 2}", "s", [{"role": "user", "content": f"fact {i}"}])
    indexes, before = _index_sql(store), _state(store)

    def fail(_n: int) -> None:
        raise RuntimeError("killed mid-replay")

    with pytest.raises(RuntimeError):
        store.rebuild(progress=fail)
    assert _index_sql(store) == indexes
    assert _state(store) == before
    with store._db.write() as conn:  # the connection's cache size is back too
        assert conn.exec_driver_sql("PRAGMA cache_size").scalar_one() == -2000


def _hash_settings(store: Store) -> list[tuple[Any, ...]]:
    with store._db.read() as conn:
        return [
            tuple(r)
            for t in ("l0_fts", "l1_fts")
            for r in conn.exec_driver_sql(f"SELECT '{t}', v FROM {t}_config WHERE k = 'hashsize'")
        ]


def test_the_fts_buffer_a_rebuild_enlarges_is_as_it_was_after(store: Store) -> None:
    # bulk_load gives FTS5 a larger term buffer while replaying: none is left
    # behind (FTS5's default), and one set before is kept, after a rebuild
    # that commits and after one that fails.
    store.capture("u1", "s1", [{"role": "user", "content": "hello there"}])
    store.rebuild()
    assert _hash_settings(store) == []
    with store._db.write() as conn:
        conn.exec_driver_sql("INSERT INTO l0_fts(l0_fts, rank) VALUES ('hashsize', 2000000)")

    def fail(_n: int) -> None:
        raise RuntimeError("killed mid-replay")

    with pytest.raises(RuntimeError):
        store.rebuild(progress=fail)
    assert _hash_settings(store) == [("l0_fts", 2000000)]
    store.rebuild()
    assert _hash_settings(store) == [("l0_fts", 2000000)]
