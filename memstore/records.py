"""The records ``Store`` takes and returns, as types (exported from ``memstore``).

TypedDicts, not classes: callers (the provider, the CLI, the gateway, JSON
output) index these as dicts, and they stay plain dicts at run time. The
richer results that were always objects stay dataclasses where they live
(``Recall``, ``Hit``, ``CaptureResult``, ``ErasureReport``, ``RunOutcome``).
``tests/test_public_types.py`` checks that every one of these matches what
the store really returns, key for key.

No imports from the rest of memstore: every part may use these. No
``from __future__ import annotations`` either: TypedDict reads ``NotRequired``
from evaluated annotations when it computes its required keys.
"""

from datetime import datetime
from typing import Literal, NotRequired, TypedDict

# The fixed choices of the API, as types (a checker flags a misspelling).
SearchStrategy = Literal["keyword", "vector", "hybrid"]
MemoryType = Literal["persona", "episodic", "instruction"]
MemoryAction = Literal["add", "replace", "remove"]
Layer = Literal["l1", "l2", "l3"]


class Message(TypedDict, total=False):
    """One message handed to ``Store.capture``: ``role`` and ``content`` are
    required (``text`` is accepted for ``content``); ``timestamp`` (ISO 8601
    text, datetime or epoch seconds; ``occurred_at`` is accepted for it), a
    stable ``id`` (so a re-sent message is not stored twice) and the
    speaker's ``name`` are optional."""

    role: str
    content: str | bytes
    text: str
    timestamp: str | datetime | float | int | None
    occurred_at: str | datetime | float | int | None
    id: str | None
    name: str | None


class Memory(TypedDict):
    """One L1 memory (``list_memories``)."""

    id: int
    memory_id: str
    user_id: str
    generation: int
    type: str
    priority: int
    scene_name: str
    content: str
    content_hash: str
    status: str
    origin: str
    source_message_ids: list[str]
    activity_start: str | None
    activity_end: str | None
    occurred_at: str | None
    created_position: int
    updated_position: int
    retired_by: str | None


class Scene(TypedDict):
    """One L2 scene (``list_scenes``; ``get_scene`` adds when it was created
    and last updated)."""

    scene_id: str
    user_id: str
    generation: int
    name: str
    summary: str
    body: str
    heat: int
    memory_ids: list[str]
    created_position: int
    updated_position: int
    created_at: NotRequired[str]
    updated_at: NotRequired[str]


class MemoryChange(TypedDict):
    """One entry of ``memory_history``: the event, and what it did to the memory.

    ``action`` is the decision (store/update/merge...), ``forget``, ``copy``
    (into a new generation) or ``scene_<op>``; the other keys depend on it."""

    position: int
    type: str
    occurred_at: str
    recorded_at: str
    action: str
    role: NotRequired[str]
    content: NotRequired[str]
    candidate: NotRequired[str]
    source_message_ids: NotRequired[list[str]]
    reason: NotRequired[str]
    deriver: NotRequired[str]
    model: NotRequired[str]
    prompt_version: NotRequired[str]
    run_id: NotRequired[str]
    session_id: NotRequired[str]
    scene_id: NotRequired[str]
    scene: NotRequired[str | None]
    copied_from: NotRequired[str]
    generation: NotRequired[int]


class StageRun(TypedDict):
    stage: str
    ok: bool
    run_id: str
    error: str | None


class EndSessionReport(TypedDict):
    """What ``end_session`` did; ``timed_out`` means pending work stays queued."""

    user_id: str
    session_id: str
    pending_before: int
    pending_after: int
    ran: list[StageRun]
    timed_out: bool
    timeout_s: float


class QueuedWork(TypedDict):
    stage: str
    session_id: str
    run_after: str
    attempts: int
    running: bool
    last_error: str | None


class SessionStatus(TypedDict):
    session_id: str
    rounds_pending: int
    messages_pending: int
    threshold: int
    extractions: int
    cursor_position: int
    last_activity_at: str | None
    last_l1_at: str | None
    failures: int
    last_error: str | None
    ended_at: str | None
    idle_timer: str | None


class PipelineStatus(TypedDict):
    """One user's pipeline: when each layer last ran, queued work, sessions, timers."""

    user_id: str
    last_activity_at: str | None
    last_l1_at: str | None
    last_l2_at: str | None
    last_l3_at: str | None
    l2_pending_input: bool
    l2_failures: int
    l3_failures: int
    last_error: str | None
    l2_timer: str | None
    queued: list[QueuedWork]
    sessions: list[SessionStatus]


class VectorSpaceStatus(TypedDict):
    dims: int
    ready: bool
    pending: int
    quarantined: int


class EmbeddingStatus(TypedDict, total=False):
    """``{"embedder": "none", "vector_search": False}`` without an embedder,
    else the model and the state of the message (l0) and memory (l1) vectors."""

    embedder: str
    vector_search: bool
    model_id: str
    l0: VectorSpaceStatus
    l1: VectorSpaceStatus


class StoreInfo(TypedDict):
    path: str
    revision: str | None
    events: int


__all__ = [
    "EmbeddingStatus",
    "EndSessionReport",
    "Layer",
    "Memory",
    "MemoryAction",
    "MemoryChange",
    "MemoryType",
    "Message",
    "PipelineStatus",
    "QueuedWork",
    "Scene",
    "SearchStrategy",
    "SessionStatus",
    "StageRun",
    "StoreInfo",
    "VectorSpaceStatus",
]
