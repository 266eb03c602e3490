"""Frozen copy (see memstore._migrations.frozen) of how ``l0.captured``
payloads (version 1) were packed into a JSON array and read back, as of
the migration that packed them (0019_storage), and of the message hash.

Works on the dict form only: ``{"session_id", "messages", "agent_id"}``,
each message ``{"id", "role", "text", "occurred_at", "truncated",
"original_bytes"[, "name"]}``.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

VERSION = 1
FIELDS = ("session_id", "messages", "agent_id")

# A message's keys, in the order capture wrote them: only messages with
# exactly these, in this order, are packed, so unpacking gives the same dict
# down to its key order.
_KEYS = ("id", "role", "text", "occurred_at", "truncated", "original_bytes")
_NAMED_KEYS = (*_KEYS, "name")
_ROLE_CODE = {"user": "u", "assistant": "a", "system": "s", "tool": "t", "developer": "d"}
_CODE_ROLE = {c: r for r, c in _ROLE_CODE.items()}
_NO_EXTRA: dict[str, Any] = {}

dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


class PayloadError(ValueError):
    """A stored payload this revision cannot read."""


def content_hash(text: str) -> str:
    """sha256 hex of the text's UTF-8 bytes (lone surrogates kept)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _packed(m: dict[str, Any], at: str) -> list[Any] | None:
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


def pack(payload: dict[str, Any]) -> dict[str, Any] | list[Any]:
    """``[session_id, agent_id, time, [[id, role code, text(, extra)], ...]]``,
    or the dict itself when a message has another shape."""
    messages = payload["messages"]
    if not messages:
        return payload
    at = messages[0].get("occurred_at")
    rows = []
    for m in messages:
        row = _packed(m, str(at)) if isinstance(m, dict) else None
        if row is None:
            return payload
        rows.append(row)
    return [payload["session_id"], payload["agent_id"], at, rows]


def _unpack(data: list[Any]) -> dict[str, Any]:
    try:
        session_id, agent_id, at, rows = data
        messages: list[dict[str, Any]] = []
        for row in rows:
            mid, code, text = row[0], row[1], row[2]
            extra = row[3] if len(row) > 3 else _NO_EXTRA
            m: dict[str, Any] = {
                "id": mid,
                "role": _CODE_ROLE[code],
                "text": text,
                "occurred_at": extra.get("t", at),
                "truncated": "x" in extra,
                "original_bytes": extra["b"] if "b" in extra else _utf8_len(text),
            }
            if "n" in extra:
                m["name"] = extra["n"]
            messages.append(m)
    except (ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
        raise PayloadError(f"l0.captured v1: malformed packed payload: {exc!r}") from exc
    return {"session_id": session_id, "messages": messages, "agent_id": agent_id}


def decode(version: int, data: Any) -> dict[str, Any]:
    """The dict form of a stored payload (packed or not), fields in order."""
    if version != VERSION:
        raise PayloadError(f"l0.captured: stored at version {version}, this revision reads 1")
    if isinstance(data, list):
        return _unpack(data)
    if not isinstance(data, dict):
        raise PayloadError(f"l0.captured v1: payload is {type(data).__name__}")
    unknown = set(data).difference(FIELDS)
    if unknown:
        raise PayloadError(f"l0.captured: unexpected payload fields {sorted(unknown)}")
    if "session_id" not in data or "messages" not in data:
        raise PayloadError("l0.captured: payload without session_id or messages")
    return {"session_id": data["session_id"], "messages": data["messages"],
            "agent_id": data.get("agent_id")}  # fmt: skip
