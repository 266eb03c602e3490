"""The L2 scene projection (the L3 persona one is in ``derive/persona/projection.py``).

Heat rules live here because they are arithmetic over recorded operations:
create = 1, update = +1, merge = sum of the sources + 1.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, ClassVar

from sqlalchemy import Connection, delete, select, update

from memstore.db.backend import upsert
from memstore.db.schema import l2_scenes, l2_state
from memstore.derive.events import GenerationStarted, PersonaUpdated, ScenesUpdated
from memstore.derive.memories.projection import copied_id, union
from memstore.events.log import StoredEvent
from memstore.projections.base import Projection


def op_sources(p: ScenesUpdated, op: dict[str, Any]) -> list[str]:
    """The memories whose text one scene operation's text may hold.

    The rule deriver writes a scene from its placed memories only; an LLM saw
    the whole chunk of the run (``p.memory_ids``) and may have used any of
    it, so all of them count. An operation may also name its sources
    (``source_memory_ids``: the forget rewrite does)."""
    named = op.get("source_memory_ids")
    if named is not None:
        return union(list(named), list(op.get("memory_ids", [])))
    own = list(op.get("memory_ids", []))
    return own if p.deriver == "rules" else union(own, list(p.memory_ids))


class L2Projection(Projection):
    name: ClassVar[str] = "l2_scenes"
    version: ClassVar[int] = 2  # 2: source_memory_ids (replayed on open)
    handles: ClassVar[frozenset[str] | None] = frozenset(
        {ScenesUpdated.TYPE, PersonaUpdated.TYPE, GenerationStarted.TYPE}
    )
    tables = (l2_scenes, l2_state)

    def apply(self, conn: Connection, events: Sequence[StoredEvent]) -> None:
        for ev in events:
            p = ev.payload
            if isinstance(p, ScenesUpdated):
                for op in p.operations:
                    self._operate(conn, ev, p.generation, op, op_sources(p, op))
                self._state(conn, ev, p)
            elif isinstance(p, PersonaUpdated):
                conn.execute(
                    update(l2_state)
                    .where(l2_state.c.user_id == ev.user_id, l2_state.c.generation == p.generation)
                    .values(refresh_requested=0)
                )
            elif isinstance(p, GenerationStarted) and p.from_layer == "l3":
                self._copy(conn, ev, p)

    def _scene(self, conn: Connection, user_id: str, generation: int, scene_id: str | None) -> Any:
        if not scene_id:
            return None
        return conn.execute(
            select(l2_scenes).where(
                l2_scenes.c.scene_id == scene_id,
                l2_scenes.c.user_id == user_id,
                l2_scenes.c.generation == generation,
            )
        ).first()

    def _operate(
        self, conn: Connection, ev: StoredEvent, gen: int, op: dict[str, Any], used: list[str]
    ) -> None:
        kind = op["op"]
        mems = list(op.get("memory_ids", []))
        if kind == "create":
            if self._scene(conn, ev.user_id, gen, op["scene_id"]) is None:
                # Imported scenes carry the heat they had upstream.
                self._insert(
                    conn, ev, gen, op, heat=int(op.get("heat", 1)), memory_ids=mems, sources=used
                )
        elif kind == "rewrite":
            # A forget rebuilt the scene from what is left: its lists are
            # replaced, not extended, and its heat stays.
            row = self._scene(conn, ev.user_id, gen, op["scene_id"])
            if row is None:
                return
            conn.execute(
                update(l2_scenes)
                .where(l2_scenes.c.scene_id == row.scene_id)
                .values(
                    summary=op.get("summary") or "",
                    body=op.get("body") or "",
                    memory_ids=json.dumps(mems),
                    source_memory_ids=json.dumps(used),
                    updated_position=ev.position,
                )
            )
        elif kind == "update":
            row = self._scene(conn, ev.user_id, gen, op["scene_id"])
            if row is None:
                return
            conn.execute(
                update(l2_scenes)
                .where(l2_scenes.c.scene_id == row.scene_id)
                .values(
                    name=op.get("name") or row.name,
                    summary=row.summary if op.get("summary") is None else op["summary"],
                    body=op.get("body") or row.body,
                    heat=row.heat + 1,
                    memory_ids=json.dumps(union(json.loads(row.memory_ids), mems)),
                    source_memory_ids=json.dumps(union(json.loads(row.source_memory_ids), used)),
                    updated_position=ev.position,
                )
            )
        elif kind == "merge":
            sources = [
                r
                for r in (self._scene(conn, ev.user_id, gen, s) for s in op["source_scene_ids"])
                if r is not None
            ]
            heat = sum(int(r.heat) for r in sources) + 1
            merged = union(*(json.loads(r.memory_ids) for r in sources), mems)
            built = union(*(json.loads(r.source_memory_ids) for r in sources), used)
            for r in sources:
                conn.execute(delete(l2_scenes).where(l2_scenes.c.scene_id == r.scene_id))
            if self._scene(conn, ev.user_id, gen, op["scene_id"]) is None:
                self._insert(conn, ev, gen, op, heat=heat, memory_ids=merged, sources=built)
        elif kind == "delete":
            conn.execute(
                delete(l2_scenes).where(
                    l2_scenes.c.scene_id == op["scene_id"],
                    l2_scenes.c.user_id == ev.user_id,
                    l2_scenes.c.generation == gen,
                )
            )

    @staticmethod
    def _insert(
        conn: Connection,
        ev: StoredEvent,
        gen: int,
        op: dict[str, Any],
        *,
        heat: int,
        memory_ids: list[str],
        sources: list[str],
    ) -> None:
        # Scene ids are unique across users and generations; a log holding one
        # twice keeps the first (``on_conflict_do_nothing``) instead of failing.
        conn.execute(
            upsert(l2_scenes)
            .values(
                scene_id=op["scene_id"],
                user_id=ev.user_id,
                generation=gen,
                name=op.get("name") or "",
                summary=op.get("summary") or "",
                body=op.get("body") or "",
                heat=heat,
                memory_ids=json.dumps(memory_ids),
                source_memory_ids=json.dumps(union(memory_ids, sources)),
                created_position=ev.position,
                updated_position=ev.position,
            )
            .on_conflict_do_nothing()
        )

    @staticmethod
    def _state(conn: Connection, ev: StoredEvent, p: ScenesUpdated) -> None:
        stmt = upsert(l2_state).values(
            user_id=ev.user_id,
            generation=p.generation,
            memory_cursor=p.memory_cursor,
            runs=1,
            refresh_requested=int(p.persona_refresh),
            last_run_id=p.run_id,
            updated_position=ev.position,
        )
        refresh: Any = 1 if p.persona_refresh else l2_state.c.refresh_requested
        conn.execute(
            stmt.on_conflict_do_update(
                index_elements=[l2_state.c.user_id, l2_state.c.generation],
                set_={
                    "memory_cursor": p.memory_cursor,
                    "runs": l2_state.c.runs + 1,
                    "refresh_requested": refresh,
                    "last_run_id": p.run_id,
                    "updated_position": ev.position,
                },
            )
        )

    @staticmethod
    def _copy(conn: Connection, ev: StoredEvent, p: GenerationStarted) -> None:
        rows = conn.execute(
            select(l2_scenes)
            .where(l2_scenes.c.user_id == ev.user_id, l2_scenes.c.generation == p.base_generation)
            .order_by(l2_scenes.c.scene_id)
        ).all()
        for r in rows:
            values = dict(r._mapping)
            values.update(
                scene_id=copied_id(r.scene_id, p.generation),
                generation=p.generation,
                memory_ids=json.dumps(
                    [copied_id(m, p.generation) for m in json.loads(r.memory_ids)]
                ),
                source_memory_ids=json.dumps(
                    [copied_id(m, p.generation) for m in json.loads(r.source_memory_ids)]
                ),
            )
            conn.execute(upsert(l2_scenes).values(**values).on_conflict_do_nothing())
        state = conn.execute(
            select(l2_state).where(
                l2_state.c.user_id == ev.user_id, l2_state.c.generation == p.base_generation
            )
        ).first()
        if state is not None:
            conn.execute(
                upsert(l2_state)
                .values(**{**dict(state._mapping), "generation": p.generation})
                .on_conflict_do_nothing()
            )
