"""The reconciler: the committed pipeline state is the truth, timers and
queued work follow it.

It covers a crash between a capture's commit and its timer write, a timer
lost to a cross-process race (a holder removing a fired job another process
had just replaced), and a queue emptied by hand: sessions at their threshold
get L1 work, other sessions with pending messages get their idle timer,
users with unprocessed L1 output get their L2 timer, waiting retries get the
drain timer. Idempotent.

A failing session keeps its queued item, which waits on the queue's capped
back-off (``queue.retry_delay``): it is never dropped, so reconcile never
has to bring it back, and never retries it sooner than the back-off says.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from memstore.config import Settings
from memstore.pipeline import queue
from memstore.pipeline.scheduler import RETENTION_JOB_ID, idle_job_id, l2_job_id
from memstore.pipeline.state import (
    SessionState,
    UserState,
    get_session,
    list_sessions,
    list_users,
)
from memstore.timeutil import from_iso, timedelta

if TYPE_CHECKING:
    from memstore.derive.context import DeriveContext
    from memstore.pipeline.scheduler import Timers


class Arming(Protocol):
    """What reconcile needs of the pipeline service (a protocol, so that this
    module, which the service imports, does not import it back)."""

    store: DeriveContext
    settings: Settings
    timers: Timers

    @property
    def clock(self) -> Callable[[], datetime]: ...
    def arm_idle(
        self, user: str, session: str, due: datetime, *, if_earlier: bool = False
    ) -> bool: ...
    def arm_drain(self, when: datetime) -> None: ...
    def arm_retention(self, when: datetime) -> None: ...
    def arm_l2(self, user: str, when: datetime, *, if_earlier: bool = True) -> None: ...
    def l2_not_before(self, us: UserState) -> datetime | None: ...


def idle_due(st: SessionState, settings: Settings) -> datetime:
    """When the session counts as idle (its last activity + ``l1_idle_s``)."""
    return from_iso(st.last_activity_at) + timedelta(seconds=settings.pipeline.l1_idle_s)


def arm_sessions(svc: Arming, sessions: Collection[tuple[str, str]]) -> int:
    """Arm the timers the committed state calls for after captures of
    ``sessions``: the drain timer when work waits in the queue, and an idle
    timer for each session with pending messages and no queued L1 work —
    unless one is armed at or before its deadline (it will re-arm to the
    later deadline when it fires). Returns how many idle timers it wrote."""
    users = {user for user, _ in sessions}
    with svc.store.db.read() as conn:
        states = [get_session(conn, user, session) for user, session in sorted(sessions)]
        open_l1 = {
            (i.user_id, i.session_id)
            for user in users
            for i in queue.pending(conn, user)
            if i.stage == "l1"
        }
        waiting = queue.next_run_after(conn)
    armed = 0
    for st in states:
        if st is None or st.messages_pending == 0:
            continue
        if (st.user_id, st.session_id) not in open_l1:
            due = idle_due(st, svc.settings)
            armed += svc.arm_idle(st.user_id, st.session_id, due, if_earlier=True)
    if waiting is not None:
        svc.arm_drain(from_iso(waiting))
    return armed


def retention_active(settings: Settings) -> bool:
    from memstore.forgetting.retention import Policy  # retention builds on the erasure parts

    return Policy.of(settings).active


def reconcile(svc: Arming) -> dict[str, int]:
    now = svc.clock()
    armed = enqueued = 0
    with svc.store.db.write() as conn:
        sessions = list_sessions(conn, pending_only=True)
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
            svc.arm_idle(st.user_id, st.session_id, idle_due(st, svc.settings))
            armed += 1
    for us in users:
        if us.l2_has_new_input and l2_job_id(us.user_id) not in jobs:
            svc.arm_l2(us.user_id, svc.l2_not_before(us) or now)
            armed += 1
    if waiting is not None:
        svc.arm_drain(from_iso(waiting))
    if retention_active(svc.settings) and RETENTION_JOB_ID not in jobs:
        svc.arm_retention(now)
        armed += 1
    return {"timers_armed": armed, "enqueued": enqueued}


__all__ = ["arm_sessions", "idle_due", "reconcile"]
