"""Derivation projections: L1 memories (and their FTS rows), extraction
cursors, generations, failures — one table (set) per fact.

Applies recorded decisions only; every id it writes either comes from the
event (new memory ids were generated when the event was created) or is
computed from the log order (the integer row id, ``<id>@<generation>`` for
copies), so a rebuild yields the same rows as the incremental path.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, ClassVar

from sqlalchemy import Connection, Row, bindparam, select, update

from memstore.db import backend, rawexec
from memstore.db.backend import upsert
from memstore.db.schema import (
    active_generations,
    derive_failures,
    derive_generations,
    l1_cursors,
    l1_memories,
    l1_term_repeats,
    l1_user_slots,
)
from memstore.derive.events import (
    GenerationActivated,
    GenerationStarted,
    L1Extracted,
    MemoryForgotten,
    MemoryWritten,
    PersonaUpdated,
    RunFailed,
    ScenesUpdated,
)
from memstore.derive.memories.fts_index import MemoryFts
from memstore.events.log import StoredEvent
from memstore.projections.base import Projection
from memstore.texthash import content_hash

COPY_LAYERS = ("l2", "l3")  # from_layer values that copy L1 from the base generation
DIRECT_ORIGINS = ("user_stated", "host")  # memories no extraction produced


def copied_id(memory_or_scene_id: str, generation: int) -> str:
    return f"{memory_or_scene_id}@{generation}"


def union(*lists: Sequence[str]) -> list[str]:
    out: list[str] = []
    for items in lists:
        for item in items:
            if item not in out:
                out.append(item)
    return out


# The statements of a derivation's append go to the driver (memstore.db.rawexec):
# they run under the write lock that captures wait for, and SQLAlchemy's
# statement building was half of an L1 append's inline projections (about
# 1.2 ms, measured with the rule deriver).
_MEMORY_COLUMNS = tuple(c.name for c in l1_memories.columns)
_INSERT = (
    f"INSERT INTO l1_memories ({', '.join(_MEMORY_COLUMNS)}) "
    f"VALUES ({', '.join('?' * len(_MEMORY_COLUMNS))})"
)
# Memory ids are unique across users and generations (the table's constraint).
_TAKEN = "SELECT id FROM l1_memories WHERE memory_id = ?"
_MAX_ID = "SELECT coalesce(max(id), 0) FROM l1_memories"
_ROW = select(l1_memories).where(
    l1_memories.c.memory_id == bindparam("m"), l1_memories.c.user_id == bindparam("u")
)
_RETIRE = (
    update(l1_memories)
    .where(l1_memories.c.id == bindparam("row_id"))
    .values(status="retired", retired_by=bindparam("by"), updated_position=bindparam("pos"))
)


class L1Projection(Projection):
    name: ClassVar[str] = "l1_memories"
    version: ClassVar[int] = 2  # 2: l1_fts without Latin diacritics
    handles: ClassVar[frozenset[str] | None] = frozenset(
        {
            L1Extracted.TYPE,
            MemoryWritten.TYPE,
            MemoryForgotten.TYPE,
            GenerationStarted.TYPE,
        }
    )
    # l1_fts is filled with l1_memories (memstore.db.migrate); its keys and
    # BM25 statistics live in the other two (memstore.derive.memories.fts_index).
    tables = (l1_memories, l1_user_slots, l1_term_repeats)
    replay_fts_tables = ("l1_fts",)

    def __init__(self) -> None:
        self._next_id = 0
        self._fts: MemoryFts | None = None

    def apply(self, conn: Connection, events: Sequence[StoredEvent]) -> None:
        self._next_id = int(rawexec.scalar(conn, _MAX_ID))
        fts = self._fts = MemoryFts(conn)
        try:
            self._apply(conn, events)
            fts.flush()
        finally:
            self._fts = None

    @property
    def fts(self) -> MemoryFts:
        assert self._fts is not None, "only inside apply"
        return self._fts

    def _apply(self, conn: Connection, events: Sequence[StoredEvent]) -> None:
        for ev in events:
            p = ev.payload
            if isinstance(p, L1Extracted):
                origin = "rules" if p.deriver == "rules" else "extracted"
                for d in p.decisions:
                    self._decide(conn, ev, p.generation, d, origin)
            elif isinstance(p, MemoryWritten):
                self._decide(conn, ev, p.generation, p.decision, p.origin)
            elif isinstance(p, MemoryForgotten):
                row = self._row(conn, ev.user_id, p.memory_id)
                if row is not None and row.status == "active":
                    self._retire(conn, [row], "forgotten", ev.position)
            elif isinstance(p, GenerationStarted):
                self._start_generation(conn, ev, p)

    def clear(self, conn: Connection) -> None:
        backend.of(conn).fts_clear(conn, "l1_fts", contentless=False)
        super().clear(conn)
        # Vectors stay (ids follow log order); vector_index re-embeds any row
        # whose text differs, and search checks each hit's owner and status.

    # -- decisions -------------------------------------------------------------

    def _decide(
        self, conn: Connection, ev: StoredEvent, generation: int, d: dict[str, Any], origin: str
    ) -> None:
        action = d["action"]
        if action == "skip":
            return
        # A decision may only touch live memories of the same user and generation:
        # a target forgotten between the LLM call and the append stays forgotten.
        targets = [
            r
            for r in (self._row(conn, ev.user_id, t) for t in d.get("target_ids", []))
            if r is not None and r.status == "active" and int(r.generation) == generation
        ]
        sources = list(d.get("source_message_ids", []))
        if action == "update" and targets:
            t = targets[0]
            content = d["content"]
            conn.execute(
                update(l1_memories)
                .where(l1_memories.c.id == t.id)
                .values(
                    content=content,
                    content_hash=content_hash(content),
                    type=d["type"],
                    priority=int(d["priority"]),
                    scene_name=d["scene_name"],
                    source_message_ids=json.dumps(union(json.loads(t.source_message_ids), sources)),
                    activity_start=d.get("activity_start") or t.activity_start,
                    activity_end=d.get("activity_end") or t.activity_end,
                    updated_position=ev.position,
                )
            )
            self.fts.remove(ev.user_id, int(t.id), t.content)
            self.fts.add(ev.user_id, int(t.id), content)
            return
        if action == "merge":
            sources = union(*(json.loads(t.source_message_ids) for t in targets), sources)
        if rawexec.first(conn, _TAKEN, (d["new_id"],)) is not None:
            return  # defensive: an id is never reused (a log could still hold one twice)
        self._insert(conn, ev, generation, d, origin, sources)
        if action in ("merge", "supersede"):
            self._retire(conn, targets, d["new_id"], ev.position)

    def _insert(
        self,
        conn: Connection,
        ev: StoredEvent,
        generation: int,
        d: dict[str, Any],
        origin: str,
        sources: list[str],
    ) -> None:
        self._next_id += 1
        content = d["content"]
        values = {
            "id": self._next_id,
            "memory_id": d["new_id"],
            "user_id": ev.user_id,
            "generation": generation,
            "type": d["type"],
            "priority": int(d["priority"]),
            "scene_name": d.get("scene_name", ""),
            "content": content,
            "content_hash": content_hash(content),
            "status": "active",
            "origin": origin,
            "source_message_ids": json.dumps(sources),
            "activity_start": d.get("activity_start"),
            "activity_end": d.get("activity_end"),
            "occurred_at": d.get("occurred_at") or ev.occurred_at,
            "created_position": ev.position,
            "updated_position": ev.position,
            "retired_by": None,
        }
        rawexec.run(conn, _INSERT, [values[c] for c in _MEMORY_COLUMNS])
        self.fts.add(ev.user_id, self._next_id, content)

    def _retire(self, conn: Connection, rows: Sequence[Row[Any]], by: str, position: int) -> None:
        # Retired rows leave the FTS index (search shows live memories only) but
        # stay in l1_memories for history and ``include_retired`` listings.
        for r in rows:
            conn.execute(_RETIRE, {"row_id": int(r.id), "by": by, "pos": position})
            self.fts.remove(str(r.user_id), int(r.id), str(r.content))

    @staticmethod
    def _row(conn: Connection, user_id: str, memory_id: str) -> Row[Any] | None:
        return conn.execute(_ROW, {"m": memory_id, "u": user_id}).first()

    # -- generations ----------------------------------------------------------------

    def _start_generation(self, conn: Connection, ev: StoredEvent, p: GenerationStarted) -> None:
        q = select(l1_memories).where(
            l1_memories.c.user_id == ev.user_id,
            l1_memories.c.generation == p.base_generation,
            l1_memories.c.status == "active",
        )
        if p.from_layer not in COPY_LAYERS:
            # Re-extracting from L0 cannot recreate what a host or the user wrote
            # directly, so those memories carry over.
            q = q.where(l1_memories.c.origin.in_(DIRECT_ORIGINS))
        rows = conn.execute(q.order_by(l1_memories.c.id)).all()
        for r in rows:
            new_id = copied_id(r.memory_id, p.generation)
            if rawexec.first(conn, _TAKEN, (new_id,)) is not None:
                continue  # the generation was started before: its copy exists
            self._next_id += 1
            values = dict(r._mapping)
            values.update(id=self._next_id, memory_id=new_id, generation=p.generation)
            conn.execute(l1_memories.insert().values(**values))
            self.fts.add(ev.user_id, self._next_id, r.content)


class GenerationsProjection(Projection):
    """Every generation a re-derive started, and the one each user sees."""

    name: ClassVar[str] = "generations"
    handles: ClassVar[frozenset[str] | None] = frozenset(
        {GenerationStarted.TYPE, GenerationActivated.TYPE}
    )
    tables = (active_generations, derive_generations)

    def apply(self, conn: Connection, events: Sequence[StoredEvent]) -> None:
        for ev in events:
            p = ev.payload
            if isinstance(p, GenerationStarted):
                conn.execute(
                    upsert(derive_generations)
                    .values(
                        user_id=ev.user_id,
                        generation=p.generation,
                        from_layer=p.from_layer,
                        base_generation=p.base_generation,
                        run_id=p.run_id,
                        started_position=ev.position,
                        activated_position=None,
                    )
                    .on_conflict_do_nothing()
                )
            elif isinstance(p, GenerationActivated):
                stmt = upsert(active_generations).values(
                    user_id=ev.user_id, generation=p.generation
                )
                conn.execute(
                    stmt.on_conflict_do_update(
                        index_elements=[active_generations.c.user_id],
                        set_={"generation": p.generation},
                    )
                )
                conn.execute(
                    update(derive_generations)
                    .where(
                        derive_generations.c.user_id == ev.user_id,
                        derive_generations.c.generation == p.generation,
                    )
                    .values(activated_position=ev.position)
                )


# Only an extraction that moves the cursor forward counts (the class docstring).
_CURSOR_MOVED = (
    "INSERT INTO l1_cursors (user_id, session_id, generation, cursor_position, runs, "
    "last_run_id, updated_position) VALUES (?, ?, ?, ?, 1, ?, ?) "
    "ON CONFLICT (user_id, session_id, generation) DO UPDATE SET "
    "cursor_position = excluded.cursor_position, runs = l1_cursors.runs + 1, "
    "last_run_id = excluded.last_run_id, updated_position = excluded.updated_position "
    "WHERE l1_cursors.cursor_position < excluded.cursor_position"
)


class CursorsProjection(Projection):
    """Extraction cursors per (user, session, generation).

    Only an extraction that moves its cursor forward counts: ``runs`` is the
    number of such extractions (which warm-up step applies next) and
    ``updated_position`` the last one. A re-derive from L2 or L3 keeps the
    base generation's L1, and so its cursors."""

    name: ClassVar[str] = "l1_cursors"
    handles: ClassVar[frozenset[str] | None] = frozenset({L1Extracted.TYPE, GenerationStarted.TYPE})
    tables = (l1_cursors,)

    def apply(self, conn: Connection, events: Sequence[StoredEvent]) -> None:
        for ev in events:
            p = ev.payload
            if isinstance(p, L1Extracted):
                rawexec.run(
                    conn,
                    _CURSOR_MOVED,
                    (
                        ev.user_id,
                        p.session_id,
                        p.generation,
                        p.cursor_position,
                        p.run_id,
                        ev.position,
                    ),
                )
            elif isinstance(p, GenerationStarted) and p.from_layer in COPY_LAYERS:
                c = l1_cursors.c
                rows = conn.execute(
                    select(l1_cursors).where(
                        c.user_id == ev.user_id, c.generation == p.base_generation
                    )
                ).all()
                for r in rows:
                    conn.execute(
                        upsert(l1_cursors)
                        .values(**{**dict(r._mapping), "generation": p.generation})
                        .on_conflict_do_nothing()
                    )


# A stage that succeeds has no consecutive failures any more.
_SUCCEEDED = (
    "DELETE FROM derive_failures WHERE user_id = ? AND stage = ? AND session_id = ? "
    "AND generation = ?"
)


class FailuresProjection(Projection):
    """Consecutive failures per (user, stage, session, generation): what
    ``attempt`` counts and what the live pipeline reports and gives up on.

    A failure without a generation is the live pipeline's: it counts against
    the generation active when it happened, read from ``generations``."""

    name: ClassVar[str] = "derive_failures"
    version: ClassVar[int] = 2  # 2: per generation
    handles: ClassVar[frozenset[str] | None] = frozenset(
        {RunFailed.TYPE, L1Extracted.TYPE, ScenesUpdated.TYPE, PersonaUpdated.TYPE}
    )
    depends_on: ClassVar[tuple[str, ...]] = ("generations",)
    tables = (derive_failures,)

    def apply(self, conn: Connection, events: Sequence[StoredEvent]) -> None:
        f = derive_failures.c
        for ev in events:
            p = ev.payload
            if isinstance(p, RunFailed):
                generation = p.generation
                if generation is None:
                    generation = (
                        conn.execute(
                            select(active_generations.c.generation).where(
                                active_generations.c.user_id == ev.user_id
                            )
                        ).scalar_one_or_none()
                        or 0
                    )
                stmt = upsert(derive_failures).values(
                    user_id=ev.user_id,
                    stage=p.stage,
                    session_id=p.session_id,
                    generation=generation,
                    failures=1,
                    last_error=p.error[:2000],
                    updated_position=ev.position,
                )
                conn.execute(
                    stmt.on_conflict_do_update(
                        index_elements=[f.user_id, f.stage, f.session_id, f.generation],
                        set_={
                            "failures": f.failures + 1,
                            "last_error": p.error[:2000],
                            "updated_position": ev.position,
                        },
                    )
                )
                continue
            assert isinstance(p, L1Extracted | ScenesUpdated | PersonaUpdated)
            stage, session = (
                ("l1", p.session_id)
                if isinstance(p, L1Extracted)
                else ("l2", "")
                if isinstance(p, ScenesUpdated)
                else ("l3", "")
            )
            rawexec.run(conn, _SUCCEEDED, (ev.user_id, stage, session, p.generation))
