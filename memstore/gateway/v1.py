"""memstore's own HTTP API under ``/v1``: everything the CLI can read or do,
with typed requests (validated, 400 with a message on bad input) and the
OpenAPI document at ``/v1/openapi.json``."""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import asdict
from typing import Any, Literal

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field

from memstore.gateway.deps import StoreDep
from memstore.gateway.offload import in_turn_pool
from memstore.porting.events_io import event_to_dict
from memstore.porting.inventory import list_users

router = APIRouter(prefix="/v1", tags=["memstore"])

MemoryType = Literal["persona", "episodic", "instruction"]
Strategy = Literal["keyword", "vector", "hybrid"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Message(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: str
    content: str
    timestamp: str | int | float | None = None
    id: str | None = None


class CaptureBody(_Strict):
    user_id: str = Field(min_length=1)
    session_id: str = Field(min_length=1)
    messages: list[Message] = Field(min_length=1)
    agent_id: str | None = None


class SearchBody(_Strict):
    user_id: str = Field(min_length=1)
    query: str = Field(min_length=1)
    layer: Literal["memories", "conversations"] = "memories"
    limit: int = Field(5, ge=1, le=20)
    strategy: Strategy = "hybrid"
    type: MemoryType | None = None
    scene: str | None = None
    session_id: str | None = None


class RecallBody(_Strict):
    user_id: str = Field(min_length=1)
    query: str
    session_id: str | None = None
    budget_chars: int | None = Field(None, ge=0, le=100_000)


@router.get("/users")
def users(store: StoreDep) -> list[dict[str, Any]]:
    """Every user with sessions, messages, live memories and last activity."""
    return list_users(store)


@router.post("/capture")
async def capture(store: StoreDep, body: CaptureBody) -> dict[str, Any]:
    """Store messages of a session (idempotent by message id)."""
    msgs = [m.model_dump(exclude_none=True) for m in body.messages]
    # Checked here (a 400 at once), committed by the store's writer thread
    # with whatever else is queued: no thread of ours waits for it.
    pending = store.submit_capture(body.user_id, body.session_id, msgs, agent_id=body.agent_id)
    res = await asyncio.wrap_future(pending)
    return {
        "position": res.event_position,
        "stored": res.stored,
        "duplicates": res.duplicates,
        "truncated": res.truncated,
    }


@router.get("/users/{user_id}/memories")
def memories(
    store: StoreDep,
    user_id: str,
    type: MemoryType | None = None,
    include_retired: bool = False,
    generation: int | None = Query(None, ge=0),
) -> list[dict[str, Any]]:
    """A user's L1 memories (active generation unless ``generation``)."""
    # Plain dicts: FastAPI would validate a TypedDict return as a response model.
    mems = store.list_memories(
        user_id, type=type, generation=generation, include_retired=include_retired
    )
    return [m.to_dict() for m in mems]


@router.get("/users/{user_id}/memories/{memory_id}/history")
def memory_history(store: StoreDep, user_id: str, memory_id: str) -> list[dict[str, Any]]:
    """The events that created, changed, placed or retired one memory."""
    return [dict(e) for e in store.memory_history(user_id, memory_id)]


@router.delete("/users/{user_id}/memories/{memory_id}")
def forget_memory(
    store: StoreDep,
    user_id: str,
    memory_id: str,
    reason: str = "user_request",
    with_sources: bool = False,
) -> dict[str, Any]:
    """Retire one memory (its scenes and persona are rewritten without it; its
    history stays in the log), or with ``with_sources=true`` erase it and the
    messages it came from, returning the erasure report."""
    report = store.forget_memory(user_id, memory_id, reason=reason, with_sources=with_sources)
    out: dict[str, Any] = {"forgotten": memory_id, "user_id": user_id}
    return out if report is None else {**out, **dataclasses.asdict(report)}


class ForgetMessagesBody(_Strict):
    message_ids: list[str] = Field(min_length=1)
    reason: str = "request"


class ForgetBetweenBody(_Strict):
    start: str | float | None = None
    end: str | float | None = None
    reason: str = "request"
    dry_run: bool = False


@router.post("/users/{user_id}/messages/forget")
def forget_messages(store: StoreDep, user_id: str, body: ForgetMessagesBody) -> dict[str, Any]:
    """Erase messages by id with everything derived from them; the erasure report."""
    return dataclasses.asdict(store.forget_messages(user_id, body.message_ids, reason=body.reason))


@router.delete("/users/{user_id}/sessions/{session_id}")
def forget_session(
    store: StoreDep, user_id: str, session_id: str, reason: str = "request"
) -> dict[str, Any]:
    """Erase one session with everything derived from it; the erasure report."""
    return dataclasses.asdict(store.forget_session(user_id, session_id, reason=reason))


class RetentionBody(_Strict):
    days: float | None = Field(None, ge=0)
    dry_run: bool = False


@router.post("/retention/run")
def retention_run(store: StoreDep, body: RetentionBody) -> list[dict[str, Any]]:
    """Erase what is past the retention limits (or ``days``) for every user;
    one erasure report per user and limit with something erased."""
    return [
        dataclasses.asdict(r) for r in store.apply_retention(days=body.days, dry_run=body.dry_run)
    ]


@router.post("/users/{user_id}/forget-between")
def forget_between(store: StoreDep, user_id: str, body: ForgetBetweenBody) -> dict[str, Any]:
    """Erase what was said in ``[start, end)`` with everything derived from it."""
    report = store.forget_between(
        user_id, body.start, body.end, reason=body.reason, dry_run=body.dry_run
    )
    return dataclasses.asdict(report)


@router.get("/users/{user_id}/persona")
def persona(store: StoreDep, user_id: str) -> dict[str, Any]:
    """The L3 persona (null before one was derived) and the scene navigation."""
    return {
        "user_id": user_id,
        "persona": store.get_persona(user_id),
        "navigation": store.scene_navigation(user_id),
    }


@router.get("/users/{user_id}/scenes")
def scenes(
    store: StoreDep,
    user_id: str,
    generation: int | None = Query(None, ge=0),
) -> list[dict[str, Any]]:
    """A user's L2 scene blocks, hottest first."""
    return [s.to_dict() for s in store.list_scenes(user_id, generation=generation)]


@router.post("/search")
async def search(store: StoreDep, body: SearchBody) -> list[dict[str, Any]]:
    """Keyword, vector or hybrid search of memories (L1) or conversations (L0)."""
    if body.layer == "memories":
        hits = await in_turn_pool(store.search_memories, body.user_id, body.query,
            type=body.type, scene=body.scene, limit=body.limit, strategy=body.strategy,
        )  # fmt: skip
    else:
        hits = await in_turn_pool(store.search_conversations, body.user_id, body.query,
            session_id=body.session_id, limit=body.limit, strategy=body.strategy,
        )  # fmt: skip
    return [h.to_dict() for h in hits]


@router.post("/recall")
async def recall(store: StoreDep, body: RecallBody) -> dict[str, Any]:
    """The context to inject before a turn, split into the stable part (persona,
    navigation, standing instructions: cache it in the system prompt) and the
    per-turn part (memories relevant to this query)."""
    rec = await in_turn_pool(store.recall, body.user_id, body.query,
        session_id=body.session_id, budget_chars=body.budget_chars,
    )  # fmt: skip
    standing = [asdict(m) for m in rec.memories if m.standing]
    memories = [asdict(m) for m in rec.memories if not m.standing]
    return {
        "text": rec.text,
        "stable": {
            "text": rec.stable,
            "persona": rec.persona,
            "navigation": rec.navigation,
            "instructions": standing,
        },
        "per_turn": {
            "text": rec.per_turn,
            "memories": memories,
            "messages": [asdict(m) for m in rec.messages],
        },
        "truncated": rec.truncated,
        "timed_out": rec.timed_out,
    }


@router.post("/users/{user_id}/sessions/{session_id}/end")
def end_session(
    store: StoreDep,
    user_id: str,
    session_id: str,
    timeout_s: float = Query(30.0, gt=0, le=600),
) -> dict[str, Any]:
    """Extract what the session has pending, then mark it ended."""
    return dict(store.end_session(user_id, session_id, timeout_s=timeout_s))


@router.delete("/users/{user_id}")
def forget_user(store: StoreDep, user_id: str) -> dict[str, Any]:
    """Erase a user (events, memories, vectors, cached embeddings); returns the
    erasure report. A content-free tombstone event records it."""
    report = store.forget_user(user_id)
    return dict(dataclasses.asdict(report))


@router.get("/events")
def events(
    store: StoreDep,
    after: int | None = Query(None, ge=0, description="Position to read after (paging)."),
    limit: int = Query(20, ge=1, le=1000),
    user_id: str | None = None,
) -> list[dict[str, Any]]:
    """The log: the newest ``limit`` events, or the ``limit`` after ``after``."""
    if after is None:
        rows = store.read_events(user_id=user_id) if user_id else store.tail(limit)
        rows = rows[-limit:]
    else:
        rows = store.read_events(after=after, user_id=user_id, limit=limit)
    return [event_to_dict(e) for e in rows]


__all__ = ["router"]
