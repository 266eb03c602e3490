"""L0 event types."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from memstore.events.log import stream_name
from memstore.events.types import Event, registry


@registry.register
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


@registry.register
@dataclass(frozen=True)
class SessionEnded(Event):
    TYPE = "l0.session_ended"
    session_id: str
    reason: str = "end"


@registry.register
@dataclass(frozen=True)
class UserErased(Event):
    """Tombstone left after a user's events were physically removed.

    Carries counts only, never content: it proves the erasure happened."""

    TYPE = "erasure.user"
    erased_user_id: str
    events_removed: int
    reason: str = "request"
    details: dict[str, Any] = field(default_factory=dict)


def l0_stream(user_id: str, session_id: str) -> str:
    return stream_name("l0", user_id, session_id)
