"""The pipeline-state projection: what the upstream kept in process memory.

Per (user, session) it holds the rounds and messages captured after the
session's extraction cursor (the upstream's buffer and ``conversation_count``),
the cursor itself (from ``l1.extracted``), how many extractions advanced it
(which step of the warm-up sequence applies), the last run and activity
times, and consecutive failures (``pipeline.run_failed``). Per user it holds
the L1/L2/L3 run times that drive L2 and L3 timing.

Only the user's ACTIVE derivation generation drives the live pipeline. A
re-derive extracts the same messages again into a new generation; until that
generation is activated its extractions, scene and persona runs and failures
must not move the live cursor or clear pending messages (a re-derive that
fails would otherwise take them). So the projection keeps a cursor per
(user, session, generation) in ``pipeline_cursors`` and follows
``derive.generation_activated`` itself in ``pipeline_generations`` — it never
reads another projection's tables, whose rebuild order relative to this one
is not fixed. Activating a generation switches every session row to that
generation's cursor and recomputes its pending counts from
``pipeline_pending``, which keeps one row per capture for that reason.

Everything is taken from the events (positions and ``recorded_at``), never
from the wall clock, and no setting is baked in: the threshold is computed
from ``extractions`` when it is read. So a rebuild gives exactly the state
that incremental application gave, whatever the settings are today.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from sqlalchemy import Connection, delete, func, select, update
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from memstore.config import Settings
from memstore.db.schema import (
    pipeline_cursors,
    pipeline_generations,
    pipeline_pending,
    pipeline_sessions,
    pipeline_users,
)
from memstore.db.sqlfn import driver_sql
from memstore.derive.events import (
    GenerationActivated,
    GenerationStarted,
    L1Extracted,
    PersonaUpdated,
    RunFailed,
    ScenesUpdated,
)
from memstore.derive.state import DEFAULT_GENERATION
from memstore.events.log import StoredEvent
from memstore.l0.events import MessagesCaptured, SessionEnded
from memstore.projections.base import Projection


def threshold_for(extractions: int, settings: Settings) -> int:
    """Rounds that trigger the next extraction: the warm-up steps (1 → 2 → 4),
    then every ``extract_every`` rounds."""
    if extractions < len(settings.pipeline.warmup):
        return max(1, settings.pipeline.warmup[extractions])
    return max(1, settings.pipeline.extract_every)


@dataclass(frozen=True)
class SessionState:
    user_id: str
    session_id: str
    rounds_pending: int
    messages_pending: int
    cursor_position: int
    extractions: int
    last_capture_position: int
    last_activity_at: str
    last_l1_at: str | None
    last_l1_position: int | None
    failures: int
    last_error: str | None
    last_failure_at: str | None
    ended_at: str | None

    def threshold(self, settings: Settings) -> int:
        return threshold_for(self.extractions, settings)


@dataclass(frozen=True)
class UserState:
    user_id: str
    last_activity_at: str | None
    last_l1_at: str | None
    last_l1_position: int
    last_l2_at: str | None
    last_l2_position: int
    last_l3_at: str | None
    last_l3_position: int
    l2_failures: int
    l3_failures: int
    last_error: str | None

    @property
    def l2_has_new_input(self) -> bool:
        """An extraction finished after the last scene run."""
        return self.last_l1_position > self.last_l2_position


def _user_defaults(user_id: str) -> dict[str, Any]:
    return {
        "user_id": user_id,
        "last_l1_position": 0,
        "last_l2_position": 0,
        "last_l3_position": 0,
        "l2_failures": 0,
        "l3_failures": 0,
    }


COPY_LAYERS = ("l2", "l3")  # re-derives that keep the base generation's L1 (and cursors)


class PipelineStateProjection(Projection):
    name: ClassVar[str] = "pipeline_state"
    version: ClassVar[int] = 2  # 2: per-generation cursors, active generation only
    handles: ClassVar[frozenset[str] | None] = frozenset(
        {
            MessagesCaptured.TYPE,
            SessionEnded.TYPE,
            L1Extracted.TYPE,
            RunFailed.TYPE,
            ScenesUpdated.TYPE,
            PersonaUpdated.TYPE,
            GenerationStarted.TYPE,
            GenerationActivated.TYPE,
        }
    )
    tables = (
        pipeline_sessions,
        pipeline_pending,
        pipeline_users,
        pipeline_cursors,
        pipeline_generations,
    )

    def apply(self, conn: Connection, events: Sequence[StoredEvent]) -> None:
        captured: list[StoredEvent] = []
        for ev in events:
            p = ev.payload
            if isinstance(p, MessagesCaptured):
                # Captures are the bulk of any log: apply runs of them in three
                # executemany statements instead of three statements each.
                captured.append(ev)
                continue
            if captured:
                self._captured(conn, captured)
                captured = []
            if isinstance(p, L1Extracted):
                self._extracted(conn, ev, p)
            elif isinstance(p, RunFailed):
                self._failed(conn, ev, p)
            elif isinstance(p, SessionEnded):
                conn.execute(
                    update(pipeline_sessions)
                    .where(
                        pipeline_sessions.c.user_id == ev.user_id,
                        pipeline_sessions.c.session_id == p.session_id,
                    )
                    .values(ended_at=ev.recorded_at)
                )
            elif isinstance(p, ScenesUpdated | PersonaUpdated):
                if p.generation == self._active(conn, ev.user_id):
                    self._user_run(conn, ev, "l2" if isinstance(p, ScenesUpdated) else "l3")
            elif isinstance(p, GenerationStarted):
                self._started(conn, ev, p)
            elif isinstance(p, GenerationActivated):
                self._activated(conn, ev, p)
        if captured:
            self._captured(conn, captured)

    def purge_user(self, conn: Connection, user_id: str) -> None:
        for t in self.tables:
            conn.execute(delete(t).where(t.c.user_id == user_id))

    # -- handlers ------------------------------------------------------------

    def _captured(self, conn: Connection, events: Sequence[StoredEvent]) -> None:
        pending: list[tuple[Any, ...]] = []
        sessions: list[tuple[Any, ...]] = []
        users: list[tuple[Any, ...]] = []
        for ev in events:
            p = ev.payload
            assert isinstance(p, MessagesCaptured)
            rounds = sum(1 for m in p.messages if m.get("role") == "user")
            n = len(p.messages)
            pending.append((ev.user_id, p.session_id, ev.position, rounds, n))
            sessions.append((ev.user_id, p.session_id, rounds, n, ev.position, ev.recorded_at))
            users.append((ev.user_id, ev.recorded_at))
        conn.exec_driver_sql(
            driver_sql(
                conn,
                "INSERT INTO pipeline_pending (user_id, session_id, position, rounds, messages) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            ),
            pending,
        )
        # New talk reopens an ended session (ended_at back to NULL).
        conn.exec_driver_sql(
            driver_sql(
                conn,
                "INSERT INTO pipeline_sessions (user_id, session_id, rounds_pending, "
                "messages_pending, cursor_position, extractions, last_capture_position, "
                "last_activity_at, failures) VALUES (?, ?, ?, ?, 0, 0, ?, ?, 0) "
                "ON CONFLICT (user_id, session_id) DO UPDATE SET rounds_pending = "
                "pipeline_sessions.rounds_pending + excluded.rounds_pending, messages_pending = "
                "pipeline_sessions.messages_pending + excluded.messages_pending, "
                "last_capture_position = excluded.last_capture_position, "
                "last_activity_at = excluded.last_activity_at, ended_at = NULL",
            ),
            sessions,
        )
        conn.exec_driver_sql(
            driver_sql(
                conn,
                "INSERT INTO pipeline_users (user_id, last_activity_at, last_l1_position, "
                "last_l2_position, last_l3_position, l2_failures, l3_failures) "
                "VALUES (?, ?, 0, 0, 0, 0, 0) "
                "ON CONFLICT (user_id) DO UPDATE SET last_activity_at = excluded.last_activity_at",
            ),
            users,
        )

    @staticmethod
    def _active(conn: Connection, user_id: str) -> int:
        got = conn.execute(
            select(pipeline_generations.c.generation).where(
                pipeline_generations.c.user_id == user_id
            )
        ).scalar_one_or_none()
        return int(got) if got is not None else DEFAULT_GENERATION

    @staticmethod
    def _pending_sums(
        conn: Connection, user_id: str, session_id: str, after: int
    ) -> tuple[int, int]:
        pp = pipeline_pending.c
        rounds, msgs = conn.execute(
            select(
                func.coalesce(func.sum(pp.rounds), 0), func.coalesce(func.sum(pp.messages), 0)
            ).where(pp.user_id == user_id, pp.session_id == session_id, pp.position > after)
        ).one()
        return int(rounds), int(msgs)

    def _extracted(self, conn: Connection, ev: StoredEvent, p: L1Extracted) -> None:
        c = pipeline_cursors.c
        key = (c.user_id == ev.user_id, c.session_id == p.session_id, c.generation == p.generation)
        cur = conn.execute(select(c.cursor_position, c.extractions).where(*key)).first()
        # Only an extraction that moves its generation's cursor forward counts.
        if cur is not None and p.cursor_position <= int(cur.cursor_position):
            return
        moved = {
            "cursor_position": p.cursor_position,
            "last_l1_at": ev.recorded_at,
            "last_l1_position": ev.position,
        }
        if cur is None:
            extractions = 1
            conn.execute(
                pipeline_cursors.insert().values(
                    user_id=ev.user_id,
                    session_id=p.session_id,
                    generation=p.generation,
                    extractions=extractions,
                    **moved,
                )
            )
        else:
            extractions = int(cur.extractions) + 1
            conn.execute(
                update(pipeline_cursors).where(*key).values(extractions=extractions, **moved)
            )
        if p.generation != self._active(conn, ev.user_id):
            return  # a re-derive in progress: the live pipeline is not concerned
        s = pipeline_sessions.c
        row = conn.execute(
            select(s.cursor_position).where(s.user_id == ev.user_id, s.session_id == p.session_id)
        ).first()
        if row is None:
            return
        rounds, msgs = self._pending_sums(conn, ev.user_id, p.session_id, p.cursor_position)
        conn.execute(
            update(pipeline_sessions)
            .where(s.user_id == ev.user_id, s.session_id == p.session_id)
            .values(
                rounds_pending=rounds,
                messages_pending=msgs,
                cursor_position=p.cursor_position,
                extractions=extractions,
                last_l1_at=ev.recorded_at,
                last_l1_position=ev.position,
                failures=0,
                last_error=None,
            )
        )
        self._upsert_user(
            conn, ev.user_id, {"last_l1_at": ev.recorded_at, "last_l1_position": ev.position}
        )

    @staticmethod
    def _started(conn: Connection, ev: StoredEvent, p: GenerationStarted) -> None:
        """A re-derive from L2 or L3 keeps the base generation's L1, and so its
        cursors (as the L1 projection copies ``l1_cursors``)."""
        if p.from_layer not in COPY_LAYERS:
            return
        c = pipeline_cursors.c
        rows = conn.execute(
            select(pipeline_cursors).where(
                c.user_id == ev.user_id, c.generation == p.base_generation
            )
        ).all()
        for r in rows:
            conn.execute(
                sqlite_insert(pipeline_cursors)
                .values(**{**r._mapping, "generation": p.generation})
                .on_conflict_do_nothing()
            )

    def _activated(self, conn: Connection, ev: StoredEvent, p: GenerationActivated) -> None:
        stmt = sqlite_insert(pipeline_generations).values(
            user_id=ev.user_id, generation=p.generation
        )
        conn.execute(
            stmt.on_conflict_do_update(
                index_elements=[pipeline_generations.c.user_id],
                set_={"generation": p.generation},
            )
        )
        s, c = pipeline_sessions.c, pipeline_cursors.c
        sessions = conn.execute(
            select(s.session_id).where(s.user_id == ev.user_id).order_by(s.session_id)
        ).scalars()
        for session_id in list(sessions):
            cur = conn.execute(
                select(c.cursor_position, c.extractions, c.last_l1_at, c.last_l1_position).where(
                    c.user_id == ev.user_id,
                    c.session_id == session_id,
                    c.generation == p.generation,
                )
            ).first()
            cursor = int(cur.cursor_position) if cur is not None else 0
            rounds, msgs = self._pending_sums(conn, ev.user_id, session_id, cursor)
            conn.execute(
                update(pipeline_sessions)
                .where(s.user_id == ev.user_id, s.session_id == session_id)
                .values(
                    rounds_pending=rounds,
                    messages_pending=msgs,
                    cursor_position=cursor,
                    extractions=int(cur.extractions) if cur is not None else 0,
                    last_l1_at=cur.last_l1_at if cur is not None else None,
                    last_l1_position=cur.last_l1_position if cur is not None else None,
                    # failures of another generation's runs say nothing about this one
                    failures=0,
                    last_error=None,
                )
            )

    def _failed(self, conn: Connection, ev: StoredEvent, p: RunFailed) -> None:
        if p.generation is not None and p.generation != self._active(conn, ev.user_id):
            return  # a re-derive's failure is reported to its caller, not retried here
        if p.stage == "l1":
            s = pipeline_sessions.c
            conn.execute(
                update(pipeline_sessions)
                .where(s.user_id == ev.user_id, s.session_id == p.session_id)
                .values(
                    failures=s.failures + 1,
                    last_error=p.error[:2000],
                    last_failure_at=ev.recorded_at,
                )
            )
            return
        u = pipeline_users.c
        col = u.l2_failures if p.stage == "l2" else u.l3_failures
        self._upsert_user(conn, ev.user_id, {})
        conn.execute(
            update(pipeline_users)
            .where(u.user_id == ev.user_id)
            .values({col.name: col + 1, "last_error": p.error[:2000]})
        )

    def _user_run(self, conn: Connection, ev: StoredEvent, stage: str) -> None:
        self._upsert_user(
            conn,
            ev.user_id,
            {
                f"last_{stage}_at": ev.recorded_at,
                f"last_{stage}_position": ev.position,
                f"{stage}_failures": 0,
            },
        )

    @staticmethod
    def _upsert_user(conn: Connection, user_id: str, values: dict[str, Any]) -> None:
        row = {**_user_defaults(user_id), **values}
        stmt = sqlite_insert(pipeline_users).values(**row)
        if values:
            stmt = stmt.on_conflict_do_update(
                index_elements=[pipeline_users.c.user_id], set_=values
            )
        else:
            stmt = stmt.on_conflict_do_nothing()
        conn.execute(stmt)


# -- reads ---------------------------------------------------------------------


def get_session(conn: Connection, user_id: str, session_id: str) -> SessionState | None:
    s = pipeline_sessions.c
    r = conn.execute(
        select(pipeline_sessions).where(s.user_id == user_id, s.session_id == session_id)
    ).first()
    return SessionState(**r._mapping) if r is not None else None


def list_sessions(
    conn: Connection, user_id: str | None = None, *, pending_only: bool = False
) -> list[SessionState]:
    s = pipeline_sessions.c
    q = select(pipeline_sessions).order_by(s.user_id, s.last_activity_at, s.session_id)
    if user_id is not None:
        q = q.where(s.user_id == user_id)
    if pending_only:
        q = q.where(s.messages_pending > 0)
    return [SessionState(**r._mapping) for r in conn.execute(q)]


def get_user(conn: Connection, user_id: str) -> UserState | None:
    r = conn.execute(select(pipeline_users).where(pipeline_users.c.user_id == user_id)).first()
    return UserState(**r._mapping) if r is not None else None


def list_users(conn: Connection, user_id: str | None = None) -> list[UserState]:
    q = select(pipeline_users).order_by(pipeline_users.c.user_id)
    if user_id is not None:
        q = q.where(pipeline_users.c.user_id == user_id)
    return [UserState(**r._mapping) for r in conn.execute(q)]


__all__ = [
    "PipelineStateProjection",
    "SessionState",
    "UserState",
    "get_session",
    "get_user",
    "list_sessions",
    "list_users",
    "threshold_for",
]
