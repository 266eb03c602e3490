"""The upstream gateway's routes, with its request and response JSON.

Clients written for TencentDB Agent Memory (its Hermes plugin, OpenClaw,
scripts) call these unchanged. Differences are deliberate and additive:
``user_id`` is honoured everywhere (default ``"default"``; the upstream
ignores it, so users shared memories), ``session_key`` is the session, bad
input is a 400 with a message (the upstream answers 500 to malformed JSON),
and ``/capture`` accepts an empty assistant reply.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, cast

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException

from memstore.gateway.deps import StoreDep
from memstore.gateway.offload import in_turn_pool
from memstore.porting.seed import SeedSession, parse_seed, seed_store
from memstore.records import MemoryType
from memstore.search import Hit
from memstore.store import Store
from memstore.validate import check_id, opt_id

router = APIRouter(tags=["upstream-compatible"])

DEFAULT_USER = "default"


class _Body(BaseModel):
    # Upstream clients send fields this server does not know; ignore them.
    model_config = ConfigDict(extra="ignore")


class RecallRequest(_Body):
    query: str = Field(min_length=1)
    session_key: str = Field(min_length=1)
    user_id: str | None = None


class CaptureRequest(_Body):
    user_content: str = Field(min_length=1)
    assistant_content: str = ""
    session_key: str = Field(min_length=1)
    session_id: str | None = None
    user_id: str | None = None
    messages: list[dict[str, Any]] | None = None


class MemorySearchRequest(_Body):
    query: str = Field(min_length=1)
    limit: int = 5
    type: str | None = None
    scene: str | None = None
    user_id: str | None = None


class ConversationSearchRequest(_Body):
    query: str = Field(min_length=1)
    limit: int = 5
    session_key: str | None = None
    user_id: str | None = None


class SessionEndRequest(_Body):
    session_key: str = Field(min_length=1)
    user_id: str | None = None


class SeedRequest(_Body):
    data: Any
    session_key: str | None = None
    strict_round_role: bool = False
    auto_fill_timestamps: bool = True
    config_override: dict[str, Any] | None = None  # accepted; settings are the server's
    user_id: str | None = None


def _user(request: Request, value: str | None) -> str:
    # The upstream's Hermes plugin sends user_id with capture and recall but not
    # with its two search tools: those go to the configured default user. A
    # user_id that is sent must be a valid one: "" or " alice" is a 400, never
    # the default user or "alice".
    if value is None:
        return str(request.app.state.config.default_user)
    return check_id("user_id", value)


def _strategy(store: Store) -> str:
    # The upstream's names: "hybrid" with embeddings, "fts" without.
    return "hybrid" if store.embedding_model is not None else "fts"


@router.get("/health")
async def health(store: StoreDep, request: Request) -> dict[str, Any]:
    from memstore import __version__

    embeddings = store.embedding_model is not None
    return {
        "status": "ok" if embeddings else "degraded",
        "version": __version__,
        "uptime": int(time.monotonic() - request.app.state.started),
        "stores": {"vectorStore": True, "embeddingService": embeddings},
    }


@router.post("/recall")
async def recall(store: StoreDep, body: RecallRequest, request: Request) -> dict[str, Any]:
    user = _user(request, body.user_id)
    rec = await in_turn_pool(store.recall, user, body.query, session_id=body.session_key)
    return {"context": rec.text, "strategy": _strategy(store), "memory_count": len(rec.memories)}


@router.post("/capture")
async def capture(store: StoreDep, body: CaptureRequest, request: Request) -> dict[str, Any]:
    messages: list[dict[str, Any]] = body.messages or [
        {"role": "user", "content": body.user_content},
        {"role": "assistant", "content": body.assistant_content},
    ]
    user = _user(request, body.user_id)
    res = await asyncio.wrap_future(store.submit_capture(user, body.session_key, messages))
    return {"l0_recorded": len(res.stored), "scheduler_notified": store.has_pipeline}


@router.post("/search/memories")
async def search_memories(
    store: StoreDep, body: MemorySearchRequest, request: Request
) -> dict[str, Any]:
    hits = await in_turn_pool(store.search_memories,
        _user(request, body.user_id), body.query,
        type=cast(MemoryType | None, body.type or None),  # the store checks it
        scene=body.scene or None, limit=body.limit,
    )  # fmt: skip
    return {"results": memories_text(hits), "total": len(hits), "strategy": _strategy(store)}


@router.post("/search/conversations")
async def search_conversations(
    store: StoreDep, body: ConversationSearchRequest, request: Request
) -> dict[str, Any]:
    hits = await in_turn_pool(store.search_conversations,
        _user(request, body.user_id), body.query,
        session_id=opt_id("session_key", body.session_key), limit=body.limit,
    )  # fmt: skip
    return {"results": conversations_text(hits), "total": len(hits)}


@router.post("/session/end")
def session_end(store: StoreDep, body: SessionEndRequest, request: Request) -> dict[str, Any]:
    report = store.end_session(
        _user(request, body.user_id),
        body.session_key,
        timeout_s=request.app.state.config.session_end_timeout_s,
    )
    return {"flushed": not report.get("timed_out", False)}


@router.post("/seed")
def seed(store: StoreDep, body: SeedRequest, request: Request) -> Any:
    config = request.app.state.config
    started = time.monotonic()
    user = _user(request, body.user_id)
    sessions = parse_seed(
        body.data,
        fallback_session_key=opt_id("session_key", body.session_key) or "",
        strict_round_role=body.strict_round_role,
        auto_fill_timestamps=body.auto_fill_timestamps,
        start_ms=int(time.time() * 1000),
    )
    _check_seed_size(sessions, config.seed_max_sessions, config.seed_max_messages)
    summary = seed_store(store, sessions, user)
    # The upstream's seed runs extraction before answering; so does this one,
    # within one deadline for the whole request (what is left stays queued).
    deadline = started + config.seed_timeout_s
    flushed = True
    for key in dict.fromkeys(s.session_key for s in sessions):
        left = max(0.0, deadline - time.monotonic())
        report = store.end_session(user, key, timeout_s=left)
        flushed = flushed and not report.get("timed_out", False)
    # No "output_dir": the upstream's answer named its data directory, and a
    # server's paths are nobody's business over HTTP.
    return {
        "sessions_processed": summary.sessions_processed,
        "rounds_processed": summary.rounds_processed,
        "messages_processed": summary.messages_processed,
        "l0_recorded": summary.l0_recorded,
        "duration_ms": int((time.monotonic() - started) * 1000),
        "flushed": flushed,
    }


def _check_seed_size(sessions: list[SeedSession], max_sessions: int, max_messages: int) -> None:
    messages = sum(s.message_count for s in sessions)
    if len(sessions) > max_sessions or messages > max_messages:
        raise HTTPException(
            413,
            f"seed too large: {len(sessions)} sessions and {messages} messages; one request "
            f"takes at most {max_sessions} sessions and {max_messages} messages (split it, "
            "or load a large history with `memstore import`)",
        )


def memories_text(hits: list[Hit]) -> str:
    if not hits:
        return "No matching memories found."
    lines = [f"Found {len(hits)} matching memories:", ""]
    for h in hits:
        prio = " (global instruction)" if (h.priority or 0) < 0 else f" (priority: {h.priority})"
        scene = f" [scene: {h.scene}]" if h.scene else ""
        lines += [f"- **[{h.type}]**{prio}{scene} (score: {h.score:.3f})", f"  {h.text}", ""]
    return "\n".join(lines)


def conversations_text(hits: list[Hit]) -> str:
    if not hits:
        return "No matching conversation messages found."
    lines = [f"Found {len(hits)} matching message(s):", ""]
    for h in hits:
        lines += [
            "---",
            f"**[{h.role}]** Session: {h.session_id} [{h.occurred_at}] (score: {h.score:.3f})",
            "",
            h.text,
            "",
        ]
    return "\n".join(lines)


__all__ = ["conversations_text", "memories_text", "router"]
