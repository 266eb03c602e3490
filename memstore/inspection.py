"""Read-only views of one user's data that hosts showing the store to a
person need (the inspector, the MCP server): sessions and their messages in
order, a memory's source messages. The Store hands the DeriveContext in;
nothing here writes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

from sqlalchemy import Connection, func, select

from memstore.db.schema import l0_messages
from memstore.derive.api import memory_history
from memstore.derive.events import L1Extracted
from memstore.derive.queries import memory as memory_row
from memstore.errors import NotFoundError
from memstore.usercounts import users

if TYPE_CHECKING:
    from memstore.derive.context import DeriveContext

# Rows at most in one session page: a session is a conversation, and a page
# of tens of thousands of messages helps nobody.
MAX_SESSION_MESSAGES = 5000


class StoredMessage(TypedDict):
    """One captured (L0) message as stored."""

    message_id: str
    session_id: str
    role: str
    speaker: str | None
    text: str
    occurred_at: str
    position: int


class SessionMessage(StoredMessage):
    """A message of a session, with the memories extraction made from it."""

    memory_ids: list[str]


class SessionSummary(TypedDict):
    session_id: str
    messages: int
    first_at: str
    last_at: str


_COLS = (
    l0_messages.c.message_id,
    l0_messages.c.session_id,
    l0_messages.c.role,
    l0_messages.c.speaker,
    l0_messages.c.text,
    l0_messages.c.occurred_at,
    l0_messages.c.position,
)


def _stored(r: object) -> StoredMessage:
    m = r._mapping  # type: ignore[attr-defined]
    return {
        "message_id": str(m["message_id"]),
        "session_id": str(m["session_id"]),
        "role": str(m["role"]),
        "speaker": m["speaker"],
        "text": str(m["text"]),
        "occurred_at": str(m["occurred_at"]),
        "position": int(m["position"]),
    }


def list_sessions(ctx: DeriveContext, user_id: str) -> list[SessionSummary]:
    """The user's sessions, most recent first."""
    c = l0_messages.c
    q = (
        select(c.session_id, func.count(), func.min(c.occurred_at), func.max(c.occurred_at))
        .where(c.user_id == user_id)
        .group_by(c.session_id)
    )
    with ctx.db.read() as conn:
        rows = conn.execute(q).all()
    out: list[SessionSummary] = [
        {"session_id": str(s), "messages": int(n), "first_at": str(a), "last_at": str(b)}
        for s, n, a, b in rows
    ]
    return sorted(out, key=lambda s: (s["last_at"], s["session_id"]), reverse=True)


def session_messages(ctx: DeriveContext, user_id: str, session_id: str) -> list[SessionMessage]:
    """A session's messages in the order they were captured, each with the
    memories extraction made from it (every generation, retired ones too)."""
    c = l0_messages.c
    q = (
        select(*_COLS)
        .where(c.user_id == user_id, c.session_id == session_id)
        .order_by(c.position, c.id)
        .limit(MAX_SESSION_MESSAGES)
    )
    with ctx.db.read() as conn:
        rows = conn.execute(q).all()
        made = _produced(ctx, conn, user_id, session_id)
    if not rows:
        raise NotFoundError(f"user {user_id!r} has no session {session_id!r}")
    out: list[SessionMessage] = []
    for r in rows:
        m = _stored(r)
        out.append({**m, "memory_ids": made.get(m["message_id"], [])})
    return out


def _produced(
    ctx: DeriveContext, conn: Connection, user_id: str, session_id: str
) -> dict[str, list[str]]:
    """message id -> ids of the memories the session's extractions made from it."""
    out: dict[str, list[str]] = {}
    for ev in ctx.log.read(conn, types=[L1Extracted.TYPE], user_id=user_id):
        p = ev.payload
        if not isinstance(p, L1Extracted) or p.session_id != session_id:
            continue
        for d in p.decisions:
            if d["action"] == "skip" or not d.get("new_id"):
                continue
            for src in d.get("source_message_ids") or ():
                ids = out.setdefault(str(src), [])
                if d["new_id"] not in ids:
                    ids.append(str(d["new_id"]))
    return out


def memory_sources(ctx: DeriveContext, user_id: str, memory_id: str) -> list[StoredMessage]:
    """The messages a memory was made from, oldest first; never another
    user's. Hosts number messages per session ("m1" in every session), so the
    sessions the memory's history names narrow the ids down when it has any."""
    sessions = {
        str(e["session_id"])
        for e in memory_history(ctx, user_id, memory_id)
        if e.get("session_id") and e.get("source_message_ids")
    }
    with ctx.db.read() as conn:
        row = memory_row(conn, user_id, memory_id)
        if row is None:
            raise NotFoundError(f"user {user_id!r} has no memory {memory_id!r}")
        ids = [str(s) for s in row.get("source_message_ids") or ()]
        if not ids:
            return []
        c = l0_messages.c
        q = select(*_COLS).where(c.user_id == user_id, c.message_id.in_(ids))
        if sessions:
            q = q.where(c.session_id.in_(sorted(sessions)))
        rows = conn.execute(q.order_by(c.occurred_at, c.position)).all()
    return [_stored(r) for r in rows]


__all__ = [
    "MAX_SESSION_MESSAGES",
    "SessionMessage",
    "SessionSummary",
    "StoredMessage",
    "list_sessions",
    "memory_sources",
    "session_messages",
    "users",
]
