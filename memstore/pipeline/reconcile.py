"""The reconciler: the committed pipeline state is the truth, timers and
queued work follow it.

It covers a crash between a capture's commit and its timer write, a timer
lost to a cross-process race (a holder removing a fired job another process
had just replaced), and a queue emptied by hand: sessions at their threshold
get L1 work, other sessions with pending messages get their idle timer,
users with unprocessed L1 output get their L2 timer, waiting retries get the
drain timer. Idempotent.

A session whose extraction failed ``max_retries`` times in a row since its
last capture is left alone: the queue dropped it on purpose, and re-queuing
it every minute would retry a permanently failing session forever. The next
capture (or a manual ``run_pipeline``) brings it back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memstore.config import Settings
from memstore.pipeline import queue
from memstore.pipeline.scheduler import idle_job_id, l2_job_id
from memstore.pipeline.state import SessionState, list_sessions, list_users
from memstore.timeutil import from_iso, timedelta

if TYPE_CHECKING:
    from memstore.pipeline.service import PipelineService


def gave_up(st: SessionState, settings: Settings) -> bool:
    """The session failed ``max_retries`` times and nothing was captured since."""
    if st.failures < max(settings.pipeline.max_retries, 1) or st.last_failure_at is None:
        return False
    return from_iso(st.last_failure_at) >= from_iso(st.last_activity_at)


def reconcile(svc: PipelineService) -> dict[str, int]:
    now = svc.clock()
    armed = enqueued = 0
    with svc.store.db.write() as conn:
        sessions = [
            st for st in list_sessions(conn, pending_only=True) if not gave_up(st, svc.settings)
        ]
        open_l1 = {(i.user_id, i.session_id) for i in queue.pending(conn) if i.stage == "l1"}
        for st in sessions:
            key = (st.user_id, st.session_id)
            if key not in open_l1 and st.rounds_pending >= st.threshold(svc.settings):
                queue.enqueue(conn, st.user_id, "l1", session_id=st.session_id, now=now)
                open_l1.add(key)
                enqueued += 1
        users = list_users(conn)
        waiting = queue.next_run_after(conn)
    jobs = {job_id for job_id, _ in svc.timers.jobs()}
    for st in sessions:
        if (st.user_id, st.session_id) not in open_l1 and idle_job_id(
            st.user_id, st.session_id
        ) not in jobs:
            due = from_iso(st.last_activity_at) + timedelta(seconds=svc.settings.pipeline.l1_idle_s)
            svc.arm_idle(st.user_id, st.session_id, due)
            armed += 1
    for us in users:
        if us.l2_has_new_input and l2_job_id(us.user_id) not in jobs:
            svc.arm_l2(us.user_id, svc.l2_not_before(us) or now)
            armed += 1
    if waiting is not None:
        svc.arm_drain(from_iso(waiting))
    return {"timers_armed": armed, "enqueued": enqueued}


__all__ = ["gave_up", "reconcile"]
