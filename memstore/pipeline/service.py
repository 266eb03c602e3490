"""``PipelineService``: when L1/L2/L3 run, durably (the upstream's
``captureAtomic``, timers, queue and locks, on the store's SQLite file).

Capture path (one transaction, then a cheap hook):

1. ``Store.capture`` appends ``l0.captured`` through the kernel, which applies inline projections
   (``PipelineStateProjection`` counts the rounds and records the session's
   last activity, which is its idle deadline) — then calls
   ``on_captured(conn, stored)`` in the same transaction: at the warm-up
   threshold it enqueues L1 work. That is the capture's only write.
2. After commit, ``after_commit(stored)`` notes the captured sessions (no
   I/O) for the timer thread, which arms what the committed state calls
   for (``reconcile.arm_sessions``) for every session noted since its last
   pass: the drain timer if work is queued, else an idle timer — only when
   none is armed at or before the deadline. A timer armed for an earlier
   capture of the session fires, sees the moved deadline and re-arms, so a
   session costs one job-store write per idle period, not one per capture
   (2000 captures of 20 sessions: 20 writes, against 3980 when every
   capture re-armed its timer; ``tests/pipeline/test_pipeline_apscheduler.py`` keeps
   it so). A crash between 1 and 2 loses nothing: ``reconcile`` re-arms
   timers from the state.

Work runs by ``drain``: claim (``Database.queue_write``: BEGIN IMMEDIATE on
SQLite, ``FOR UPDATE SKIP LOCKED`` without the log's lock on PostgreSQL, so
worker processes there claim at once) → run with the lock held and
renewed → complete, or fail (retried after ``retry_delay_s``, then on a
back-off doubling up to ``retry_max_delay_s``, for as long as the work is
pending: the cursor never moved, and the work runs by itself once the
endpoint is back). Success of L1 arms ``l2:<user>`` no earlier than
``l2_delay_s`` after it and ``l2_min_interval_s`` after the last L2; L2 runs
at least every ``l2_max_interval_s`` while the user was active within
``l2_active_window_s``; L3 runs after L2 when the scene step asked for it or
``persona_due`` says so.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Collection, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection
from sqlalchemy.exc import SQLAlchemyError

from memstore.derive.events import ScenesUpdated
from memstore.derive.follow import FORGET_NOTE
from memstore.derive.messages.events import MessagesCaptured
from memstore.errors import MemstoreError, PipelineError
from memstore.events.log import StoredEvent
from memstore.pipeline import (
    before,
    endsession,
    owners,
    queue,
    runnow,
    scheduler,
    timerwork,
    wakeup,
    work,
)
from memstore.pipeline.lease import LeaseKeeper
from memstore.pipeline.pacing import Pacer
from memstore.pipeline.reconcile import arm_sessions, reconcile
from memstore.pipeline.runner import Deriver, ModuleDeriver, Outcome, Runner
from memstore.pipeline.scheduler import (
    DRAIN_JOB_ID,
    DRAIN_TIMER,
    IDLE_TIMER,
    L2_TIMER,
    RETENTION_JOB_ID,
    RETENTION_TIMER,
    Timers,
    idle_job_id,
    l2_job_id,
)
from memstore.pipeline.state import (
    PipelineStateProjection,
    UserState,
    most_threshold,
    pending_reached,
    threshold_for,
)
from memstore.pipeline.status import build_status
from memstore.pipeline.threads import DaemonPool, log_failure, time_left
from memstore.records import EndSessionReport, PipelineStatus

if TYPE_CHECKING:
    from memstore.derive.context import DeriveContext

log = logging.getLogger(__name__)


def _asks_llm_persona(ev: StoredEvent) -> bool:
    """A forget's rule-built stand-in, written for an LLM deriver: the LLM is
    to write the persona again."""
    p = ev.payload
    return isinstance(p, ScenesUpdated) and p.persona_refresh and FORGET_NOTE in p.notes


class PipelineService:
    def __init__(
        self,
        store: DeriveContext,
        *,
        deriver: Deriver | None = None,
        lease_ttl_s: float | None = None,
        lock_ttl_s: float | None = None,
        reconcile_every_s: float = 60.0,
    ) -> None:
        self.store = store
        self.settings = store.settings
        self.lease_ttl_s = lease_ttl_s or store.settings.pipeline.lease_ttl_s
        # Short: a run renews its lock every ttl/3, and a dead owner on another
        # host blocks its sessions for at most this long (same host: at once).
        self.lock_ttl_s = lock_ttl_s or store.settings.pipeline.lock_ttl_s
        self.reconcile_every_s = reconcile_every_s
        self.owner = owners.new_instance(uuid.uuid4().hex[:8])
        self.deriver: Deriver = deriver or ModuleDeriver()
        self.runner = Runner(store, self.deriver, self.lock_ttl_s)
        self.projection = PipelineStateProjection()
        # How long close() lets running work finish before abandoning it (on
        # daemon threads, so exit never hangs; an abandoned run is released,
        # not failed, and claimed again after the next open).
        self.close_timeout_s = store.settings.pipeline.close_timeout_s
        self._stopping = threading.Event()
        # Drains give way to the captures of this process (pacing).
        self.pacer = Pacer(self._stopping)
        # Timer jobs fire into this service (the scheduler's executor hands
        # it to them): nothing process-wide finds it.
        self.timers = Timers(store.db, self, close_timeout_s=self.close_timeout_s)
        self._timer_thread = DaemonPool(1, "memstore-timers")
        # Sessions captured since the timer thread's last pass (after_commit
        # adds, the pass takes them all: one pass arms for many captures).
        self._captured: set[tuple[str, str]] = set()
        self._captured_lock = threading.Lock()
        self._arm_queued = False
        # What spares a capture its timer pass (a pass per capture
        # was two read transactions and a job unpickle on the timer thread,
        # competing with the next capture). ``_idle_armed``: the idle timers
        # armed through this service, with when each is due; until then a
        # capture of the session needs no pass (a capture only moves the
        # deadline later, and the armed timer re-arms to it when it fires).
        # ``_queued``: the unclaimed L1 item of a session a pass already
        # armed the drain for (its sessions need no idle timer); a capture
        # that queues a new item gets a pass. Entries go when their timer
        # fires, is removed, or a drain claims work here; reconcile, the net
        # for what other processes change, clears them all. ``_items``: the
        # item each capture's transaction queued, until it commits.
        self._idle_armed: dict[tuple[str, str], datetime] = {}
        self._queued: dict[tuple[str, str], int] = {}
        self._items: dict[tuple[str, str], int] = {}
        # Reconcile runs here, never on the lease thread: a long reconcile
        # must not keep the lease from being renewed within its TTL.
        self._reconcile_thread = DaemonPool(1, "memstore-reconcile")
        self._reconcile_lock = threading.Lock()
        self._reconcile_queued = False
        self._lease: LeaseKeeper | None = None
        self._last_reconcile = 0.0
        self._workers: list[threading.Thread] = []

    @property
    def clock(self) -> Callable[[], datetime]:
        return self.store.clock

    def _owner(self) -> str:
        # Per thread: two drains of one process must not share lock ownership
        # (locks are re-entrant for their owner).
        return f"{self.owner}:{threading.get_ident()}"

    # -- lifecycle -------------------------------------------------------------

    def start(self) -> None:
        """Compete for the scheduler lease (its holder runs the timers)."""
        if self._lease is None:
            self._lease = LeaseKeeper(
                self.store.db,
                self.clock,
                self.owner,
                self.lease_ttl_s,
                on_gain=self._on_lease_gain,
                on_loss=self._on_lease_loss,
                on_tick=self._on_lease_tick,
            )
            self._lease.start()

    @property
    def stopping(self) -> bool:
        """True once ``stop`` began: failures from here on are the close's doing."""
        return self._stopping.is_set()

    def stop(self) -> None:
        """Stop timers and let running work finish (call before the database
        closes). Deterministic and bounded: no new work is claimed, the item
        in progress gets ``close_timeout_s`` to finish, and one still running
        after that is abandoned on its daemon thread (released, never counted
        as a failed attempt)."""
        self._stopping.set()
        deadline = time.monotonic() + self.close_timeout_s
        if self._lease is not None:
            self._lease.stop(max(1.0, time_left(deadline)))
            self._lease = None
        self._reconcile_thread.shutdown(wait=True, timeout=time_left(deadline))
        self._timer_thread.shutdown(wait=True, timeout=time_left(deadline))
        for t in self._workers:
            t.join(time_left(deadline))
        self.timers.shutdown(wait=True)
        owners.retire(self.owner)
        wakeup.released()  # what this service still holds is no longer waited for

    @property
    def is_scheduler(self) -> bool:
        """This process holds the lease and runs the timers."""
        return self._lease is not None and self._lease.held

    def _on_lease_gain(self) -> None:
        self.timers.resume()
        self._reconcile_soon()

    def _on_lease_loss(self) -> None:
        self.timers.pause()
        self.forget_idle()

    def _on_lease_tick(self) -> None:
        self.timers.wakeup()
        if time.monotonic() - self._last_reconcile >= self.reconcile_every_s:
            self._reconcile_soon()

    def _reconcile_soon(self) -> None:
        """Queue one reconcile on its own thread (the lease thread calls this);
        while one is queued or running, another request is dropped."""
        with self._reconcile_lock:
            if self._reconcile_queued:
                return
            self._reconcile_queued = True
        self._last_reconcile = time.monotonic()
        try:
            fut = self._reconcile_thread.submit(self._reconcile_job)
        except RuntimeError:  # stopping: the executor no longer takes work
            with self._reconcile_lock:
                self._reconcile_queued = False
            return
        fut.add_done_callback(log_failure("pipeline reconcile", lambda: self.stopping))

    def _reconcile_job(self) -> None:
        try:
            self.reconcile()
        finally:
            with self._reconcile_lock:
                self._reconcile_queued = False

    def _submit_timer_work(self, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn`` on the timer thread; a failure is logged, never lost silently."""
        try:
            fut = self._timer_thread.submit(fn, *args)
        except RuntimeError:  # closing: reconcile re-arms from the committed state
            log.debug("pipeline closing; timer work %s not queued", fn)
            return
        fut.add_done_callback(log_failure("pipeline timer thread", lambda: self.stopping))

    def flush(self) -> None:
        """Wait until timer writes queued by ``after_commit`` are done."""
        try:
            fut = self._timer_thread.submit(lambda: None)
        except RuntimeError:
            return
        fut.result()

    # -- capture hooks -----------------------------------------------------------

    def on_captured(self, conn: Connection, stored: Sequence[StoredEvent]) -> None:
        """In the capture transaction, after the inline projections applied:
        at the warm-up threshold, queue the session's L1 work. In a forget's
        transaction: queue the persona for the LLM (``derive.follow``)."""
        now = self.clock()
        for ev in stored:
            if _asks_llm_persona(ev):
                queue.enqueue(conn, ev.user_id, "l3", now=now)
        # Once per session, in the order sessions first appear (the order of
        # their captures, as when each commits alone): the state read is the
        # session's after every capture in this transaction (several share one
        # when they are committed together), so its last capture answers for all.
        last: dict[tuple[str, str], StoredEvent] = {}
        captures = 0
        for ev in stored:
            if not ev.duplicate and isinstance(ev.payload, MessagesCaptured):
                last[(ev.user_id, ev.payload.session_id)] = ev
                captures += 1
        if captures:
            self.pacer.captured(captures)
        for (_, session), ev in last.items():
            # A capture noted its session's state before its writes (one
            # round trip less on PostgreSQL); other appends read it now.
            got = before.reached(conn, ev.user_id, session, self._threshold)
            if got is None:
                got = pending_reached(conn, ev.user_id, session, self.settings)
            if got is None or got[0] < ev.position:
                raise PipelineError(
                    "pipeline state is behind the capture: apply the inline "
                    "projections (PipelineStateProjection) before on_captured"
                )
            if got[1]:
                item = queue.enqueue(conn, ev.user_id, "l1", session_id=session, now=now)
                with self._captured_lock:
                    self._items[(ev.user_id, session)] = item

    def before_capture(self, conn: Connection, sessions: Sequence[tuple[str, str]]) -> None:
        """Captures' builds, before their first read: each session's state
        before the captures is to be read ahead (memstore.pipeline.before),
        and, for a session whose last capture queued work nobody has taken
        yet, the enqueue's read of that item (this capture most likely
        reaches the threshold too)."""
        before.expect(conn, sessions, most_threshold(self.settings))
        with self._captured_lock:
            queued = [k for k in sessions if k in self._queued]
        for user_id, session_id in queued:
            queue.read_open_ahead(conn, user_id, "l1", session_id=session_id)

    def _threshold(self, extractions: int) -> int:
        return threshold_for(extractions, self.settings)

    def after_commit(self, stored: Sequence[StoredEvent]) -> None:
        """After the capture committed: note its sessions for the timer
        thread (no I/O here; the capture never waits for a timer), unless
        each has an idle timer due later and queued no work."""
        sessions = {
            (ev.user_id, ev.payload.session_id)
            for ev in stored
            if not ev.duplicate and isinstance(ev.payload, MessagesCaptured)
        }
        if any(_asks_llm_persona(ev) for ev in stored):
            self._submit_timer_work(self.arm_drain, self.clock())
        if not sessions:
            return
        now = self.clock()
        with self._captured_lock:
            sessions = {k for k in sessions if self._needs_pass(k, now)}
            if not sessions:
                return
            self._captured |= sessions
            if self._arm_queued:
                return  # the queued pass will take these too
            self._arm_queued = True
        self._submit_timer_work(self._arm_captured)

    def _arm_captured(self) -> None:
        with self._captured_lock:
            sessions, self._captured = self._captured, set()
            self._arm_queued = False
        try:
            arm_sessions(self, sessions)
        except (MemstoreError, SQLAlchemyError) as e:
            # APScheduler's job store raises SQLAlchemy errors (e.g. "database
            # is locked" past busy_timeout) under heavy capture. The state is
            # durable; reconcile re-arms from it.
            log.debug(
                "could not arm pipeline timers for %d session(s) (reconcile will): %s: %s",
                len(sessions),
                type(e).__name__,
                e,
            )

    def arm_idle(self, user: str, session: str, due: datetime, *, if_earlier: bool = False) -> bool:
        job, args = idle_job_id(user, session), [user, session]
        wrote = True
        if if_earlier:
            due, wrote = self.timers.due_by(job, IDLE_TIMER, args, due)
        else:
            self.timers.set(job, IDLE_TIMER, args, due)
        with self._captured_lock:
            self._idle_armed[(user, session)] = due
        return wrote

    def _needs_pass(self, key: tuple[str, str], now: datetime) -> bool:
        """(With the lock held, after ``key``'s capture committed.)"""
        item = self._items.pop(key, None)
        if item is not None and self._queued.get(key) != item:
            self._queued[key] = item  # new work: the pass arms the drain
            return True
        return key not in self._queued and not now < self._idle_armed.get(key, now)

    def forget_idle(self, user: str | None = None, session: str | None = None) -> None:
        """Drop what this service knows of armed timers and queued work (one
        session's, a user's, or all): the next capture of those sessions
        gets a timer pass again."""
        with self._captured_lock:
            for known in (self._idle_armed, self._queued):
                if user is None:
                    known.clear()
                elif session is not None:
                    known.pop((user, session), None)
                else:
                    for key in [k for k in known if k[0] == user]:
                        del known[key]

    def arm_drain(self, when: datetime) -> None:
        self.timers.set_if_earlier(DRAIN_JOB_ID, DRAIN_TIMER, [], when)

    def arm_l2(self, user: str, when: datetime, *, if_earlier: bool = True) -> None:
        if if_earlier:
            self.timers.set_if_earlier(l2_job_id(user), L2_TIMER, [user], when)
        else:
            self.timers.set(l2_job_id(user), L2_TIMER, [user], when)

    # -- timer callbacks (scheduler threads, or run_due in tests) ----------------

    def on_idle_timer(self, user_id: str, session_id: str) -> None:
        timerwork.idle_fired(self, user_id, session_id)

    def on_l2_timer(self, user_id: str) -> None:
        timerwork.l2_fired(self, user_id)

    def on_drain_timer(self) -> None:
        self.drain(paced=True)

    def on_retention_timer(self) -> None:
        """Erase what is past the retention limits, then look again later."""
        timerwork.retention_fired(self)

    def arm_retention(self, when: datetime) -> None:
        self.timers.set_if_earlier(RETENTION_JOB_ID, RETENTION_TIMER, [], when)

    def l2_not_before(self, us: UserState) -> datetime | None:
        return timerwork.l2_not_before(self.settings, us)

    def arm_l2_periodic(self, us: UserState, now: datetime) -> None:
        timerwork.arm_l2_periodic(self, us, now)

    # -- running work --------------------------------------------------------------

    def drain(
        self,
        *,
        user_id: str | None = None,
        session_id: str | None = None,
        stages: tuple[str, ...] | None = None,
        only: Collection[queue.WorkKey] | None = None,
        paced: bool = False,
    ) -> list[Outcome]:
        """Run ready queued work (in this thread) until none is claimable;
        with ``only``, just the work of those keys (``work.drain``).
        ``paced``: give way to captures (``pacing``), as timers do; a caller
        asking for derivation now (run_pipeline, end_session) is not kept waiting."""
        with self._captured_lock:
            self._queued.clear()  # items claimed below: new ones need the drain armed
        return work.drain(
            self,
            self._owner(),
            user_id=user_id,
            session_id=session_id,
            stages=stages,
            only=only,
            paced=paced,
        )

    # -- explicit operations -------------------------------------------------------

    def run_pipeline(self, user_id: str | None = None, wait: bool = True) -> list[Outcome]:
        """Run due work now (``runnow.run_pipeline``); ``wait=False`` queues it
        for the scheduler."""
        if not wait:
            runnow.queue_due(self, user_id)
            self._submit_timer_work(self.arm_drain, self.clock())
            return []
        return runnow.run_pipeline(self, user_id)

    def end_session(
        self, user_id: str, session_id: str, timeout_s: float = 30.0
    ) -> EndSessionReport:
        """Extract what the session has pending (bounded by ``timeout_s``),
        cancel its idle timer and record ``l0.session_ended``."""
        try:
            return endsession.end_session(self, user_id, session_id, timeout_s)
        finally:
            self.forget_idle(user_id, session_id)  # its timer was removed

    def status(self, user_id: str | None = None) -> list[PipelineStatus]:
        with self.store.db.read() as conn:
            return build_status(conn, self.settings, user_id)

    def purge_user(self, conn: Connection, user_id: str) -> dict[str, int]:
        """In the caller's (erasure) transaction: this user's state, queued
        work, locks and timers; nothing of anyone else's."""
        self.projection.purge_user(conn, user_id)
        items = queue.purge_user(conn, user_id)
        timers = scheduler.purge_user_jobs(conn, user_id)
        self.forget_idle(user_id)
        return {"queued": items, "timers": timers}

    def reconcile(self) -> dict[str, int]:
        """Re-create timers and queued work the committed state calls for; see
        ``memstore.pipeline.reconcile``. Runs (on its own thread) when this
        process gains the lease and every ``reconcile_every_s`` while it holds
        it; callable directly too."""
        self._last_reconcile = time.monotonic()
        self.forget_idle()
        return reconcile(self)


__all__ = ["PipelineService"]
