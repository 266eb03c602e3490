"""The Store's reads and edits of a user's derived layers, and the views
hosts that show the store to a person need (``Store`` inherits them).

Memories (L1), scenes (L2), the persona (L3), their generations, and the
inspector's and MCP server's views: users, sessions, a session's messages,
a memory's sources. The user comes first, as in every per-user method.
"""

from __future__ import annotations

from typing import Any

from memstore import inspection
from memstore import validate as v
from memstore.db.engine import Database
from memstore.derive import api
from memstore.derive.context import DeriveContext
from memstore.derive.generations import activate_generation, list_generations
from memstore.errors import InvalidInputError
from memstore.reads import memories_in
from memstore.records import (
    Layer,
    Memory,
    MemoryAction,
    MemoryChange,
    MemoryType,
    Message,
    Scene,
)


class Views:
    _db: Database
    _derivation: DeriveContext

    def _check_open(self) -> None:
        raise NotImplementedError  # Store's

    def list_memories(
        self,
        user_id: str,
        *,
        type: MemoryType | None = None,
        generation: int | None = None,
        include_retired: bool = False,
    ) -> list[Memory]:
        """A user's live memories in the active generation (``include_retired`` adds forgotten
        and superseded ones)."""
        self._check_open()
        return memories_in(
            self._db, user_id, type=type, generation=generation, include_retired=include_retired
        )

    def memory_history(self, user_id: str, memory_id: str) -> list[MemoryChange]:
        """The events that created and changed one of a user's memories, with
        their source messages."""
        self._check_open()
        return api.memory_history(
            self._derivation, v.check_id("user_id", user_id), v.check_id("memory_id", memory_id)
        )

    def get_memory(self, user_id: str, memory_id: str) -> Memory:
        """One of the user's memories by id, in any generation and status
        (``status`` says whether it is live); ``NotFoundError`` if there is none."""
        self._check_open()
        return Memory.from_row(
            api.get_memory(
                self._derivation, v.check_id("user_id", user_id), v.check_id("memory_id", memory_id)
            )
        )

    def update_memory(self, user_id: str, memory_id: str, content: str) -> str:
        """Replace the text of a live memory of the active generation, found by id;
        its type and scene stay and the change is in its history. Returns its id."""
        self._check_open()
        user_id, memory_id = v.check_id("user_id", user_id), v.check_id("memory_id", memory_id)
        return api.update_memory(
            self._derivation, user_id, memory_id, v.check_text("content", content)
        )

    def write_memory(
        self,
        user_id: str,
        action: MemoryAction,
        content: str,
        *,
        old_content: str | None = None,
        type: MemoryType = "persona",
        scene: str = "",
        origin: str = "user_stated",
    ) -> str | None:
        """Add / replace / remove a memory the user or host stated directly."""
        self._check_open()
        user_id = v.check_id("user_id", user_id)
        if action not in ("add", "replace", "remove"):
            raise InvalidInputError(f"action must be add, replace or remove, not {action!r}")

        return api.write_memory(
            self._derivation,
            user_id,
            action,
            v.check_text("content", content),
            old_content=v.opt_text("old_content", old_content),
            type=v.check_choice("type", type, v.MEMORY_TYPES),
            scene=v.check_text("scene", scene),
            origin=v.check_text("origin", origin),
        )

    def list_scenes(self, user_id: str, *, generation: int | None = None) -> list[Scene]:
        """A user's scene blocks (L2)."""
        self._check_open()
        user_id, generation = v.check_id("user_id", user_id), v.opt_int("generation", generation)
        return [
            Scene.from_row(r)
            for r in api.list_scenes(self._derivation, user_id, generation=generation)
        ]

    def get_scene(self, user_id: str, name: str, *, generation: int | None = None) -> Scene | None:
        """One of the user's scenes by name (case-insensitive when no exact match),
        with ``created_at``/``updated_at``; None when the user has no such scene."""
        self._check_open()
        user_id, generation = v.check_id("user_id", user_id), v.opt_int("generation", generation)
        row = api.get_scene(
            self._derivation, user_id, v.check_query("name", name), generation=generation
        )
        return None if row is None else Scene.from_row(row)

    def get_persona(self, user_id: str, *, generation: int | None = None) -> str | None:
        """A user's persona (Markdown), or None before one was written."""
        self._check_open()
        user_id, generation = v.check_id("user_id", user_id), v.opt_int("generation", generation)
        return api.get_persona(self._derivation, user_id, generation=generation)

    def rederive(self, user_id: str | None = None, from_layer: Layer = "l1") -> int:
        """Re-run derivation over L0 into a new generation and switch to it."""
        self._check_open()
        return api.rederive(self._derivation, v.opt_id("user_id", user_id), from_layer=from_layer)

    def list_users(self) -> list[dict[str, object]]:
        """Every user with sessions, messages, live memories and last activity."""
        self._check_open()
        return inspection.users(self._db)

    def memory_sources(self, user_id: str, memory_id: str) -> list[Message]:
        """The captured messages a memory was made from (its provenance)."""
        self._check_open()
        user_id, memory_id = v.check_id("user_id", user_id), v.check_id("memory_id", memory_id)
        rows = inspection.memory_sources(self._derivation, user_id, memory_id)
        return [Message.from_row(r) for r in rows]

    def list_sessions(self, user_id: str) -> list[inspection.SessionSummary]:
        """The user's sessions with their message counts, most recent first."""
        self._check_open()
        return inspection.list_sessions(self._derivation, v.check_id("user_id", user_id))

    def session_messages(self, user_id: str, session_id: str) -> list[Message]:
        """A session's captured messages in order, each with the ids of the
        memories made from it; an unknown session raises NotFoundError."""
        self._check_open()
        user_id, session_id = v.check_id("user_id", user_id), v.check_id("session_id", session_id)
        rows = inspection.session_messages(self._derivation, user_id, session_id)
        return [Message.from_row(r) for r in rows]

    def list_generations(self, user_id: str) -> list[dict[str, Any]]:
        """The user's generations: number, active, live memories, completeness."""
        self._check_open()
        return list_generations(self._derivation, v.check_id("user_id", user_id))

    def activate_generation(self, user_id: str, generation: int) -> int:
        """Switch the user to a complete generation; returns the previous one."""
        self._check_open()
        user_id, generation = v.check_id("user_id", user_id), v.check_int("generation", generation)
        return activate_generation(self._derivation, user_id, generation)
