"""``pipeline status``: one dict per user with its sessions, queue and timers.

Timers are read straight from APScheduler's table (id, next run time), so a
status call never starts a scheduler.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Connection, text

from memstore.config import Settings
from memstore.pipeline import queue
from memstore.pipeline.scheduler import JOB_TABLE, idle_job_id, l2_job_id
from memstore.pipeline.state import list_sessions, list_users
from memstore.records import PipelineStatus
from memstore.timeutil import UTC, to_iso


def timer_times(conn: Connection) -> dict[str, str | None]:
    rows = conn.execute(text(f"SELECT id, next_run_time FROM {JOB_TABLE}"))
    return {
        str(r[0]): to_iso(datetime.fromtimestamp(float(r[1]), UTC)) if r[1] is not None else None
        for r in rows
    }


def waiting(conn: Connection) -> tuple[int, int, str | None]:
    """Queued items, how many of them wait to retry a failure, and when the
    earliest one not running is due (``doctor`` shows it)."""
    items = queue.pending(conn)
    idle = [i for i in items if i.claimed_by is None]
    return (
        len(items),
        sum(1 for i in items if i.attempts > 0),
        min((i.run_after for i in idle), default=None),
    )


def build_status(
    conn: Connection, settings: Settings, user_id: str | None = None
) -> list[PipelineStatus]:
    timers = timer_times(conn)
    items = queue.pending(conn, user_id)
    sessions = list_sessions(conn, user_id)
    out: list[PipelineStatus] = []
    for us in list_users(conn, user_id):
        mine = [s for s in sessions if s.user_id == us.user_id]
        waits = [i.run_after for i in items if i.user_id == us.user_id and i.claimed_by is None]
        waits += [
            t
            for t in [timers.get(l2_job_id(us.user_id))]
            + [timers.get(idle_job_id(s.user_id, s.session_id)) for s in mine]
            if t is not None
        ]
        out.append(
            {
                "user_id": us.user_id,
                "last_activity_at": us.last_activity_at,
                "last_l1_at": us.last_l1_at,
                "last_l2_at": us.last_l2_at,
                "last_l3_at": us.last_l3_at,
                "l2_pending_input": us.l2_has_new_input,
                "l2_failures": us.l2_failures,
                "l3_failures": us.l3_failures,
                "last_error": us.last_error,
                "l2_timer": timers.get(l2_job_id(us.user_id)),
                "next_run_at": min(waits) if waits else None,
                "queued": [
                    {
                        "stage": i.stage,
                        "session_id": i.session_id,
                        "run_after": i.run_after,
                        "attempts": i.attempts,
                        "running": i.claimed_by is not None,
                        "last_error": i.last_error,
                    }
                    for i in items
                    if i.user_id == us.user_id
                ],
                "sessions": [
                    {
                        "session_id": s.session_id,
                        "rounds_pending": s.rounds_pending,
                        "messages_pending": s.messages_pending,
                        "threshold": s.threshold(settings),
                        "extractions": s.extractions,
                        "cursor_position": s.cursor_position,
                        "last_activity_at": s.last_activity_at,
                        "last_l1_at": s.last_l1_at,
                        "failures": s.failures,
                        "last_error": s.last_error,
                        "ended_at": s.ended_at,
                        "idle_timer": timers.get(idle_job_id(s.user_id, s.session_id)),
                    }
                    for s in mine
                ],
            }
        )
    return out


__all__ = ["build_status", "timer_times", "waiting"]
