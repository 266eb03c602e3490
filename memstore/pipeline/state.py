"""The pipeline-state projection and the pipeline's view of derivation state.

The projection holds only what captures say: per (user, session) the last
capture (position, ``recorded_at``) and whether the session ended, and one
``pipeline_pending`` row per capture (rounds, messages) — the upstream's
buffer. Everything else the pipeline needs is a fact another projection
already records, read here for the user's ACTIVE generation:

- the extraction cursor, how many extractions moved it (the warm-up step) and
  the last of them: ``l1_cursors``;
- consecutive failures per stage: ``derive_failures``;
- the active generation: ``active_generations``;
- the last scene and persona runs: ``l2_state`` and ``l3_persona``.

Pending rounds and messages are the ``pipeline_pending`` rows after the
active cursor, summed when read (an index range of a few rows). So a
re-derive building another generation never moves the live cursor, and
activating it switches every session to that generation's cursor, without
this projection handling derivation events at all — it reads no other
projection's tables while applying, and rebuilds in any order.

Everything is taken from the events (positions and ``recorded_at``), never
from the wall clock, and no setting is baked in: the threshold is computed
from ``extractions`` when it is read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from sqlalchemy import Connection, delete, text

from memstore.config import Settings
from memstore.db import rawexec
from memstore.db.schema import pipeline_pending, pipeline_sessions
from memstore.db.sqlfn import limit
from memstore.derive.messages.events import MessagesCaptured, SessionEnded
from memstore.events.log import StoredEvent
from memstore.pipeline import before
from memstore.projections.base import Projection


def threshold_for(extractions: int, settings: Settings) -> int:
    """Rounds that trigger the next extraction: the warm-up steps (1 → 2 → 4),
    then every ``extract_every`` rounds."""
    if extractions < len(settings.pipeline.warmup):
        return max(1, settings.pipeline.warmup[extractions])
    return max(1, settings.pipeline.extract_every)


def most_threshold(settings: Settings) -> int:
    """The largest threshold ``threshold_for`` gives with these settings."""
    return max(threshold_for(n, settings) for n in range(len(settings.pipeline.warmup) + 1))


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


class PipelineStateProjection(Projection):
    name: ClassVar[str] = "pipeline_state"
    version: ClassVar[int] = 3  # 3: captures only; cursors and failures read from their tables
    handles: ClassVar[frozenset[str] | None] = frozenset({MessagesCaptured.TYPE, SessionEnded.TYPE})
    tables = (pipeline_sessions, pipeline_pending)

    def apply_live(self, conn: Connection, events: Sequence[StoredEvent]) -> None:
        # The state before these rows, for the capture's threshold check
        # (memstore.pipeline.before): read now, before they are written.
        before.settle(conn, events)
        self.apply(conn, events)

    def apply(self, conn: Connection, events: Sequence[StoredEvent]) -> None:
        pending: list[tuple[Any, ...]] = []
        sessions: dict[tuple[str, str], tuple[Any, ...]] = {}
        for ev in events:
            p = ev.payload
            if isinstance(p, MessagesCaptured):
                # Captures are the bulk of any log: a batch costs two
                # executemany statements, one row per session for the latest.
                rounds = [m.get("role") for m in p.messages].count("user")
                pending.append((ev.user_id, p.session_id, ev.position, rounds, len(p.messages)))
                sessions[(ev.user_id, p.session_id)] = (ev.position, ev.recorded_at, None)
            elif isinstance(p, SessionEnded):
                key = (ev.user_id, p.session_id)
                known = sessions.get(key)
                if known is not None:
                    sessions[key] = (*known[:2], ev.recorded_at)
                else:
                    self._flush(conn, pending, sessions)
                    pending, sessions = [], {}
                    rawexec.run(
                        conn,
                        "UPDATE pipeline_sessions SET ended_at = ? "
                        "WHERE user_id = ? AND session_id = ?",
                        (ev.recorded_at, ev.user_id, p.session_id),
                    )
        self._flush(conn, pending, sessions)

    @staticmethod
    def _flush(
        conn: Connection,
        pending: list[tuple[Any, ...]],
        sessions: dict[tuple[str, str], tuple[Any, ...]],
    ) -> None:
        # On the driver (memstore.db.rawexec): once per capture.
        rawexec.run_many(
            conn,
            "INSERT INTO pipeline_pending (user_id, session_id, position, rounds, "
            "messages) VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            pending,
        )
        # New talk reopens an ended session (ended_at back to NULL).
        rawexec.run_many(
            conn,
            "INSERT INTO pipeline_sessions (user_id, session_id, last_capture_position, "
            "last_activity_at, ended_at) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT (user_id, session_id) DO UPDATE SET "
            "last_capture_position = excluded.last_capture_position, "
            "last_activity_at = excluded.last_activity_at, ended_at = excluded.ended_at",
            [(u, s, *v) for (u, s), v in sessions.items()],
        )

    def purge_user(self, conn: Connection, user_id: str) -> None:
        for t in self.tables:
            conn.execute(delete(t).where(t.c.user_id == user_id))


# -- reads ---------------------------------------------------------------------

_ACTIVE = "COALESCE((SELECT generation FROM active_generations g WHERE g.user_id = s.user_id), 0)"
_AT = "(SELECT recorded_at FROM events e WHERE e.position = {})"
# One row per session with everything ``SessionState`` holds, for the user's
# active generation; pending counts from the capture rows after its cursor.
_SESSIONS = f"""
WITH s AS (SELECT s.*, {_ACTIVE} AS gen FROM pipeline_sessions s {{where}}),
c AS (
  SELECT s.*, COALESCE(c.cursor_position, 0) AS cursor_position,
         COALESCE(c.runs, 0) AS extractions, c.updated_position AS last_l1_position
  FROM s LEFT JOIN l1_cursors c ON c.user_id = s.user_id AND c.session_id = s.session_id
       AND c.generation = s.gen
)
SELECT c.user_id, c.session_id,
  COALESCE((SELECT sum(p.rounds) FROM pipeline_pending p WHERE p.user_id = c.user_id
            AND p.session_id = c.session_id AND p.position > c.cursor_position), 0),
  COALESCE((SELECT sum(p.messages) FROM pipeline_pending p WHERE p.user_id = c.user_id
            AND p.session_id = c.session_id AND p.position > c.cursor_position), 0),
  c.cursor_position, c.extractions, c.last_capture_position, c.last_activity_at,
  {_AT.format("c.last_l1_position")}, c.last_l1_position,
  COALESCE(f.failures, 0), f.last_error, {_AT.format("f.updated_position")}, c.ended_at
FROM c LEFT JOIN derive_failures f ON f.user_id = c.user_id AND f.stage = 'l1'
     AND f.session_id = c.session_id AND f.generation = c.gen
"""
_USERS = f"""
WITH s AS (
  SELECT user_id, max(last_activity_at) AS last_activity_at, {_ACTIVE} AS gen
  FROM pipeline_sessions s {{where}} GROUP BY user_id
),
l1 AS (
  SELECT s.user_id, max(c.updated_position) AS pos FROM s
  JOIN l1_cursors c ON c.user_id = s.user_id AND c.generation = s.gen GROUP BY s.user_id
)
SELECT s.user_id, s.last_activity_at,
  {_AT.format("l1.pos")}, COALESCE(l1.pos, 0),
  {_AT.format("l2.updated_position")}, COALESCE(l2.updated_position, 0),
  {_AT.format("l3.updated_position")}, COALESCE(l3.updated_position, 0),
  COALESCE(f2.failures, 0), COALESCE(f3.failures, 0),
  CASE WHEN COALESCE(f3.updated_position, 0) > COALESCE(f2.updated_position, 0)
       THEN f3.last_error ELSE f2.last_error END
FROM s LEFT JOIN l1 ON l1.user_id = s.user_id
LEFT JOIN l2_state l2 ON l2.user_id = s.user_id AND l2.generation = s.gen
LEFT JOIN l3_persona l3 ON l3.user_id = s.user_id AND l3.generation = s.gen
LEFT JOIN derive_failures f2 ON f2.user_id = s.user_id AND f2.stage = 'l2'
     AND f2.session_id = '' AND f2.generation = s.gen
LEFT JOIN derive_failures f3 ON f3.user_id = s.user_id AND f3.stage = 'l3'
     AND f3.session_id = '' AND f3.generation = s.gen
ORDER BY s.user_id
"""


def _sessions(conn: Connection, where: str, params: dict[str, Any]) -> list[SessionState]:
    rows = conn.execute(text(_SESSIONS.format(where=where)), params).all()
    return [SessionState(*r) for r in rows]


def get_session(conn: Connection, user_id: str, session_id: str) -> SessionState | None:
    got = _sessions(
        conn, "WHERE s.user_id = :u AND s.session_id = :s", {"u": user_id, "s": session_id}
    )
    return got[0] if got else None


def list_sessions(
    conn: Connection, user_id: str | None = None, *, pending_only: bool = False
) -> list[SessionState]:
    where, params = ("WHERE s.user_id = :u", {"u": user_id}) if user_id is not None else ("", {})
    out = _sessions(conn, where, params)
    if pending_only:
        out = [st for st in out if st.messages_pending > 0]
    return sorted(out, key=lambda st: (st.user_id, st.last_activity_at, st.session_id))


# What a capture's transaction needs of its session (``pending_reached``): the
# last capture and the active generation's cursor and extraction count, not
# the six-join ``_SESSIONS`` row (0.35 ms at load 5, for three numbers), and
# the rounds of at most ``{limit}`` pending captures that have any. One
# statement, so PostgreSQL answers it in one round trip.
_CAPTURED = f"""
SELECT s.last_capture_position, COALESCE(c.runs, 0),
  (SELECT COALESCE(sum(r.rounds), 0) FROM (
     SELECT p.rounds FROM pipeline_pending p WHERE p.user_id = s.user_id
       AND p.session_id = s.session_id AND p.position > COALESCE(c.cursor_position, 0)
       AND p.rounds > 0 ORDER BY p.position {{limit}}) r)
FROM pipeline_sessions s LEFT JOIN l1_cursors c ON c.user_id = s.user_id
     AND c.session_id = s.session_id AND c.generation = {_ACTIVE}
WHERE s.user_id = ? AND s.session_id = ?
"""


def pending_reached(
    conn: Connection, user_id: str, session_id: str, settings: Settings
) -> tuple[int, bool] | None:
    """``(last capture position, whether the pending rounds reached the
    extraction threshold)`` of a session (``SessionState.rounds_pending >=
    threshold``, the same answer), or None if the session has no state."""
    # Summing the first ``most`` pending captures (the largest threshold
    # there is) answers for any threshold ``need`` <= ``most``: each counts
    # at least one round, so if ``need`` of them exist both sums reach
    # ``need``, and if fewer do both sums are the sum of all of them.
    most = most_threshold(settings)
    row = rawexec.first(conn, _CAPTURED.format(limit=limit(most)), (user_id, session_id))
    if row is None:
        return None
    last, extractions, rounds = int(row[0]), int(row[1]), int(row[2])
    return last, rounds >= threshold_for(extractions, settings)


def get_user(conn: Connection, user_id: str) -> UserState | None:
    got = list_users(conn, user_id)
    return got[0] if got else None


def list_users(conn: Connection, user_id: str | None = None) -> list[UserState]:
    where, params = ("WHERE s.user_id = :u", {"u": user_id}) if user_id is not None else ("", {})
    return [UserState(*r) for r in conn.execute(text(_USERS.format(where=where)), params)]


__all__ = [
    "PipelineStateProjection",
    "SessionState",
    "UserState",
    "get_session",
    "get_user",
    "list_sessions",
    "list_users",
    "most_threshold",
    "pending_reached",
    "threshold_for",
]
