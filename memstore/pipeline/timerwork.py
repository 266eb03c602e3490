"""What the pipeline's timers do when they fire (the scheduler's threads, or
``run_due`` in tests); ``PipelineService``'s ``on_*_timer`` methods, which
the timer jobs call, hand over to these.

An idle timer queues the session's L1 work once its deadline really passed
(a later capture moved it: arm again for the new one). An L2 timer queues
the user's scene step when L1 wrote something new and ``l2_min_interval_s``
has passed since the last one; otherwise it keeps the periodic L2 of a user
active within ``l2_active_window_s``. The retention timer erases what is
past the retention limits and looks again later.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from memstore.config import Settings
from memstore.pipeline import queue
from memstore.pipeline.reconcile import idle_due
from memstore.pipeline.runner import Outcome
from memstore.pipeline.state import UserState, get_session, get_user
from memstore.timeutil import from_iso, timedelta

if TYPE_CHECKING:
    from memstore.derive.context import DeriveContext

log = logging.getLogger(__name__)


class Firing(Protocol):
    """What the timers' work needs of the pipeline service (a protocol, so
    that this module, which the service imports, does not import it back)."""

    store: DeriveContext
    settings: Settings

    @property
    def clock(self) -> Callable[[], datetime]: ...
    def forget_idle(self, user: str | None = None, session: str | None = None) -> None: ...
    def arm_idle(
        self, user: str, session: str, due: datetime, *, if_earlier: bool = False
    ) -> bool: ...
    def arm_l2(self, user: str, when: datetime, *, if_earlier: bool = True) -> None: ...
    def arm_retention(self, when: datetime) -> None: ...
    def drain(self, *, paced: bool = False) -> list[Outcome]: ...


def idle_fired(svc: Firing, user_id: str, session_id: str) -> None:
    # Before the read: a capture committed after it arms again itself.
    svc.forget_idle(user_id, session_id)
    with svc.store.db.read() as conn:
        st = get_session(conn, user_id, session_id)
    if st is None or st.messages_pending == 0:
        return
    now = svc.clock()
    due = idle_due(st, svc.settings)
    if due > now:  # a later capture moved the deadline
        svc.arm_idle(user_id, session_id, due)
        return
    with svc.store.db.write() as conn:
        queue.enqueue(conn, user_id, "l1", session_id=session_id, now=now)
    svc.drain(paced=True)


def l2_fired(svc: Firing, user_id: str) -> None:
    with svc.store.db.read() as conn:
        us = get_user(conn, user_id)
    if us is None:
        return
    now = svc.clock()
    if us.l2_has_new_input:
        earliest = l2_not_before(svc.settings, us)
        if earliest is not None and earliest > now:
            svc.arm_l2(user_id, earliest, if_earlier=False)
            return
        with svc.store.db.write() as conn:
            queue.enqueue(conn, user_id, "l2", now=now)
        svc.drain(paced=True)
    else:
        arm_l2_periodic(svc, us, now)


def retention_fired(svc: Firing) -> None:
    from memstore.forgetting.retention import CHECK_EVERY_S, Policy, run_retention

    policy = Policy.of(svc.settings)
    if not policy.active:
        return  # switched off since the job was armed
    reports = run_retention(svc.store.kernel, policy, llm=svc.store.llm_client() is not None)
    if reports:
        log.info("retention erased data of %d user(s)", len(reports))
    svc.arm_retention(svc.clock() + timedelta(seconds=CHECK_EVERY_S))


def l2_not_before(settings: Settings, us: UserState) -> datetime | None:
    """The earliest the user's next L2 may run (``l2_min_interval_s`` after the last)."""
    if us.last_l2_at is None:
        return None
    return from_iso(us.last_l2_at) + timedelta(seconds=settings.pipeline.l2_min_interval_s)


def arm_l2_periodic(svc: Firing, us: UserState, now: datetime) -> None:
    """While the user was active lately: L2 again within ``l2_max_interval_s``."""
    window = timedelta(seconds=svc.settings.pipeline.l2_active_window_s)
    if us.last_activity_at is not None and from_iso(us.last_activity_at) >= now - window:
        svc.arm_l2(us.user_id, now + timedelta(seconds=svc.settings.pipeline.l2_max_interval_s))


__all__ = [
    "Firing",
    "arm_l2_periodic",
    "idle_fired",
    "l2_fired",
    "l2_not_before",
    "retention_fired",
]
