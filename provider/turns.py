"""Turning what Hermes hands ``sync_turn`` into the messages memstore captures.

Hermes passes the whole conversation (history, tool calls, tool results) and
puts the recalled ``<memory-context>`` block into an ``api_content`` sidecar
of the user message; ``content`` is what the user typed. Only the last turn
is new, and only its user text and assistant text are conversation: tool
traffic is the agent's own working and would bury the facts in noise.
Injected memory blocks are stripped again by capture itself.
"""

from __future__ import annotations

import hashlib
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from memstore.errors import MemstoreError
from memstore.timeutil import parse_when, to_iso

DELEGATION_MAX_CHARS = 4000


def text_of(content: object) -> str:
    """Plain text of a message ``content``: a string, or OpenAI content parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence) and not isinstance(content, bytes | bytearray):
        parts = []
        for part in content:
            if isinstance(part, Mapping) and part.get("type") in ("text", "input_text"):
                parts.append(str(part.get("text") or ""))
            elif isinstance(part, str):
                parts.append(part)
        return "\n".join(p for p in parts if p)
    return str(content)


class TurnIds:
    """Ids for captured turns: unique per turn, the same for a retried sync.

    A message the host identified (``id`` / ``message_id``) keeps that id.
    Otherwise the id hashes the session, the turn's position, its texts and
    its time: the user message's own timestamp when Hermes stamped one (the
    same in every process), else the moment this instance first saw the turn.
    Hermes' api_server builds an agent per request, so two concurrent requests
    in one session load the same history and sit at the same position; the
    position alone (what ids used to be) made the second one a "duplicate"
    and dropped it. A sync retried with the same turn finds its first time in
    a small per-instance memo, so it is still recognised as a duplicate.
    """

    MEMO = 256

    def __init__(self) -> None:
        self._first_seen: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()

    def _when(self, fingerprint: str) -> str:
        with self._lock:
            when = self._first_seen.get(fingerprint)
            if when is None:
                when = f"{time.time_ns()}-{uuid.uuid4().hex[:8]}"
                self._first_seen[fingerprint] = when
                while len(self._first_seen) > self.MEMO:
                    self._first_seen.popitem(last=False)
            return when

    def assign(
        self, session: str, position: int, turn: list[dict[str, Any]], stamp: str | None
    ) -> list[dict[str, Any]]:
        """Set ``id`` on each message of ``turn`` (in place) and return it."""
        body = "\x1e".join(f"{m['role']}\x1f{m['content']}" for m in turn)
        fingerprint = _sha(f"{session}\x1f{position}\x1f{body}")
        when = stamp if stamp is not None else self._when(fingerprint)
        digest = _sha(f"{fingerprint}\x1f{when}")[:32]
        for k, m in enumerate(turn):
            host = m.pop("host_id", None)
            m["id"] = f"hermes:{host}" if host else f"t:{digest}:{k}"
        return turn


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _host_id(m: Mapping[str, Any]) -> str | None:
    for key in ("message_id", "id"):
        value = m.get(key)
        if isinstance(value, str | int) and not isinstance(value, bool) and str(value).strip():
            return str(value).strip()[:200]
    return None


def _stamp(m: Mapping[str, Any]) -> str | None:
    raw = m.get("timestamp")
    if raw in (None, ""):
        return None
    try:
        return to_iso(parse_when(raw))
    except MemstoreError:
        return None  # a stamp memstore cannot read must not cost the turn


def last_turn(
    messages: Sequence[Mapping[str, Any]],
) -> tuple[int, list[dict[str, Any]], str | None]:
    """The last user message and the assistant text that answered it.

    Returns the user message's position, the messages (role, content, and the
    host's id and timestamp when it gave them) and the user message's
    timestamp. Uses ``content``, never ``api_content`` (which carries the
    recalled memories). Assistant messages that only call tools, and tool
    results, are left out."""
    start = None
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if isinstance(m, Mapping) and m.get("role") == "user":
            start = i
            break
    if start is None:
        return -1, [], None
    out: list[dict[str, Any]] = []
    for m in messages[start:]:
        if not isinstance(m, Mapping):
            continue
        role = m.get("role")
        if role not in ("user", "assistant"):
            continue
        text = text_of(m.get("content"))
        if not text.strip():
            continue
        item: dict[str, Any] = {"role": role, "content": text}
        host, stamp = _host_id(m), _stamp(m)
        if host:
            item["host_id"] = host
        if stamp:
            item["timestamp"] = stamp
        out.append(item)
    return start, out, _stamp(messages[start])


def delegation_message(task: str, result: str, child_session_id: str) -> dict[str, Any]:
    """A subagent's work as one assistant message in the parent's conversation."""
    body = (
        f"[delegated to a subagent{' ' + child_session_id if child_session_id else ''}]\n"
        f"Task: {text_of(task)}\nResult: {text_of(result)}"
    )
    if len(body) > DELEGATION_MAX_CHARS:
        body = body[: DELEGATION_MAX_CHARS - 1] + "…"
    return {"role": "assistant", "content": body}


__all__ = ["TurnIds", "delegation_message", "last_turn", "text_of"]
