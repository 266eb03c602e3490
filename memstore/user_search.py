"""One user's conversation and memory search, as ``Store`` answers it: the
arguments checked, forgotten messages left out. ``Store`` has these methods
from here, and so does ``memstore.search_reader.SearchReader``, which
searches an existing store without opening one."""

from __future__ import annotations

from memstore import validate as v
from memstore.db.engine import Database
from memstore.derive.queries import forgotten_sources
from memstore.records import MemoryType, SearchStrategy
from memstore.search.engine import SearchEngine
from memstore.search.hits import Hit
from memstore.user_first import user_id_first


class UserSearch:
    _db: Database
    _search_engine: SearchEngine

    def _check_open(self) -> None:
        """A ``Store`` refuses once closed; a reader lives as long as its database."""

    @user_id_first
    def search_conversations(
        self,
        user_id: str,
        query: str,
        *,
        session_id: str | None = None,
        limit: int = 5,
        strategy: SearchStrategy = "hybrid",
        speaker: str | None = None,
    ) -> list[Hit]:
        """Search a user's captured messages (L0); ``speaker``: only the
        messages of that participant (their ``name``, case-insensitive).
        Messages a memory forgotten on request came from are left out
        (docs/forgetting.md)."""
        self._check_open()
        session_id = v.opt_id("session_id", session_id)
        asked = v.search_limit(limit)  # lenient: text from a tool call is clamped
        # One read transaction: the forgotten sources and the hits from one
        # snapshot, and one pooled connection's checkout and BEGIN per search
        # instead of two (~15% of a keyword search's CPU).
        with self._db.read() as conn:
            user_id = v.check_id("user_id", user_id)
            self._search_engine.read_ahead(conn, "l0", user_id, strategy)
            hidden = forgotten_sources(conn, user_id)
            hits = self._search_engine.search(
                "l0",
                query,
                user_id=user_id,
                session_id=session_id,
                limit=asked + len(hidden) if hidden and isinstance(asked, int) else asked,
                strategy=strategy,
                speaker=v.opt_name("speaker", speaker),
                conn=conn,
            )
        if not hidden:
            return hits
        kept = [h for h in hits if h.ref not in hidden]
        return kept[:asked] if isinstance(asked, int) else kept

    @user_id_first
    def search_memories(
        self,
        user_id: str,
        query: str,
        *,
        type: MemoryType | None = None,
        scene: str | None = None,
        limit: int = 5,
        strategy: SearchStrategy = "hybrid",
    ) -> list[Hit]:
        """Search a user's active L1 memories (optionally one type or scene)."""
        self._check_open()
        user_id = v.check_id("user_id", user_id)
        scene = v.opt_text("scene", scene)
        clamped = v.search_limit(limit)  # lenient: text from a tool call is clamped
        checked = v.opt_choice("type", type, v.MEMORY_TYPES)  # the Literal is not enforced
        return self._search_engine.search(
            "l1",
            query,
            user_id=user_id,
            type=checked,
            scene=scene,
            limit=clamped,
            strategy=strategy,
        )


__all__ = ["UserSearch"]
