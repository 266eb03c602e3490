"""Turning what Hermes hands ``sync_turn`` into the messages memstore captures.

Hermes passes the whole conversation (history, tool calls, tool results) and
puts the recalled ``<memory-context>`` block into an ``api_content`` sidecar
of the user message; ``content`` is what the user typed. Only the last turn
is new, and only its user text and assistant text are conversation: tool
traffic is the agent's own working and would bury the facts in noise.
Injected memory blocks are stripped again by capture itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

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


def last_turn(messages: Sequence[Mapping[str, Any]], id_prefix: str) -> list[dict[str, Any]]:
    """The last user message and the assistant text that answered it.

    Uses ``content``, never ``api_content`` (which carries the recalled
    memories). Assistant messages that only call tools, and tool results,
    are left out. Ids are ``id_prefix`` + the position in the transcript:
    stable when Hermes retries a sync, distinct for two turns that happen to
    say the same thing ("yes" / "ok"), which content hashes would merge."""
    start = None
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if isinstance(m, Mapping) and m.get("role") == "user":
            start = i
            break
    if start is None:
        return []
    out: list[dict[str, Any]] = []
    for i, m in enumerate(messages[start:], start):
        if not isinstance(m, Mapping):
            continue
        role = m.get("role")
        if role not in ("user", "assistant"):
            continue
        text = text_of(m.get("content"))
        if text.strip():
            out.append({"role": role, "content": text, "id": f"{id_prefix}{i}"})
    return out


def delegation_message(task: str, result: str, child_session_id: str) -> dict[str, Any]:
    """A subagent's work as one assistant message in the parent's conversation."""
    body = (
        f"[delegated to a subagent{' ' + child_session_id if child_session_id else ''}]\n"
        f"Task: {text_of(task)}\nResult: {text_of(result)}"
    )
    if len(body) > DELEGATION_MAX_CHARS:
        body = body[: DELEGATION_MAX_CHARS - 1] + "…"
    return {"role": "assistant", "content": body}


__all__ = ["delegation_message", "last_turn", "text_of"]
