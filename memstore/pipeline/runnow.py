"""``run_pipeline``: run the work due now, in the caller's thread, bounded.

L1 of sessions with pending messages, then L2 for users with new L1 output,
then L3 when the scene step asked for it or ``persona_due`` says so. Waiting
retries run now too (queuing moves their ``run_after`` to now). Each step
claims only the work queued when it began, each item at most once: under a
steady capture load new work keeps arriving, and a call that took it too
would last as long as the load (a call ran for minutes). What arrives
meanwhile is left to the scheduler or the next call.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from sqlalchemy import Connection

from memstore.pipeline import queue
from memstore.pipeline.runner import Deriver, Outcome
from memstore.pipeline.state import list_sessions, list_users

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


def run_pipeline(svc: Running, user_id: str | None) -> list[Outcome]:
    outcomes = svc.drain(user_id=user_id, stages=("l1",), only=queue_due(svc, user_id))
    with svc.store.db.write() as conn:
        users = list_users(conn, user_id)
        for us in users:
            if us.l2_has_new_input:
                queue.enqueue(conn, us.user_id, "l2", now=svc.clock())
        due = _queued(conn, user_id)
    outcomes += svc.drain(user_id=user_id, stages=("l2",), only=due)
    # After the scenes: the persona reads them, and L2 may have asked for it.
    for us in users:
        if svc.deriver.persona_due(svc.store, us.user_id):
            with svc.store.db.write() as conn:
                queue.enqueue(conn, us.user_id, "l3", now=svc.clock())
    with svc.store.db.read() as conn:
        due = _queued(conn, user_id)
    outcomes += svc.drain(user_id=user_id, stages=("l3",), only=due)
    return outcomes


def _queued(conn: Connection, user_id: str | None) -> set[queue.WorkKey]:
    return {i.work for i in queue.pending(conn, user_id)}


__all__ = ["queue_due", "run_pipeline"]
