"""The records ``Store`` takes and returns, as types (exported from ``memstore``).

Memories, scenes and stored messages are typed, frozen records with one id
each (``Memory.memory_id``, ``Scene.scene_id``, ``Message.message_id``), like
``Hit`` and ``Recall``. They still answer the dict access of earlier versions
(``m["content"]``, and ``m["id"]``, the row number) with a
``DeprecationWarning``, for one minor version. ``NewMessage`` is what
``Store.capture`` takes. The reports are TypedDicts (plain dicts at run time); ``MemoryRow`` and
``SceneRow`` are the dict shapes of the tables the records are read from.
``tests/core/test_public_types.py`` checks that every one of these matches what
the store really returns, key for key.

No imports from the rest of memstore: every part may use these. No
``from __future__ import annotations`` either: TypedDict reads ``NotRequired``
from evaluated annotations when it computes its required keys.
"""

import dataclasses
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar, Literal, NotRequired, TypedDict

# The fixed choices of the API, as types (a checker flags a misspelling).
SearchStrategy = Literal["keyword", "vector", "hybrid"]
MemoryType = Literal["persona", "episodic", "instruction"]
MemoryAction = Literal["add", "replace", "remove"]
Layer = Literal["l1", "l2", "l3"]


class NewMessage(TypedDict, total=False):
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


class MemoryRow(TypedDict):
    """One row of ``l1_memories`` as a dict (what ``Memory`` is read from)."""

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


class SceneRow(TypedDict):
    """One row of ``l2_scenes`` as a dict (``get_scene`` adds when it was created
    and last updated); what ``Scene`` is read from."""

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
    # Every memory whose text the scene's text was built from (a forget of
    # any of them rewrites the scene).
    source_memory_ids: list[str]
    created_at: NotRequired[str]
    updated_at: NotRequired[str]


class _DictAccess:
    """The dict access of earlier versions, kept for one minor version (0.2)."""

    _OLD: ClassVar[tuple[str, ...]] = ()  # keys that are not fields any more

    def _old(self, key: str) -> Any:
        raise KeyError(key)

    def _keys(self) -> list[str]:
        names = [f.name for f in dataclasses.fields(self) if not f.name.startswith("_")]  # type: ignore[arg-type]  # fmt: skip
        shown = [n for n in names if n not in self._optional() or getattr(self, n) is not None]
        return [*self._OLD, *shown]

    def _optional(self) -> tuple[str, ...]:
        return ()

    def __getitem__(self, key: str) -> Any:
        kind = type(self).__name__
        warnings.warn(
            f"{kind}[{key!r}] is deprecated and will be removed in memstore 0.3; "
            + (f"use .{key}" if key not in self._OLD else f"use .{kind.lower()}_id"),
            DeprecationWarning,
            stacklevel=2,
        )
        if key in self._OLD:
            return self._old(key)
        if key not in self._keys():
            raise KeyError(key)
        value = getattr(self, key)
        return list(value) if isinstance(value, tuple) else value

    def get(self, key: str, default: Any = None) -> Any:
        """Deprecated, like ``record[key]``."""
        if key not in self._keys():
            return default
        return self[key]

    def keys(self) -> list[str]:
        """Deprecated: the keys the dict of earlier versions had."""
        return self._keys()

    def __contains__(self, key: object) -> bool:
        return key in self._keys()

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys())

    def to_dict(self) -> dict[str, Any]:
        """The record as a plain dict (lists for sequences), e.g. for JSON."""
        return {
            f.name: list(v) if isinstance(v := getattr(self, f.name), tuple) else v
            for f in dataclasses.fields(self)  # type: ignore[arg-type]
            if not f.name.startswith("_")
        }


@dataclass(frozen=True)
class Memory(_DictAccess):
    """One L1 memory (``list_memories``, ``get_memory``)."""

    memory_id: str
    user_id: str
    generation: int
    type: str
    priority: int
    scene_name: str
    content: str
    content_hash: str
    status: str  # "active", or "retired" (forgotten, superseded, merged)
    origin: str
    source_message_ids: tuple[str, ...]
    activity_start: str | None
    activity_end: str | None
    occurred_at: str | None
    created_position: int
    updated_position: int
    retired_by: str | None
    # The table's row number, which earlier versions returned as m["id"].
    _row_id: int = field(default=0, repr=False, compare=False)

    _OLD: ClassVar[tuple[str, ...]] = ("id",)

    def _old(self, key: str) -> Any:
        return self._row_id

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> "Memory":
        values = {f.name: row[f.name] for f in dataclasses.fields(cls) if f.name != "_row_id"}
        values["source_message_ids"] = tuple(values["source_message_ids"] or ())
        return cls(**values, _row_id=int(row.get("id", 0)))


@dataclass(frozen=True)
class Scene(_DictAccess):
    """One L2 scene (``list_scenes``; ``get_scene`` adds when it was created and
    last updated)."""

    scene_id: str
    user_id: str
    generation: int
    name: str
    summary: str
    body: str
    heat: int
    memory_ids: tuple[str, ...]
    created_position: int
    updated_position: int
    # Every memory whose text the scene's text was built from (a forget of any
    # of them rewrites the scene).
    source_memory_ids: tuple[str, ...] = ()
    created_at: str | None = None
    updated_at: str | None = None

    def _optional(self) -> tuple[str, ...]:
        return ("created_at", "updated_at")

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> "Scene":
        values: dict[str, Any] = {f.name: row.get(f.name) for f in dataclasses.fields(cls)}
        values["memory_ids"] = tuple(values["memory_ids"] or ())
        values["source_memory_ids"] = tuple(values["source_memory_ids"] or ())
        return cls(**values)


@dataclass(frozen=True)
class Message(_DictAccess):
    """One captured (L0) message as stored (``session_messages``,
    ``memory_sources``). ``speaker`` is the participant's ``name`` when the
    host gave one; ``position`` is the log position of the capture that
    stored it. ``memory_ids``: the memories extraction made from it, in
    ``session_messages`` only (None elsewhere)."""

    message_id: str
    session_id: str
    role: str
    speaker: str | None
    text: str
    occurred_at: str
    position: int
    memory_ids: tuple[str, ...] | None = None

    def _optional(self) -> tuple[str, ...]:
        return ("memory_ids",)

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> "Message":
        values: dict[str, Any] = {f.name: row.get(f.name) for f in dataclasses.fields(cls)}
        if values["memory_ids"] is not None:
            values["memory_ids"] = tuple(values["memory_ids"])
        return cls(**values)


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
    """One derivation run in an ``EndSessionReport``; ``by``: whether the
    call ran it or found it done by another worker (the store's scheduler,
    another process)."""

    stage: str
    ok: bool
    run_id: str
    error: str | None
    by: Literal["end_session", "worker"]


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
    # When this user's work runs next: the earliest of its waiting queue items
    # (retries included), its idle timers and its L2 timer; None when nothing waits.
    next_run_at: str | None
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
    "MemoryRow",
    "MemoryType",
    "Message",
    "NewMessage",
    "PipelineStatus",
    "QueuedWork",
    "Scene",
    "SceneRow",
    "SearchStrategy",
    "SessionStatus",
    "StageRun",
    "StoreInfo",
    "VectorSpaceStatus",
]
