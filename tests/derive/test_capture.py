from __future__ import annotations

import pytest
from sqlalchemy import text

from memstore import Settings
from memstore.errors import InvalidInputError
from memstore.store import Store

pytestmark = pytest.mark.both_backends


def _texts(store: Store, user: str) -> list[str]:
    with store._db.read() as conn:
        return [
            r[0]
            for r in conn.execute(
                text("select text from l0_messages where user_id = :u order by id"), {"u": user}
            )
        ]


def test_capture_turn_stores_both_sides_and_is_idempotent(store: Store) -> None:
    r1 = store.capture_turn("alice", "s1", "I like tea", "Noted!")
    assert len(r1.stored) == 2 and r1.event_position == 1
    r2 = store.capture_turn("alice", "s1", "I like tea", "Noted!")
    assert r2.stored == [] and r2.duplicates == r1.stored and r2.event_position is None
    assert _texts(store, "alice") == ["I like tea", "Noted!"]
    # the same short text in a later, different exchange is a new message
    store.capture_turn("alice", "s1", "I like tea", "You said that before.")
    assert _texts(store, "alice").count("I like tea") == 2


def test_given_message_ids_make_capture_idempotent(store: Store) -> None:
    msgs = [
        {"role": "user", "content": "hello", "id": "m1"},
        {"role": "assistant", "content": "hi", "id": "m2"},
    ]
    store.capture("u", "s", msgs)
    res = store.capture("u", "s", [*msgs, {"role": "user", "content": "new", "id": "m3"}])
    assert res.stored == ["m3"] and res.duplicates == ["m1", "m2"]
    assert _texts(store, "u") == ["hello", "hi", "new"]
    # one event per capture call
    assert [e.type for e in store.read_events()] == ["l0.captured", "l0.captured"]


def test_timestamps_become_occurred_at(store: Store) -> None:
    store.capture(
        "u", "s", [{"role": "user", "content": "old news", "timestamp": "2023-05-08T13:56:00"}]
    )
    (ev,) = store.read_events()
    assert ev.occurred_at.startswith("2023-05-08T13:56")
    with store._db.read() as conn:
        (occ,) = conn.exec_driver_sql("select occurred_at from l0_messages").one()
    assert occ == "2023-05-08T13:56:00.000000Z"
    store.capture("u", "s", [{"role": "user", "content": "epoch ms", "timestamp": 1683554160000}])
    assert store.read_events()[-1].occurred_at.startswith("2023-05-08")


def test_sanitising_strips_injected_blocks_and_keeps_the_rest(store: Store) -> None:
    text = (
        "<memory-context>\nUser likes tea\n</memory-context>\n"
        "Here is code: `x = [i**2 for i in range(3)]` 🎉 我喜欢咖啡"
        "<relevant-memories>old</relevant-memories>"
    )
    store.capture("u", "s", [{"role": "user", "content": text}])
    (stored,) = _texts(store, "u")
    assert "User likes tea" not in stored and "old" not in stored
    assert "`x = [i**2 for i in range(3)]` 🎉 我喜欢咖啡" in stored


def test_empty_messages_are_dropped_and_nothing_is_appended(store: Store) -> None:
    res = store.capture(
        "u", "s", [{"role": "user", "content": "   \n\t"}, {"role": "assistant", "content": ""}]
    )
    assert res.stored == [] and res.dropped_empty == 2
    assert store.read_events() == []
    only_memory = "<memory-context>recalled</memory-context>"
    assert store.capture("u", "s", [{"role": "user", "content": only_memory}]).stored == []


def test_bad_bytes_surrogates_and_nul_are_cleaned(store: Store) -> None:
    store.capture(
        "u",
        "s",
        [
            {"role": "user", "content": b"caf\xc3\xa9 \xff\xfe bytes"},
            {"role": "user", "content": "lone \ud800 surrogate and NUL\x00 byte"},
        ],
    )
    texts = _texts(store, "u")
    assert texts[0].startswith("café ") and "\ufffd" in texts[0]
    assert "\x00" not in texts[1] and "\ud800" not in texts[1]


def test_huge_messages_are_truncated_with_a_marker(target: str) -> None:
    settings = Settings().replace(
        embedder="hashing", scheduler=False, background_indexer=False, max_message_bytes=1024
    )
    with Store.open(target, settings=settings) as s:
        res = s.capture("u", "s", [{"role": "user", "content": "x" * 5000}])
        assert res.truncated == res.stored
        (text,) = _texts(s, "u")
        assert len(text.encode()) <= 1024 and "truncated by memstore" in text
        (ev,) = s.read_events()
        (m,) = ev.payload.to_dict()["messages"]
        assert m["truncated"] is True and m["original_bytes"] == 5000


def test_default_limit_keeps_64k_messages(store: Store) -> None:
    big = "é" * 30000  # 60 000 bytes
    store.capture("u", "s", [{"role": "user", "content": big}])
    assert _texts(store, "u") == [big]


@pytest.mark.parametrize(
    ("user", "session", "messages", "match"),
    [
        ("", "s", [], "user_id must not be empty"),
        ("u", "  ", [], "session_id must not be empty"),
        ("u", "s", [{"role": "wizard", "content": "x"}], "role"),
        ("u", "s", "hello", "list"),
        ("u", "s", [42], "mapping"),
        ("u", "s", [{"role": "user", "content": "x", "timestamp": "yesterday-ish"}], "ISO-8601"),
    ],
)
def test_bad_input_is_a_clear_error_and_stores_nothing(
    store: Store, user: str, session: str, messages: object, match: str
) -> None:
    with pytest.raises(InvalidInputError, match=match):
        store.capture(user, session, messages)  # type: ignore[arg-type]
    assert store.read_events() == []


def test_message_ids_are_scoped_to_their_session(store: Store) -> None:
    store.capture("u", "a", [{"role": "user", "content": "I adopted a cat named Mia", "id": "1"}])
    res = store.capture(
        "u", "b", [{"role": "user", "content": "I started learning piano", "id": "1"}]
    )
    assert res.stored == ["1"]
    assert store.search_conversations("u", "piano", strategy="keyword")


@pytest.mark.parametrize("ts", ["0999-05-01T00:00:00", -62135596800, "10000-01-01"])
def test_out_of_range_timestamps_are_refused(store: Store, ts: object) -> None:
    with pytest.raises(InvalidInputError):
        store.capture("u", "s", [{"role": "user", "content": "x", "timestamp": ts}])
    assert store.read_events() == []


def test_in_memory_database_is_a_clear_error() -> None:
    with pytest.raises(InvalidInputError, match="in-memory"):
        Store.open(":memory:", settings=Settings().replace(embedder="none"))
