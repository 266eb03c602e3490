"""The upstream's two delete routes, in its request shapes.

``POST /v2/conversation/delete`` takes ``message_ids`` or ``session_id``
(exactly one) and erases them with everything derived from them, as
``Store.forget_messages`` / ``forget_session``; ``POST /v2/atomic/delete``
takes ``ids`` and retires those memories, as ``Store.forget_memory``
(their scenes and persona text follow at once). As on the other
upstream-compatible routes, ``user_id`` is honoured (default: the gateway's
default user) and the answer adds memstore's erasure report.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from memstore.errors import InvalidInputError
from memstore.gateway.deps import StoreDep

router = APIRouter(prefix="/v2", tags=["upstream-compatible"])


def _user(request: Request, value: str | None) -> str:
    return value or str(request.app.state.config.default_user)


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")


class ConversationDeleteRequest(_Body):
    message_ids: list[str] | None = None
    session_id: str | None = None
    user_id: str | None = None


class AtomicDeleteRequest(_Body):
    ids: list[str] = Field(min_length=1)
    user_id: str | None = None


@router.post("/conversation/delete")
def conversation_delete(
    store: StoreDep, body: ConversationDeleteRequest, request: Request
) -> dict[str, Any]:
    user = _user(request, body.user_id)
    if (body.message_ids is None) == (body.session_id is None):
        raise InvalidInputError("give exactly one of message_ids and session_id")
    if body.session_id is not None:
        report = store.forget_session(user, body.session_id)
    else:
        report = store.forget_messages(user, body.message_ids or [])
    return {"deleted_count": report.messages_removed, **dataclasses.asdict(report)}


@router.post("/atomic/delete")
def atomic_delete(store: StoreDep, body: AtomicDeleteRequest, request: Request) -> dict[str, Any]:
    user = _user(request, body.user_id)
    for memory_id in body.ids:
        store.forget_memory(user, memory_id)
    return {"deleted_count": len(body.ids), "user_id": user}
