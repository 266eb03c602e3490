"""The pipeline-state projection: what the upstream kept in process memory.

Per (user, session) it holds the rounds and messages captured after the
session's extraction cursor (the upstream's buffer and ``conversation_count``),
the cursor itself (from ``l1.extracted``), how many extractions advanced it
(which step of the warm-up sequence applies), the last run and activity
times, and consecutive failures (``pipeline.run_failed``). Per user it holds
the L1/L2/L3 run times that drive L2 and L3 timing.

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
from memstore.db.schema import pipeline_pending, pipeline_sessions, pipeline_users
from memstore.derive.events import L1Extracted, PersonaUpdated, RunFailed, ScenesUpdated
from memstore.events.log import StoredEvent
from memstore.l0.events import MessagesCaptured, SessionEnded
from memstore.projections.base import Projection


def threshold_for(extractions: int, settings: Settings) -> int:
    """Rounds that trigger the next extraction: the warm-up steps (1 → 2 → 4),
    then every ``extract_every`` rounds."""
    if extractions < len(settings.warmup):
        return max(1, settings.warmup[extractions])
    return max(1, settings.extract_every)


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


class PipelineStateProjection(Projection):
    name: ClassVar[str] = "pipeline_state"
    handles: ClassVar[frozenset[str] | None] = frozenset(
        {
            MessagesCaptured.TYPE,
            SessionEnded.TYPE,
            L1Extracted.TYPE,
            RunFailed.TYPE,
            ScenesUpdated.TYPE,
            PersonaUpdated.TYPE,
        }
    )
    tables = (pipeline_sessions, pipeline_pending, pipeline_users)

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
            elif isinstance(p, ScenesUpdated):
                self._user_run(conn, ev, "l2")
            elif isinstance(p, PersonaUpdated):
                self._user_run(conn, ev, "l3")
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
            "INSERT INTO pipeline_pending (user_id, session_id, position, rounds, messages) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            pending,
        )
        # New talk reopens an ended session (ended_at back to NULL).
        conn.exec_driver_sql(
            "INSERT INTO pipeline_sessions (user_id, session_id, rounds_pending, "
            "messages_pending, cursor_position, extractions, last_capture_position, "
            "last_activity_at, failures) VALUES (?, ?, ?, ?, 0, 0, ?, ?, 0) "
            "ON CONFLICT (user_id, session_id) DO UPDATE SET "
            "rounds_pending = rounds_pending + excluded.rounds_pending, "
            "messages_pending = messages_pending + excluded.messages_pending, "
            "last_capture_position = excluded.last_capture_position, "
            "last_activity_at = excluded.last_activity_at, ended_at = NULL",
            sessions,
        )
        conn.exec_driver_sql(
            "INSERT INTO pipeline_users (user_id, last_activity_at, last_l1_position, "
            "last_l2_position, last_l3_position, l2_failures, l3_failures) "
            "VALUES (?, ?, 0, 0, 0, 0, 0) "
            "ON CONFLICT (user_id) DO UPDATE SET last_activity_at = excluded.last_activity_at",
            users,
        )

    def _extracted(self, conn: Connection, ev: StoredEvent, p: L1Extracted) -> None:
        s = pipeline_sessions.c
        row = conn.execute(
            select(s.cursor_position).where(s.user_id == ev.user_id, s.session_id == p.session_id)
        ).first()
        # A re-derive replays old batches into a new generation; only an
        # extraction that moves the cursor forward counts for the live pipeline.
        if row is None or p.cursor_position <= int(row[0]):
            return
        pp = pipeline_pending.c
        conn.execute(
            delete(pipeline_pending).where(
                pp.user_id == ev.user_id,
                pp.session_id == p.session_id,
                pp.position <= p.cursor_position,
            )
        )
        rounds, msgs = conn.execute(
            select(
                func.coalesce(func.sum(pp.rounds), 0), func.coalesce(func.sum(pp.messages), 0)
            ).where(pp.user_id == ev.user_id, pp.session_id == p.session_id)
        ).one()
        conn.execute(
            update(pipeline_sessions)
            .where(s.user_id == ev.user_id, s.session_id == p.session_id)
            .values(
                rounds_pending=int(rounds),
                messages_pending=int(msgs),
                cursor_position=p.cursor_position,
                extractions=s.extractions + 1,
                last_l1_at=ev.recorded_at,
                last_l1_position=ev.position,
                failures=0,
                last_error=None,
            )
        )
        self._upsert_user(
            conn, ev.user_id, {"last_l1_at": ev.recorded_at, "last_l1_position": ev.position}
        )

    def _failed(self, conn: Connection, ev: StoredEvent, p: RunFailed) -> None:
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
