"""Running queued work: claim an item, run its stage with the lock held,
then complete it or schedule its retry, and arm what success calls for.

``PipelineService.drain`` calls :func:`drain`; everything else of the
service (timers, capture hooks, the lease) stays in ``service``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from contextlib import nullcontext
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from memstore.pipeline import queue, wakeup
from memstore.pipeline.pacing import Pacer
from memstore.pipeline.runner import Deriver, Outcome, Runner
from memstore.pipeline.state import UserState, get_session, get_user
from memstore.redact import redact
from memstore.timeutil import from_iso, timedelta

if TYPE_CHECKING:
    from memstore.config import Settings
    from memstore.derive.context import DeriveContext

log = logging.getLogger(__name__)


class Working(Protocol):
    """What running work needs of the pipeline service (a protocol, so that
    this module, which the service imports, does not import it back)."""

    store: DeriveContext
    settings: Settings
    deriver: Deriver
    runner: Runner
    lock_ttl_s: float
    pacer: Pacer

    @property
    def clock(self) -> Callable[[], datetime]: ...
    @property
    def stopping(self) -> bool: ...
    def arm_drain(self, when: datetime) -> None: ...
    def arm_l2(self, user: str, when: datetime, *, if_earlier: bool = True) -> None: ...
    def arm_l2_periodic(self, us: UserState, now: datetime) -> None: ...
    def l2_not_before(self, us: UserState) -> datetime | None: ...


def drain(
    svc: Working,
    owner: str,
    *,
    user_id: str | None = None,
    session_id: str | None = None,
    stages: tuple[str, ...] | None = None,
    only: Collection[queue.WorkKey] | None = None,
    paced: bool = False,
) -> list[Outcome]:
    """Claim and run ready work as ``owner`` until none is claimable; with
    ``only``, just the work of those keys. Each key runs at most once per
    drain: a failure waits for its retry, and work queued again for a key
    that just ran waits for the next drain (armed at the end). ``paced``:
    each claim and its item take their turn (memstore.pipeline.pacing)."""
    outcomes: list[Outcome] = []
    ran: set[queue.WorkKey] = set()

    def accept(item: queue.WorkItem) -> bool:
        return item.work not in ran and (only is None or item.work in only)

    while not svc.stopping:
        with svc.pacer.turn() if paced else nullcontext():
            item = queue.claim_in(
                svc.store.db,
                owner,
                now=svc.clock,
                ttl_s=svc.lock_ttl_s,
                user_id=user_id,
                session_id=session_id,
                stages=stages,
                accept=accept,
            )
            if item is None:
                break
            ran.add(item.work)
            out = _execute(svc, item, owner)
        if out is not None:
            outcomes.append(out)
    if svc.stopping:
        return outcomes  # what is queued stays queued for the next open
    with svc.store.db.read() as conn:
        waiting = queue.next_run_after(conn)
    if waiting is not None:
        svc.arm_drain(from_iso(waiting))
    return outcomes


def _execute(svc: Working, item: queue.WorkItem, owner: str) -> Outcome | None:
    if item.stage == "l1":
        with svc.store.db.read() as conn:
            st = get_session(conn, item.user_id, item.session_id)
        if st is None or st.messages_pending == 0:  # another run covered it
            with svc.store.db.write() as conn:
                queue.complete(conn, item, owner)
            wakeup.released()
            return None
    out = svc.runner.run(
        item.stage,
        item.user_id,
        item.session_id,
        owner,
        item.attempts + 1,
        cancelled=lambda: svc.stopping,
    )
    if not out.ok and svc.stopping:
        # Cut short by close(): not the work's fault, so no attempt counts.
        with svc.store.db.write() as conn:
            queue.release(conn, item, owner)
        wakeup.released()
        log.debug("%s of %s/%s cut short by close", item.stage, item.user_id, item.session_id)
        return out
    retry_at = None
    hastened = 0
    p = svc.settings.pipeline
    with svc.store.db.write() as conn:
        if out.ok:
            queue.complete(conn, item, owner)
            if item.attempts:  # a retry worked: what waits on the same outage runs now
                hastened = queue.hasten_retries(conn, now=svc.clock())
        else:
            delay = queue.retry_delay(
                item.attempts + 1,
                base_s=p.retry_delay_s,
                steady=p.max_retries,
                cap_s=p.retry_max_delay_s,
            )
            retry_at = queue.fail(
                conn,
                item,
                owner,
                error=redact(out.error or "failed"),
                now=svc.clock(),
                delay_s=delay,
            )
    wakeup.released()  # committed: whoever waits for the item looks again now
    if out.ok:
        if hastened:
            svc.arm_drain(svc.clock())
        _after_success(svc, item, out)
    elif retry_at is not None:
        svc.arm_drain(retry_at)
        if item.attempts + 1 == p.max_retries:
            log.warning(
                "%s for %s/%s failed %d times; retrying, each wait longer, up to %.0f s",
                item.stage,
                item.user_id,
                item.session_id,
                p.max_retries,
                p.retry_max_delay_s,
            )
    return out


def _after_success(svc: Working, item: queue.WorkItem, out: Outcome) -> None:
    now = svc.clock()
    with svc.store.db.read() as conn:
        us = get_user(conn, item.user_id)
    if us is None:
        return
    if item.stage == "l1":
        due = now + timedelta(seconds=svc.settings.pipeline.l2_delay_s)
        not_before = svc.l2_not_before(us)
        svc.arm_l2(item.user_id, max(due, not_before) if not_before else due)
    elif item.stage == "l2":
        if out.persona_requested or svc.deriver.persona_due(svc.store, item.user_id):
            with svc.store.db.write() as conn:
                queue.enqueue(conn, item.user_id, "l3", now=now)
        svc.arm_l2_periodic(us, now)


__all__ = ["Working", "drain"]
