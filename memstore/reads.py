"""Reads that need nothing but the database: ``Store.list_memories`` answers
with them, and so do commands that open no ``Store`` (``memstore memories
list``), which then start without search, derivation, the embedders or the
migration code. Arguments are checked as the Store checks them; the schema is
not upgraded here.
"""

from __future__ import annotations

from memstore import validate as v
from memstore.db.engine import Database
from memstore.derive.queries import memories, resolve_generation
from memstore.records import Memory, MemoryType


def memories_in(
    db: Database,
    user_id: str,
    *,
    type: MemoryType | None = None,
    generation: int | None = None,
    include_retired: bool = False,
) -> list[Memory]:
    """A user's live memories in the active generation (``include_retired`` adds
    forgotten and superseded ones), as ``Store.list_memories``."""
    user_id, generation = v.check_id("user_id", user_id), v.opt_int("generation", generation)
    checked = v.opt_choice("type", type, v.MEMORY_TYPES)  # the Literal is not enforced
    include_retired = v.check_bool("include_retired", include_retired)
    with db.read() as conn:
        gen = resolve_generation(conn, user_id, generation)
        rows = memories(conn, user_id, gen, type=checked, include_retired=include_retired)
    return [Memory.from_row(r) for r in rows]


__all__ = ["memories_in"]
