"""L0 event types."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from memstore.errors import EventError
from memstore.events.log import stream_name
from memstore.events.types import Event

# A message's keys, in the order capture writes them (memstore.derive.messages.capture):
# only messages with exactly these, in this order, are packed, so unpacking
# gives the same dict down to its key order.
_KEYS = ("id", "role", "text", "occurred_at", "truncated", "original_bytes")
_NAMED_KEYS = (*_KEYS, "name")
_ROLE_CODE = {"user": "u", "assistant": "a", "system": "s", "tool": "t", "developer": "d"}
_CODE_ROLE = {c: r for r, c in _ROLE_CODE.items()}
_NO_EXTRA: dict[str, Any] = {}
_new_object = object.__new__


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _packed(m: dict[str, Any], at: str) -> list[Any] | None:
    """``m`` as ``[id, role code, text]`` plus a dict of what differs from
    the usual (time other than the call's, truncated, original size other
    than the text's, a name); None if it has any other shape (an imported
    event may), which keeps the whole payload in dict form."""
    keys = tuple(m)
    if not (
        keys in (_KEYS, _NAMED_KEYS)
        and type(m.get("id")) is str
        and m.get("role") in _ROLE_CODE
        and type(m.get("text")) is str
        and type(m.get("occurred_at")) is str
        and type(m.get("truncated")) is bool
        and type(m.get("original_bytes")) is int
    ):
        return None
    row: list[Any] = [m["id"], _ROLE_CODE[m["role"]], m["text"]]
    extra: dict[str, Any] = {}
    if m["occurred_at"] != at:
        extra["t"] = m["occurred_at"]
    if m["truncated"]:
        extra["x"] = 1
    if m["original_bytes"] != _utf8_len(m["text"]):
        extra["b"] = m["original_bytes"]
    if "name" in m:
        extra["n"] = m["name"]
    if extra:
        row.append(extra)
    return row


@dataclass(frozen=True)
class MessagesCaptured(Event):
    """One capture call: the messages that were new, already sanitised.

    Each message is ``{"id", "role", "text", "occurred_at", "truncated",
    "original_bytes"}``; ``occurred_at`` is the message's own time when the host
    gave one (a LoCoMo session of 2023 stays in 2023).
    """

    TYPE = "l0.captured"
    session_id: str
    messages: list[dict[str, Any]]
    agent_id: str | None = None

    def pack(self) -> dict[str, Any] | list[Any]:
        """``[session_id, agent_id, time, [[id, role code, text(, extra)], ...]]``.

        The dict form spent ~150 B per message on keys, a timestamp every
        message of a call repeats, ``"truncated":false`` and a size the text
        gives (bytes per message). Lossless: :meth:`unpack` gives
        the dict form back exactly; payloads of another shape stay dicts."""
        if not self.messages:
            return self.to_dict()
        at = self.messages[0].get("occurred_at")
        rows = []
        for m in self.messages:
            row = _packed(m, str(at)) if isinstance(m, dict) else None
            if row is None:
                return self.to_dict()
            rows.append(row)
        return [self.session_id, self.agent_id, at, rows]

    @classmethod
    def unpack(cls, version: int, data: list[Any]) -> dict[str, Any]:
        session_id, messages, agent_id = _unpacked(cls.TYPE, version, data)
        return {"session_id": session_id, "messages": messages, "agent_id": agent_id}

    @classmethod
    def from_packed(cls, version: int, data: list[Any]) -> Event:
        """The event itself, without the field dict and the frozen dataclass's
        ``__init__`` (one ``object.__setattr__`` per field): a rebuild decodes
        one of these per capture. Equal to ``from_dict(unpack(...))`` in
        ``==``, ``vars`` and ``repr`` (tests/events/test_eventlog.py)."""
        session_id, messages, agent_id = _unpacked(cls.TYPE, version, data)
        ev = _new_object(cls)
        ev.__dict__.update(session_id=session_id, messages=messages, agent_id=agent_id)
        return ev


def _unpacked(type_: str, version: int, data: list[Any]) -> tuple[Any, list[dict[str, Any]], Any]:
    """``(session_id, messages, agent_id)`` of a packed payload."""
    try:
        session_id, agent_id, at, rows = data
        messages: list[dict[str, Any]] = []
        add = messages.append
        for row in rows:
            mid, code, text = row[0], row[1], row[2]
            extra = row[3] if len(row) > 3 else _NO_EXTRA
            m: dict[str, Any] = {
                "id": mid,
                "role": _CODE_ROLE[code],
                "text": text,
                "occurred_at": extra.get("t", at),
                "truncated": "x" in extra,
                # ASCII text (most of it) is as long in UTF-8 as in characters.
                "original_bytes": extra["b"]
                if "b" in extra
                else len(text)
                if text.isascii()
                else _utf8_len(text),
            }
            if "n" in extra:
                m["name"] = extra["n"]
            add(m)
    except (ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
        raise EventError(f"{type_} v{version}: malformed packed payload: {exc!r}") from exc
    return session_id, messages, agent_id


@dataclass(frozen=True)
class SessionEnded(Event):
    TYPE = "l0.session_ended"
    session_id: str
    reason: str = "end"


@dataclass(frozen=True)
class UserErased(Event):
    """Tombstone left after a user's events were physically removed.

    Carries counts only, never content: it proves the erasure happened."""

    TYPE = "erasure.user"
    erased_user_id: str
    events_removed: int
    reason: str = "request"
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ContentErased(Event):
    """Tombstone left after part of a user's data was physically removed
    (messages, a session, a memory with its sources, a time range).

    Counts and the kind of erasure only, never content or ids: it proves the
    erasure happened, and tells a derivation that started before it that its
    result may hold erased text (``derive.queries.erased_since``)."""

    TYPE = "erasure.content"
    erased_user_id: str
    grain: str
    events_removed: int
    events_rewritten: int
    messages_removed: int
    memories_removed: int
    reason: str = "request"
    # ``erased_key`` of every erased message: an import of the same message
    # again is refused (memstore.porting.erased). Hashes, so the tombstone
    # still names no id.
    erased_keys: list[str] = field(default_factory=list)


def erased_key(user_id: str, session_id: str, message_id: str) -> str:
    """What a tombstone keeps of an erased message: a hash of its coordinates."""
    raw = f"{user_id}\x1f{session_id}\x1f{message_id}".encode()
    return hashlib.sha256(raw).hexdigest()[:24]


def l0_stream(user_id: str, session_id: str) -> str:
    return stream_name("l0", user_id, session_id)
