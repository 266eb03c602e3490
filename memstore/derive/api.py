"""The functions the Store, the scheduler and the CLI call.

Everything here takes the ``DeriveContext`` first (``store.derivation``: the
kernel plus search, never the Store itself); reads show the user's active
generation unless ``generation=`` names another one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, TypedDict, Unpack, cast

from sqlalchemy import Connection, func, select

from memstore.db.schema import l1_memories
from memstore.derive.events import (
    GenerationStarted,
    L1Extracted,
    MemoryForgotten,
    MemoryWritten,
    PersonaUpdated,
    ScenesUpdated,
)
from memstore.derive.follow import retire
from memstore.derive.generations import activate_generation, list_generations, rederive
from memstore.derive.memories import rules
from memstore.derive.memories.extract import run_l1
from memstore.derive.persona.write import persona_due, run_l3
from memstore.derive.prompts import MAX_MEMORY_CHARS, MEMORY_TYPES, clip
from memstore.derive.queries import (
    active_generation,
    memories,
    memory,
    persona,
    resolve_generation,
    scene_named,
    scenes,
)
from memstore.derive.runs import RunOutcome, append_checked, new_id
from memstore.derive.scenes.build import run_l2
from memstore.errors import InvalidInputError, NotFoundError
from memstore.records import MemoryChange, MemoryRow, SceneRow

if TYPE_CHECKING:
    from memstore.derive.context import DeriveContext

ORIGINS = ("user_stated", "host")
HISTORY_TYPES = [
    L1Extracted.TYPE,
    MemoryWritten.TYPE,
    MemoryForgotten.TYPE,
    GenerationStarted.TYPE,
    ScenesUpdated.TYPE,
]


def list_memories(
    store: DeriveContext,
    user_id: str,
    *,
    type: str | None = None,
    generation: int | None = None,
    include_retired: bool = False,
) -> list[MemoryRow]:
    with store.db.read() as conn:
        gen = resolve_generation(conn, user_id, generation)
        rows = memories(conn, user_id, gen, type=type, include_retired=include_retired)
    return cast(list[MemoryRow], rows)  # l1_memories' columns: tests/core/test_public_types.py


def list_scenes(
    store: DeriveContext, user_id: str, *, generation: int | None = None
) -> list[SceneRow]:
    with store.db.read() as conn:
        rows = scenes(conn, user_id, resolve_generation(conn, user_id, generation))
    return cast(list[SceneRow], rows)  # l2_scenes' columns: tests/core/test_public_types.py


def get_scene(
    store: DeriveContext, user_id: str, name: str, *, generation: int | None = None
) -> SceneRow | None:
    with store.db.read() as conn:
        row = scene_named(conn, user_id, resolve_generation(conn, user_id, generation), name)
    return cast(SceneRow | None, row)


def get_persona(store: DeriveContext, user_id: str, *, generation: int | None = None) -> str | None:
    with store.db.read() as conn:
        row = persona(conn, user_id, resolve_generation(conn, user_id, generation))
    return str(row["persona"]) if row else None


def forget_memory(
    store: DeriveContext, user_id: str, memory_id: str, reason: str = "user_request"
) -> None:
    """Retire a live memory of the user's active generation (it leaves search,
    recall and scenes' live lists); history stays.

    Anything else is refused with ``NotFoundError`` rather than quietly doing
    nothing visible: a memory of another (older) generation — retiring it there
    would leave the fact in what the user sees — or one already retired. The
    message names the live copy in the active generation when there is one;
    forgetting that is the caller's explicit choice.
    """
    _row, since = _live(store, user_id, memory_id, "forgotten")
    # The scenes and the persona built from it are rewritten in the same
    # append (memstore/derive/follow.py).
    retire(store, user_id, memory_id, reason, since=since)


def _live(
    store: DeriveContext, user_id: str, memory_id: str, verb: str
) -> tuple[dict[str, Any], int]:
    """The live memory ``memory_id`` of the user's active generation and the log head
    read with it; ``NotFoundError`` (saying nothing was ``verb``) otherwise."""
    with store.db.read() as conn:
        since = store.log.last_position(conn)
        row = memory(conn, user_id, memory_id)
        active = active_generation(conn, user_id)
        copies = live_copies(conn, user_id, memory_id, active)
    if row is None:
        raise NotFoundError(f"user {user_id!r} has no memory {memory_id!r}")
    if int(row["generation"]) != active:
        hint = (
            f"; its live copy there is {copies[0]!r}"
            if copies
            else "; `memstore memories list` shows the live ones"
        )
        raise NotFoundError(
            f"memory {memory_id!r} belongs to generation {row['generation']}, not to "
            f"user {user_id!r}'s active generation {active}: nothing {verb}{hint}"
        )
    if row["status"] != "active":
        raise NotFoundError(f"memory {memory_id!r} is already {row['status']}: nothing {verb}")
    return row, since


def get_memory(store: DeriveContext, user_id: str, memory_id: str) -> MemoryRow:
    """One of the user's memories by id (any generation or status)."""
    with store.db.read() as conn:
        row = memory(conn, user_id, memory_id)
    if row is None:
        raise NotFoundError(f"user {user_id!r} has no memory {memory_id!r}")
    return cast(MemoryRow, row)


def update_memory(
    store: DeriveContext, user_id: str, memory_id: str, content: str, origin: str = "user_stated"
) -> str:
    """Replace the text of a live memory, found by id (not by its text as
    ``write_memory``'s replace does); its type and scene stay. Returns its id."""
    if origin not in ORIGINS:
        raise InvalidInputError(f"origin must be one of {ORIGINS}, got {origin!r}")
    content = clip(" ".join(str(content).split()), MAX_MEMORY_CHARS)
    if not content:
        raise InvalidInputError("memory content must not be empty")
    target, since = _live(store, user_id, memory_id, "updated")
    decision = _decision(content, str(target["type"]), str(target["scene_name"]), target)
    decision["reason"] = f"{origin} update"
    append_checked(
        store,
        user_id,
        [MemoryWritten(int(target["generation"]), origin, decision)],
        since=since,
        occurred_at=store.clock(),
    )
    return memory_id


def _decision(
    content: str, type: str, scene: str, target: dict[str, Any] | None
) -> dict[str, Any]:
    """A store (or, with ``target``, update) decision for a written memory."""
    return {
        "action": "update" if target is not None else "store",
        "new_id": new_id(),
        "target_ids": [target["memory_id"]] if target is not None else [],
        "content": content,
        "type": type,
        "priority": -1 if type == "instruction" else 70,
        "scene_name": scene or (target["scene_name"] if target is not None else ""),
        "source_message_ids": [],
        "activity_start": None,
        "activity_end": None,
        "occurred_at": None,
        "candidate": content,
        "reason": "",
        "degraded_from": None,
    }


def live_copies(conn: Connection, user_id: str, memory_id: str, generation: int) -> list[str]:
    """Live memories of ``generation`` copied (directly or through other
    generations) from ``memory_id``: copies are named ``<id>@<generation>``."""
    prefix = f"{memory_id}@"
    rows = conn.execute(
        select(l1_memories.c.memory_id).where(
            l1_memories.c.user_id == user_id,
            l1_memories.c.generation == generation,
            l1_memories.c.status == "active",
            func.substr(l1_memories.c.memory_id, 1, len(prefix)) == prefix,
        )
    )
    return sorted(str(r[0]) for r in rows)


def _find(store: DeriveContext, user_id: str, text: str, generation: int) -> dict[str, Any] | None:
    """The live memory a host means by ``text``: same text, else the most similar."""
    with store.db.read() as conn:
        live = memories(conn, user_id, generation)
    key = rules.normalize(text)
    for m in live:
        if rules.normalize(m["content"]) == key:
            return m
    best = max(live, key=lambda m: rules.similarity(text, m["content"]), default=None)
    if best is not None and rules.similarity(text, best["content"]) >= 0.5:
        return best
    return None


class MemoryFields(TypedDict, total=False):
    """``write_memory``'s optional arguments (``Store.write_memory`` documents them)."""

    old_content: str | None
    type: str
    scene: str
    origin: str


def write_memory(
    store: DeriveContext,
    user_id: str,
    action: Literal["add", "replace", "remove"],
    content: str,
    **fields: Unpack[MemoryFields],
) -> str | None:
    """Mirror a host's memory tool. Returns the memory id written or removed,
    or None when ``remove`` found nothing to remove. ``type`` defaults to
    persona, ``origin`` to user_stated; ``old_content`` names the memory
    ``replace`` or ``remove`` means."""
    old_content = fields.get("old_content")
    type = fields.get("type", "persona")
    scene = fields.get("scene", "")
    origin = fields.get("origin", "user_stated")
    if type not in MEMORY_TYPES:
        raise InvalidInputError(f"type must be one of {MEMORY_TYPES}, got {type!r}")
    if origin not in ORIGINS:
        raise InvalidInputError(f"origin must be one of {ORIGINS}, got {origin!r}")
    content = clip(" ".join(str(content).split()), MAX_MEMORY_CHARS)
    with store.db.read() as conn:
        since = store.log.last_position(conn)
        gen = resolve_generation(conn, user_id, None)
    if action == "remove":
        target = _find(store, user_id, old_content or content, gen)
        if target is None:
            return None
        retire(store, user_id, str(target["memory_id"]), f"{origin}_remove", since=since)
        return str(target["memory_id"])
    if not content:
        raise InvalidInputError("memory content must not be empty")
    if action not in ("add", "replace"):
        raise InvalidInputError(f"action must be add, replace or remove, got {action!r}")
    target = (
        _find(store, user_id, old_content, gen) if action == "replace" and old_content else None
    )
    if action == "add":
        same = _find(store, user_id, content, gen)
        if same is not None and rules.normalize(same["content"]) == rules.normalize(content):
            return str(same["memory_id"])  # a mirror re-sending what we hold
    decision = _decision(content, type, scene, target)
    decision["reason"] = f"{origin} {action}"
    append_checked(
        store,
        user_id,
        [MemoryWritten(gen, origin, decision)],
        since=since,
        occurred_at=store.clock(),
    )
    return str(target["memory_id"]) if target is not None else str(decision["new_id"])


def memory_history(store: DeriveContext, user_id: str, memory_id: str) -> list[MemoryChange]:
    """The events that created, changed, retired or placed one of ``user_id``'s
    memories, oldest first. Another user's memory id is not found."""
    with store.db.read() as conn:
        row = memory(conn, user_id, memory_id)
        if row is None:
            raise NotFoundError(f"user {user_id!r} has no memory {memory_id!r}")
        events = store.log.read(conn, types=HISTORY_TYPES, user_id=user_id)
    base_id, _, copied_gen = memory_id.rpartition("@")
    out: list[dict[str, Any]] = []  # built up key by key; the shape is MemoryChange
    for ev in events:
        p = ev.payload
        entry: dict[str, Any] = {
            "position": ev.position,
            "type": ev.type,
            "occurred_at": ev.occurred_at,
            "recorded_at": ev.recorded_at,
        }
        if isinstance(p, L1Extracted | MemoryWritten):
            ds = p.decisions if isinstance(p, L1Extracted) else [p.decision]
            for d in ds:
                if d["new_id"] == memory_id or memory_id in d["target_ids"]:
                    role = "created" if d["new_id"] == memory_id else "target"
                    out.append(
                        {
                            **entry,
                            "action": d["action"],
                            "role": role,
                            "content": d["content"],
                            "candidate": d["candidate"],
                            "source_message_ids": d["source_message_ids"],
                            "reason": d["reason"],
                            "deriver": getattr(
                                p, "deriver", p.origin if isinstance(p, MemoryWritten) else ""
                            ),
                            "model": getattr(p, "model", ""),
                            "prompt_version": getattr(p, "prompt_version", ""),
                            "run_id": getattr(p, "run_id", ""),
                            "session_id": getattr(p, "session_id", ""),
                        }
                    )
        elif isinstance(p, MemoryForgotten) and p.memory_id == memory_id:
            out.append({**entry, "action": "forget", "reason": p.reason})
        elif isinstance(p, GenerationStarted) and base_id and copied_gen == str(p.generation):
            out.append(
                {**entry, "action": "copy", "copied_from": base_id, "generation": p.generation}
            )
        elif isinstance(p, ScenesUpdated):
            for op in p.operations:
                if memory_id in op.get("memory_ids", []):
                    out.append(
                        {
                            **entry,
                            "action": f"scene_{op['op']}",
                            "scene_id": op["scene_id"],
                            "scene": op.get("name"),
                        }
                    )
    return cast(list[MemoryChange], out)


__all__ = [
    "PersonaUpdated",
    "RunOutcome",
    "activate_generation",
    "forget_memory",
    "get_persona",
    "list_generations",
    "list_memories",
    "list_scenes",
    "memory_history",
    "persona_due",
    "rederive",
    "run_l1",
    "run_l2",
    "run_l3",
    "write_memory",
]
