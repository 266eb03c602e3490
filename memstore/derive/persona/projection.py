"""The L3 persona projection: the newest profile of each user and generation."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import ClassVar

from sqlalchemy import Connection

from memstore.db.backend import upsert
from memstore.db.schema import l3_persona
from memstore.derive.events import PersonaUpdated
from memstore.events.log import StoredEvent
from memstore.projections.base import Projection


class L3Projection(Projection):
    name: ClassVar[str] = "l3_persona"
    version: ClassVar[int] = 2  # 2: memory_ids (replayed on open)
    handles: ClassVar[frozenset[str] | None] = frozenset({PersonaUpdated.TYPE})
    tables = (l3_persona,)

    def apply(self, conn: Connection, events: Sequence[StoredEvent]) -> None:
        for ev in events:
            p = ev.payload
            assert isinstance(p, PersonaUpdated)
            values = {
                "persona": p.persona,
                "run_id": p.run_id,
                "deriver": p.deriver,
                "model": p.model,
                "prompt_version": p.prompt_version,
                "trigger": p.trigger,
                "updated_position": ev.position,
                "memory_ids": None if p.memory_ids is None else json.dumps(p.memory_ids),
            }
            stmt = upsert(l3_persona).values(
                user_id=ev.user_id, generation=p.generation, **values
            )
            conn.execute(
                stmt.on_conflict_do_update(
                    index_elements=[l3_persona.c.user_id, l3_persona.c.generation], set_=values
                )
            )
