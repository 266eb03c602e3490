"""The MCP tools and resources, over one store and one user per call.

Every tool acts for the user ``user_for`` names — the pinned user of a
stdio server, or the user of the HTTP request — and no tool takes a user id
as an argument, so a call cannot reach another user's data. Store errors
come back as tool errors with the store's message.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from typing import Any, Literal, TypeVar, cast

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError

from memstore.errors import InvalidInputError, MemstoreError
from memstore.store import Store

# The request header that names the user on the HTTP transport.
USER_HEADER = "x-memstore-user"
MAX_LIST = 500

MemoryType = Literal["persona", "episodic", "instruction"]
Strategy = Literal["keyword", "vector", "hybrid"]

INSTRUCTIONS = (
    "Long-term memory of one user. Call `recall` with the user's message before answering "
    "to get what you should know about them; `remember` a fact or preference they state; "
    "`forget` a memory they ask you to drop (ids come from `list_memories` or "
    "`search_memories`). The persona and scenes are resources."
)


# The headers of the HTTP request being handled (None on stdio). Set by the
# middleware below; tools run in worker threads, which copy it.
_HEADERS: ContextVar[Mapping[str, str] | None] = ContextVar("memstore_mcp_headers", default=None)


async def _remember_request(
    ctx: ServerRequestContext[Any, Any], call_next: CallNext
) -> HandlerResult:
    headers = getattr(ctx.request, "headers", None)
    token = _HEADERS.set(headers)
    try:
        return await call_next(ctx)
    finally:
        _HEADERS.reset(token)


F = TypeVar("F", bound=Callable[..., Any])


def _reported(fn: F) -> F:
    """A store error becomes a tool error the model reads (the store's
    message), not a crash that hides it."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except MemstoreError as exc:
            raise ToolError(str(exc)) from exc

    return cast(F, wrapper)


def _memory(m: Any) -> dict[str, Any]:
    keys = ("memory_id", "content", "type", "priority", "scene_name", "status", "generation")
    return {k: m[k] for k in keys}


def build_server(
    store_for: Callable[[], Store],
    user_for: Callable[[Mapping[str, str] | None], str],
    *,
    read_only: bool = False,
) -> MCPServer:
    """The server: ``store_for()`` gives the open store, ``user_for(headers)``
    the user a call acts for (``headers``: the HTTP request's, None on stdio).
    ``read_only`` leaves out every tool that writes."""
    from memstore import __version__

    mcp = MCPServer(
        "memstore", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING",
        middleware=[_remember_request],
    )  # fmt: skip

    def _user() -> str:
        return user_for(_HEADERS.get())

    @mcp.tool()
    @_reported
    def recall(query: str, budget_chars: int | None = None) -> str:
        """What the agent should know about the user for this message: persona,
        standing instructions, scene navigation and the memories and conversation
        excerpts relevant to `query` (empty when nothing is relevant)."""
        return store_for().recall(_user(), query, budget_chars=budget_chars).text

    @mcp.tool()
    @_reported
    def search_memories(
        query: str,
        type: MemoryType | None = None,
        scene: str | None = None,
        limit: int = 5,
        strategy: Strategy = "hybrid",
    ) -> list[dict[str, Any]]:
        """Search the user's live memories (facts, preferences, events, instructions)."""
        hits = store_for().search_memories(
            _user(), query, type=type, scene=scene, limit=limit, strategy=strategy
        )
        return [
            {"memory_id": h.ref, "content": h.text, "type": h.type, "scene": h.scene,
             "score": round(h.score, 4)}
            for h in hits
        ]  # fmt: skip

    @mcp.tool()
    @_reported
    def search_conversations(
        query: str,
        session_id: str | None = None,
        limit: int = 5,
        strategy: Strategy = "hybrid",
    ) -> list[dict[str, Any]]:
        """Search the user's past conversation messages (optionally one session)."""
        hits = store_for().search_conversations(
            _user(), query, session_id=session_id, limit=limit, strategy=strategy
        )
        return [
            {"message_id": h.ref, "session_id": h.session_id, "role": h.role,
             "occurred_at": h.occurred_at, "text": h.text, "score": round(h.score, 4)}
            for h in hits
        ]  # fmt: skip

    @mcp.tool()
    @_reported
    def list_memories(
        type: MemoryType | None = None,
        include_retired: bool = False,
        limit: int = 100,
    ) -> list[dict[str, Any]]:
        """The user's memories of the active generation, most important first."""
        if isinstance(limit, bool) or not 1 <= limit <= MAX_LIST:
            raise InvalidInputError(f"limit must be between 1 and {MAX_LIST}, got {limit}")
        mems = store_for().list_memories(_user(), type=type, include_retired=include_retired)
        mems.sort(key=lambda m: (-m["priority"], m["memory_id"]))
        return [_memory(m) for m in mems[:limit]]

    if not read_only:

        @mcp.tool()
        @_reported
        def remember(content: str, type: MemoryType = "persona", scene: str = "") -> dict[str, Any]:
            """Add a memory the user stated (recorded as an event, like a memory tool's
            add: a near-duplicate updates the existing memory instead)."""
            user = _user()
            mid = store_for().write_memory(
                user, "add", content, type=type, scene=scene, origin="user_stated"
            )
            return {"memory_id": mid, "user_id": user}

        @mcp.tool()
        @_reported
        def forget(memory_id: str, reason: str = "user_request") -> dict[str, Any]:
            """Retire one of the user's memories (its history stays in the log)."""
            user = _user()
            store_for().forget_memory(user, memory_id, reason=reason)
            return {"forgotten": memory_id, "user_id": user}

        @mcp.tool()
        @_reported
        def capture(session_id: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
            """Record conversation turns: messages are {role, content, timestamp?, id?};
            a message id seen before is not stored again."""
            res = store_for().capture(_user(), session_id, messages)
            return {"stored": res.stored, "duplicates": res.duplicates,
                    "truncated": res.truncated}  # fmt: skip

    @mcp.resource("memstore://persona", mime_type="text/markdown")
    def persona() -> str:
        """The user's persona (empty before one was derived)."""
        return store_for().get_persona(_user()) or ""

    @mcp.resource("memstore://scenes", mime_type="text/plain")
    def scenes() -> str:
        """The user's scenes, hottest first, one line each."""
        return store_for().scene_navigation(_user())

    @mcp.resource("memstore://scenes/{name}", mime_type="text/markdown")
    def scene(name: str) -> str:
        """One scene's full text."""
        try:
            found = store_for().get_scene(_user(), name)
        except MemstoreError as exc:
            raise ResourceError(str(exc)) from exc
        if found is None:
            raise ResourceNotFoundError(f"no scene named {name!r}")
        return str(found["body"])

    return mcp


__all__ = ["INSTRUCTIONS", "USER_HEADER", "build_server"]
