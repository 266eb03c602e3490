"""The provider's four tools: schemas, argument checks, and JSON answers.

Every answer is a JSON string, including errors: Hermes sends it verbatim to
the model as the tool message, and a model recovers from
``{"error": "limit must be ..."}`` but not from a stack trace.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any, cast

from memstore.errors import MemstoreError
from memstore.records import MemoryType
from memstore.search import Hit
from memstore.store import Store

MEMORY_SEARCH = "memstore_memory_search"
CONVERSATION_SEARCH = "memstore_conversation_search"
MEMORY_FORGET = "memstore_memory_forget"
SCENE_READ = "memstore_scene_read"
TOOL_NAMES = (MEMORY_SEARCH, CONVERSATION_SEARCH, MEMORY_FORGET, SCENE_READ)

DEFAULT_LIMIT = 5
MAX_LIMIT = 20
MEMORY_TYPES = ("persona", "episodic", "instruction")

_LIMIT = {
    "type": "integer",
    "minimum": 1,
    "maximum": MAX_LIMIT,
    "description": f"How many results (default {DEFAULT_LIMIT}, at most {MAX_LIMIT}).",
}

SCHEMAS: tuple[dict[str, Any], ...] = (
    {
        "name": MEMORY_SEARCH,
        "description": (
            "Search the user's long-term memories: facts, preferences, instructions and past "
            "events distilled from earlier conversations. Use it when you need something about "
            "the user that is not in the current conversation. Results carry an id, the text, "
            "its type and scene, a relevance score and when it happened."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What to look for."},
                "limit": _LIMIT,
                "type": {
                    "type": "string",
                    "enum": list(MEMORY_TYPES),
                    "description": "Only memories of this type.",
                },
                "scene": {"type": "string", "description": "Only memories of this scene."},
            },
            "required": ["query"],
        },
    },
    {
        "name": CONVERSATION_SEARCH,
        "description": (
            "Search the raw conversation history (what was literally said, by whom and when). "
            f"Use it when {MEMORY_SEARCH} does not have the answer or you need exact words."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What to look for."},
                "limit": _LIMIT,
                "session": {
                    "type": "string",
                    "description": (
                        'Only this session id; "current" means this conversation. '
                        "Omit to search all of the user's conversations."
                    ),
                },
            },
            "required": ["query"],
        },
    },
    {
        "name": MEMORY_FORGET,
        "description": (
            "Forget one long-term memory, by the id a search returned, when the user asks you "
            "to forget it or says it is wrong. The memory stops being recalled."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "memory_id": {"type": "string", "description": "The id from a memory search."},
            },
            "required": ["memory_id"],
        },
    },
    {
        "name": SCENE_READ,
        "description": (
            "Read one scene block in full: a scene groups the user's memories about one part "
            "of their life or work (the scene navigation in <memory-context> lists them by "
            "name with a one-line summary). Returns the name, summary, body, heat and when "
            "it was last updated. Use it when a scene's summary suggests it holds what you need."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "scene_name": {
                    "type": "string",
                    "description": "The scene's name, as the scene navigation shows it.",
                },
            },
            "required": ["scene_name"],
        },
    },
)


class ToolArgumentError(ValueError):
    """A tool call's arguments cannot be used; its message goes back to the model."""


def error(message: str) -> str:
    return json.dumps({"error": message}, ensure_ascii=False)


def coerce_limit(raw: object) -> int:
    """``None``/"" → the default; whole numbers (also "10", 10.0) clamped to 1..20.

    Unlike a silent fallback, "abc", booleans and NaN are errors: the model
    learns its call was wrong instead of getting five results it did not ask for."""
    if raw is None or raw == "":
        return DEFAULT_LIMIT
    if isinstance(raw, bool):
        raise ToolArgumentError(f"limit must be a number from 1 to {MAX_LIMIT}, got {raw!r}")
    try:
        value = float(raw) if isinstance(raw, int | float | str) else math.nan
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise ToolArgumentError(f"limit must be a number from 1 to {MAX_LIMIT}, got {raw!r}")
    return max(1, min(MAX_LIMIT, int(value)))


def _text_arg(args: Mapping[str, Any], name: str, *, required: bool) -> str | None:
    raw = args.get(name)
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        if required:
            raise ToolArgumentError(f"missing required argument: {name}")
        return None
    if not isinstance(raw, str):
        raise ToolArgumentError(f"{name} must be a string, got {type(raw).__name__}")
    return raw.strip()


def _id_arg(args: Mapping[str, Any], name: str, *, required: bool) -> str | None:
    """An id argument: refused when padded, never stripped into another id."""
    raw = args.get(name)
    if isinstance(raw, str) and raw.strip() and raw != raw.strip():
        raise ToolArgumentError(f"{name} {raw!r} has leading or trailing whitespace")
    return _text_arg(args, name, required=required)


def _memory_result(hit: Hit) -> dict[str, Any]:
    return {
        "id": hit.ref,
        "text": hit.text,
        "type": hit.type,
        "scene": hit.scene,
        "score": round(hit.score, 4),
        "time": hit.occurred_at,
    }


def _message_result(hit: Hit) -> dict[str, Any]:
    return {
        "id": hit.ref,
        "text": hit.text,
        "role": hit.role,
        "session": hit.session_id,
        "score": round(hit.score, 4),
        "time": hit.occurred_at,
    }


def handle(
    store: Store,
    tool_name: str,
    args: object,
    *,
    user_id: str,
    session_id: str,
    read_only: bool,
) -> str:
    """Run one tool call; always a JSON string (errors as ``{"error": ...}``)."""
    if tool_name not in TOOL_NAMES:
        return error(f"unknown tool: {tool_name!r} (memstore has {', '.join(TOOL_NAMES)})")
    if not isinstance(args, Mapping):
        return error(f"arguments must be a JSON object, got {type(args).__name__}")
    try:
        if tool_name == MEMORY_SEARCH:
            return _memory_search(store, args, user_id)
        if tool_name == CONVERSATION_SEARCH:
            return _conversation_search(store, args, user_id, session_id)
        if tool_name == SCENE_READ:
            return _scene_read(store, args, user_id)
        return _forget(store, args, user_id, read_only)
    except ToolArgumentError as exc:
        return error(str(exc))
    except MemstoreError as exc:
        return error(f"{tool_name} failed: {exc}")


def _memory_search(store: Store, args: Mapping[str, Any], user_id: str) -> str:
    query = _text_arg(args, "query", required=True) or ""
    limit = coerce_limit(args.get("limit"))
    mtype = _text_arg(args, "type", required=False)
    if mtype is not None and mtype not in MEMORY_TYPES:
        raise ToolArgumentError(f"type must be one of {', '.join(MEMORY_TYPES)}, got {mtype!r}")
    scene = _text_arg(args, "scene", required=False)
    hits = store.search_memories(
        user_id, query, type=cast(MemoryType | None, mtype), scene=scene, limit=limit
    )
    results = [_memory_result(h) for h in hits]
    return json.dumps({"results": results, "count": len(results)}, ensure_ascii=False)


def _conversation_search(
    store: Store, args: Mapping[str, Any], user_id: str, session_id: str
) -> str:
    query = _text_arg(args, "query", required=True) or ""
    limit = coerce_limit(args.get("limit"))
    session = _id_arg(args, "session", required=False)
    if session == "current":
        session = session_id
    hits = store.search_conversations(user_id, query, session_id=session, limit=limit)
    results = [_message_result(h) for h in hits]
    return json.dumps({"results": results, "count": len(results)}, ensure_ascii=False)


def _scene_read(store: Store, args: Mapping[str, Any], user_id: str) -> str:
    name = _text_arg(args, "scene_name", required=True) or ""
    scene = store.get_scene(user_id, name)
    if scene is None:
        available = [s.name for s in store.list_scenes(user_id)]
        message = (
            f"no scene named {name!r}"
            if available
            else f"no scene named {name!r}: no scenes have been derived for this user yet"
        )
        return json.dumps({"error": message, "available": available}, ensure_ascii=False)
    block = {
        "name": scene.name,
        "summary": scene.summary,
        "body": scene.body,
        "heat": scene.heat,
        "updated_at": scene.updated_at,
        "memory_count": len(scene.memory_ids),
    }
    return json.dumps({"scene": block}, ensure_ascii=False)


def _forget(store: Store, args: Mapping[str, Any], user_id: str, read_only: bool) -> str:
    memory_id = _id_arg(args, "memory_id", required=True) or ""
    if read_only:
        return error("memory is read-only in this context (not the primary agent)")
    store.forget_memory(user_id, memory_id, reason="user_request")
    return json.dumps({"forgotten": memory_id}, ensure_ascii=False)


__all__ = [
    "CONVERSATION_SEARCH",
    "MEMORY_FORGET",
    "MEMORY_SEARCH",
    "SCENE_READ",
    "SCHEMAS",
    "TOOL_NAMES",
    "ToolArgumentError",
    "coerce_limit",
    "error",
    "handle",
]
