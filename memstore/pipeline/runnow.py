"""``run_pipeline``: run the work due now, in the caller's thread, bounded.

L1 of sessions with pending messages, then L2 for users with new L1 output,
then L3 when the scene step asked for it or ``persona_due`` says so. Waiting
retries run now too (queuing moves their ``run_after`` to now). Each step
claims only the work queued when it began, each item at most once: under a
steady capture load new work keeps arriving, and a call that took it too
would last as long as the load (a call ran for minutes). What arrives
meanwhile is left to the scheduler or the next call.

Work another worker (the background scheduler of the same store, another
process) holds when a step looks is waited for, bounded, and what it leads to
(the scenes after an L1 run, the persona after the scenes) runs once more:
otherwise the call returns while the scenes or the persona it was asked for
are still being written, and a recall right after it misses them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from sqlalchemy import Connection

from memstore.pipeline import owners, queue, wakeup
from memstore.pipeline.runner import Deriver, Outcome
from memstore.pipeline.state import list_sessions, list_users
from memstore.timeutil import from_iso

if TYPE_CHECKING:
    from collections.abc import Collection

    from memstore.derive.context import DeriveContext


class Running(Protocol):
    """What running the pipeline needs of the service (a protocol, so that
    this module, which the service imports, does not import it back)."""

    store: DeriveContext
    deriver: Deriver

    @property
    def clock(self) -> Callable[[], datetime]: ...
    def drain(
        self,
        *,
        user_id: str | None = None,
        session_id: str | None = None,
        stages: tuple[str, ...] | None = None,
        only: Collection[queue.WorkKey] | None = None,
    ) -> list[Outcome]: ...


def queue_due(svc: Running, user_id: str | None) -> set[queue.WorkKey]:
    """Queue L1 for every session with pending messages; returns all queued work."""
    now = svc.clock()
    with svc.store.db.write() as conn:
        for st in list_sessions(conn, user_id, pending_only=True):
            queue.enqueue(conn, st.user_id, "l1", session_id=st.session_id, now=now)
        return _queued(conn, user_id)


# How long a call waits for work another worker holds: as long as
# ``end_session`` waits by default; the work itself is never lost either way.
WAIT_FOR_OTHERS_S = 30.0


def run_pipeline(svc: Running, user_id: str | None) -> list[Outcome]:
    outcomes = svc.drain(user_id=user_id, stages=("l1",), only=queue_due(svc, user_id))
    outcomes += _scenes_and_persona(svc, user_id)
    if _wait_for_others(svc, user_id, WAIT_FOR_OTHERS_S):
        outcomes += _scenes_and_persona(svc, user_id)
        _wait_for_others(svc, user_id, WAIT_FOR_OTHERS_S)
    return outcomes


def _scenes_and_persona(svc: Running, user_id: str | None) -> list[Outcome]:
    with svc.store.db.write() as conn:
        users = list_users(conn, user_id)
        for us in users:
            if us.l2_has_new_input:
                queue.enqueue(conn, us.user_id, "l2", now=svc.clock())
        due = _queued(conn, user_id)
    outcomes = svc.drain(user_id=user_id, stages=("l2",), only=due)
    # After the scenes: the persona reads them, and L2 may have asked for it.
    for us in users:
        if svc.deriver.persona_due(svc.store, us.user_id):
            with svc.store.db.write() as conn:
                queue.enqueue(conn, us.user_id, "l3", now=svc.clock())
    with svc.store.db.read() as conn:
        due = _queued(conn, user_id)
    outcomes += svc.drain(user_id=user_id, stages=("l3",), only=due)
    return outcomes


def _wait_for_others(svc: Running, user_id: str | None, timeout_s: float) -> bool:
    """Wait until the items claimed now (by another worker: this call's own
    claims are done) are no longer claimed, at most ``timeout_s``; True if
    there were any. Only these items: new work keeps arriving under load.
    A worker of this process wakes the wait when it lets go of an item
    (``wakeup``); one in another process is polled for."""
    seen = wakeup.mark()
    with svc.store.db.read() as conn:
        held = [i for i in queue.pending(conn, user_id) if _held(i, svc.clock())]
    if not held:
        return False
    ids = {i.id for i in held}
    deadline = time.monotonic() + timeout_s
    while held and (left := deadline - time.monotonic()) > 0:
        wakeup.wait(seen, [i.claimed_by for i in held], left)
        seen = wakeup.mark()
        with svc.store.db.read() as conn:
            held = [
                i for i in queue.pending(conn, user_id) if i.id in ids and _held(i, svc.clock())
            ]
    return True


def _held(item: queue.WorkItem, now: datetime) -> bool:
    """Claimed by a worker that may still finish it: a claim that expired or
    whose owner is gone is taken over by the next claimer, not waited for."""
    if item.claimed_by is None or item.claimed_until is None:
        return False
    return from_iso(item.claimed_until) >= now and not owners.is_dead(item.claimed_by)


def _queued(conn: Connection, user_id: str | None) -> set[queue.WorkKey]:
    return {i.work for i in queue.pending(conn, user_id)}


__all__ = ["queue_due", "run_pipeline"]
