"""How capture events are stored (bytes per message): packed
``l0.captured`` payloads decode to exactly the dict form, odd shapes stay
dicts, the dict form of older files still reads, and capture writes no
idempotency key yet stays idempotent."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memstore import Settings
from memstore.derive.messages.events import MessagesCaptured
from memstore.errors import EventError
from memstore.events.log import encode_payload
from memstore.events.types import registry
from memstore.porting.events_io import event_to_dict
from memstore.store import Store

_SETTINGS = Settings().replace(embedder="hashing", scheduler=False, background_indexer=False)


def _open(path: Path) -> Store:
    return Store.open(path, settings=_SETTINGS)


def _raw_payloads(store: Store) -> list[tuple[Any, str | None]]:
    with store._db.read() as conn:
        rows = conn.exec_driver_sql(
            "SELECT payload, idempotency_key FROM events WHERE type = 'l0.captured' "
            "ORDER BY position"
        ).all()
    return [(json.loads(p), k) for p, k in rows]


def _roundtrip(p: MessagesCaptured) -> MessagesCaptured:
    stored = json.loads(encode_payload(p))
    out = registry.decode(MessagesCaptured.TYPE, MessagesCaptured.VERSION, stored)
    assert isinstance(out, MessagesCaptured)
    return out


def test_capture_stores_a_packed_payload_that_reads_back_as_the_dict_form(tmp_path: Path) -> None:
    with _open(tmp_path / "m.db") as s:
        s.capture_turn("u", "s1", "I moved to Lisbon", "Nice!", timestamp="2024-05-01T10:00:00Z")
        s.capture(
            "u",
            "s1",
            [
                {"role": "user", "content": "x" * 300, "name": "Ana", "timestamp": 1714557600},
                {"role": "tool", "content": "café ☕ 咖啡", "timestamp": 1714557660},
                {"role": "system", "content": "a\x00b"},  # cleaned: size differs from the text
            ],
            agent_id=None,
        )
        raw = _raw_payloads(s)
        events = [e for e in s.read_events(user_id="u") if e.type == "l0.captured"]
    assert [type(p) for p, _ in raw] == [list, list]
    # No key: capture dedupes on message ids in its own transaction.
    assert [k for _, k in raw] == [None, None]
    first, second = (e.payload for e in events)
    assert isinstance(first, MessagesCaptured) and isinstance(second, MessagesCaptured)
    assert [m["role"] for m in first.messages] == ["user", "assistant"]
    assert first.messages[0] == {
        "id": first.messages[0]["id"],
        "role": "user",
        "text": "I moved to Lisbon",
        "occurred_at": "2024-05-01T10:00:00.000000Z",
        "truncated": False,
        "original_bytes": 17,
    }
    named, tool, system = second.messages
    assert named["name"] == "Ana" and named["occurred_at"] != tool["occurred_at"]
    assert tool["original_bytes"] == len("café ☕ 咖啡".encode())
    assert system["original_bytes"] == 3 and system["text"] != "a\x00b"
    # Exports show the dict form.
    exported = event_to_dict(events[1])["payload"]
    assert exported == second.to_dict() and isinstance(exported["messages"][0], dict)


def test_truncated_messages_keep_their_flag_and_size(tmp_path: Path) -> None:
    settings_ = _SETTINGS.replace(max_message_bytes=1024)
    with Store.open(tmp_path / "m.db", settings=settings_) as s:
        res = s.capture("u", "s", [{"role": "user", "content": "word " * 1000}])
        (ev,) = [e for e in s.read_events(user_id="u") if e.type == "l0.captured"]
    assert res.truncated
    assert isinstance(ev.payload, MessagesCaptured)
    (m,) = ev.payload.messages
    assert m["truncated"] is True and m["original_bytes"] == 5000


def test_a_retried_capture_writes_nothing_without_a_key(tmp_path: Path) -> None:
    with _open(tmp_path / "m.db") as s:
        a = s.capture_turn("u", "s", "hello there", "hi", turn_id="t1")
        b = s.capture_turn("u", "s", "hello there", "hi", turn_id="t1")
        assert a.stored == ["t1:0", "t1:1"] and b.stored == [] and b.event_position is None
        assert len(_raw_payloads(s)) == 1


def test_old_dict_payloads_still_decode(tmp_path: Path) -> None:
    """A row as files before 0019 hold it: the dict form, with a key."""
    old = {
        "session_id": "s",
        "messages": [
            {
                "id": "m1",
                "role": "user",
                "text": "from an old file",
                "occurred_at": "2024-01-01T00:00:00.000000Z",
                "truncated": False,
                "original_bytes": 16,
            }
        ],
        "agent_id": "hermes",
    }
    with _open(tmp_path / "m.db") as s:
        with s._db.write() as conn:
            conn.exec_driver_sql(
                "INSERT INTO events (position, event_id, stream, seq, type, version, user_id, "
                "payload, occurred_at, recorded_at, idempotency_key) VALUES (1, 'e1', 'l0/u/s', "
                "1, 'l0.captured', 1, 'u', ?, '2024-01-01T00:00:00.000000Z', "
                "'2024-01-01T00:00:00.000000Z', 'l0:abc')",
                (json.dumps(old),),
            )
        s.rebuild()
        (ev,) = s.read_events(user_id="u")
        assert ev.payload.to_dict() == old and ev.idempotency_key == "l0:abc"
        assert [h.text for h in s.search_conversations("u", "old file")] == ["from an old file"]


_CAPTURED = {"id": "m", "role": "user", "text": "t", "occurred_at": "x", "truncated": False,
             "original_bytes": 1}  # fmt: skip


@pytest.mark.parametrize(
    "message",
    [
        {k: v for k, v in _CAPTURED.items() if k != "truncated"},
        {**_CAPTURED, "id": 1},
        {**_CAPTURED, "role": "robot"},
        {**_CAPTURED, "truncated": 0},
        {**_CAPTURED, "extra": [1]},
        dict(reversed(_CAPTURED.items())),
    ],
)
def test_payloads_of_another_shape_stay_dicts(message: dict[str, Any]) -> None:
    p = MessagesCaptured(session_id="s", messages=[message])
    assert isinstance(p.pack(), dict)
    assert _roundtrip(p) == p


def test_a_malformed_packed_payload_is_an_event_error() -> None:
    with pytest.raises(EventError, match="malformed packed payload"):
        registry.decode(MessagesCaptured.TYPE, 1, ["s", None, "t", [["m", "?", "x"]]])
    with pytest.raises(EventError, match="never writes"):
        registry.decode("l0.session_ended", 1, ["s"])


_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
_fields = {
    "id": _text,
    "role": st.sampled_from(["user", "assistant", "system", "tool", "developer"]),
    "text": _text,
    "occurred_at": st.sampled_from(["2024-01-01T00:00:00.000000Z", "2025-02-03T04:05:06Z"]),
    "truncated": st.booleans(),
    "original_bytes": st.integers(0, 10**6),
    "name": st.one_of(st.none(), _text),
}
# Capture's own order (with or without a name), and any other order.
_message = st.one_of(
    st.fixed_dictionaries({k: v for k, v in _fields.items() if k != "name"}),
    st.fixed_dictionaries(_fields),
    st.permutations(list(_fields)).flatmap(
        lambda keys: st.fixed_dictionaries({k: _fields[k] for k in keys})
    ),
)


@settings(max_examples=200, deadline=None)
@given(
    session=_text,
    agent=st.one_of(st.none(), _text),
    messages=st.lists(_message, max_size=5),
)
def test_packing_is_lossless(
    session: str, agent: str | None, messages: list[dict[str, Any]]
) -> None:
    p = MessagesCaptured(session_id=session, messages=messages, agent_id=agent)
    in_order = all(list(m) == [k for k in _fields if k in m] for m in messages)
    assert isinstance(p.pack(), list) == (bool(messages) and in_order)
    back = _roundtrip(p)
    assert back == p
    # Same key order too: exports stay byte-identical.
    assert json.dumps(back.to_dict()) == json.dumps(p.to_dict())
    # Built without the dataclass __init__ (MessagesCaptured.from_packed),
    # yet the same object in every way a reader can see, and still frozen.
    assert list(vars(back).items()) == list(vars(p).items())
    assert repr(back) == repr(p)
    with pytest.raises(dataclasses.FrozenInstanceError):
        back.session_id = "other"  # type: ignore[misc]
