"""Derivation event types: the recorded OUTCOMES of L1/L2/L3 runs.

Every LLM (or rule) decision is stored here with its result text and the ids
it created, so the projections replay outcomes and never call a model. Ids of
new memories and scenes are generated when the event is created, never in a
projection (a projection must be a pure function of the log).

All derivation events of a user go to the stream ``derive/<user_id>`` (escaped
by ``stream_name``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from memstore.events.log import stream_name
from memstore.events.types import Event

DERIVERS = ("llm", "hermes", "rules", "host")


def derive_stream(user_id: str) -> str:
    return stream_name("derive", user_id)


@dataclass(frozen=True)
class L1Extracted(Event):
    """One extraction batch of one session: the cursor it covered and every
    dedup decision, applied atomically by the L1 projection.

    ``cursor_position`` is the highest ``l0.captured`` event position covered
    (batches never split a capture event). Each decision is a dict::

        {"action": "store"|"update"|"merge"|"skip"|"supersede",
         "new_id": str,            # id the resulting memory gets when it is new
         "target_ids": [str],      # existing memories the action touches
         "content", "type", "priority", "scene_name",
         "source_message_ids": [str], "activity_start", "activity_end",
         "occurred_at": str,       # domain time: the newest source message
         "candidate": str,         # the extracted text, before dedup
         "reason": str, "degraded_from": str | None}
    """

    TYPE = "l1.extracted"
    session_id: str
    run_id: str
    generation: int
    deriver: str
    model: str
    prompt_version: str
    cursor_position: int
    message_ids: list[str]
    decisions: list[dict[str, Any]]
    usage: dict[str, int] | None = None


@dataclass(frozen=True)
class MemoryWritten(Event):
    """A host mirrored its own memory tool (add / replace / remove) or a user
    stated a memory directly. One decision in the same shape as L1Extracted."""

    TYPE = "l1.written"
    generation: int
    origin: str
    decision: dict[str, Any]


@dataclass(frozen=True)
class MemoryForgotten(Event):
    """Retire a memory on request; the history stays in the log."""

    TYPE = "l1.forgotten"
    memory_id: str
    reason: str = "user_request"


@dataclass(frozen=True)
class ScenesUpdated(Event):
    """One L2 run: scene operations with their final text and ids.

    Each operation: ``{"op": "create"|"update"|"merge"|"delete"|"rewrite",
    "scene_id", "source_scene_ids", "name", "summary", "body", "memory_ids"}``;
    for create and merge ``scene_id`` is the new scene's id, generated at event
    creation. ``rewrite`` (written when a memory is forgotten) replaces a
    scene's text and memory list, keeping its heat; it may name its
    ``source_memory_ids``.
    ``memory_cursor`` is the highest L1 ``updated_position`` the run covered.
    """

    TYPE = "l2.scenes_updated"
    run_id: str
    generation: int
    deriver: str
    model: str
    prompt_version: str
    memory_cursor: int
    memory_ids: list[str]
    operations: list[dict[str, Any]]
    persona_refresh: bool = False
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class PersonaUpdated(Event):
    """One L3 run: the whole new persona text (at most 2000 characters).

    ``memory_ids``: every memory whose text the persona may hold (the rule
    deriver's input; for an LLM, the memories and scenes its prompt showed
    plus the previous persona's). None for events written before it was
    recorded: such a persona counts as built from every memory."""

    TYPE = "l3.persona_updated"
    run_id: str
    generation: int
    deriver: str
    model: str
    prompt_version: str
    persona: str
    trigger: str
    scene_ids: list[str] = field(default_factory=list)
    memory_ids: list[str] | None = None


@dataclass(frozen=True)
class RunFailed(Event):
    """A derivation run that failed: nothing was advanced, nothing is lost.

    ``stage`` is "l1", "l2" or "l3"; ``session_id`` is "" for l2/l3."""

    TYPE = "pipeline.run_failed"
    stage: str
    session_id: str
    error: str
    attempt: int
    run_id: str
    generation: int | None = None


@dataclass(frozen=True)
class GenerationStarted(Event):
    """A re-derive began building ``generation`` for this user.

    With ``from_layer`` "l2" or "l3" the projections copy the layers below it
    from ``base_generation`` (ids suffixed ``@<generation>``), so only the
    requested layers are derived again."""

    TYPE = "derive.generation_started"
    generation: int
    from_layer: str
    base_generation: int
    run_id: str


@dataclass(frozen=True)
class GenerationActivated(Event):
    """Projections show ``generation`` for this user from now on."""

    TYPE = "derive.generation_activated"
    generation: int
    previous: int
    reason: str = "rederive"


L1_TYPES = frozenset(
    {
        L1Extracted.TYPE,
        MemoryWritten.TYPE,
        MemoryForgotten.TYPE,
        GenerationStarted.TYPE,
        GenerationActivated.TYPE,
        RunFailed.TYPE,
    }
)

__all__ = [
    "DERIVERS",
    "L1_TYPES",
    "GenerationActivated",
    "GenerationStarted",
    "L1Extracted",
    "MemoryForgotten",
    "MemoryWritten",
    "PersonaUpdated",
    "RunFailed",
    "ScenesUpdated",
    "derive_stream",
]
