"""``end_session``: extract what a session has pending, within a bound, then
record that it ended. The extraction runs on its own daemon thread so the
caller's wait is bounded even when a run is not; what does not finish stays
queued (never lost) and the report says so.

The report's ``ran`` also lists the extraction another worker did (the
store's own scheduler, another process, an earlier ``run_pipeline``): the one
it finished while this call waited for it, or, when the session had nothing
pending, the one that extracted it since it was last ended. Without them a
session the scheduler had just extracted was reported as ``ran: []``, as if
nothing had been done."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Literal, Protocol

from memstore.derive.events import L1Extracted, RunFailed
from memstore.derive.messages.events import SessionEnded, l0_stream
from memstore.errors import MemstoreError
from memstore.events.log import NewEvent
from memstore.logtext import debug_detail, loggable
from memstore.pipeline import queue, wakeup
from memstore.pipeline.runner import Outcome
from memstore.pipeline.scheduler import idle_job_id
from memstore.pipeline.state import SessionState, get_session
from memstore.records import EndSessionReport, StageRun
from memstore.timeutil import from_iso

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from memstore.derive.context import DeriveContext
    from memstore.pipeline.scheduler import Timers


class Ending(Protocol):
    """What ending a session needs of the pipeline service (a protocol, so
    that this module, which the service imports, does not import it back)."""

    store: DeriveContext
    timers: Timers
    _workers: list[threading.Thread]

    @property
    def clock(self) -> Callable[[], datetime]: ...
    @property
    def stopping(self) -> bool: ...
    def flush(self) -> None: ...
    def drain(
        self,
        *,
        user_id: str | None = None,
        session_id: str | None = None,
        stages: tuple[str, ...] | None = None,
    ) -> list[Outcome]: ...


log = logging.getLogger(__name__)


def end_session(self: Ending, user_id: str, session_id: str, timeout_s: float) -> EndSessionReport:
    """Extract what the session has pending (bounded by ``timeout_s``),
    cancel its idle timer and record ``l0.session_ended``."""
    self.flush()  # a capture's timer write must not re-arm after the cancel
    self.timers.remove(idle_job_id(user_id, session_id))
    with self.store.db.write() as conn:
        st = get_session(conn, user_id, session_id)
        before = st.messages_pending if st is not None else 0
        since = _reported_since(st, self.store.log.last_position(conn))
        if before:
            queue.enqueue(conn, user_id, "l1", session_id=session_id, now=self.clock())
    ran: list[Outcome] = []
    timed_out = False
    if before:
        done = threading.Event()
        worker = threading.Thread(
            target=_finish_session,
            args=(self, user_id, session_id, ran, done, timeout_s),
            name="memstore-end-session",
            daemon=True,
        )
        self._workers = [t for t in self._workers if t.is_alive()] + [worker]
        worker.start()
        timed_out = not done.wait(timeout_s)
    self.store.append(
        [
            NewEvent(
                l0_stream(user_id, session_id),
                SessionEnded(session_id=session_id),
                user_id=user_id,
            )
        ]
    )
    with self.store.db.read() as conn:
        st = get_session(conn, user_id, session_id)
        recorded = _runs_recorded(self.store, conn, user_id, session_id, since)
    # The log was read first, then this call's runs: a run of its own that
    # ended in between is in both, and listed once, as its own, in log order.
    own = {o.run_id: _stage_run(o.stage, o.ok, o.run_id, o.error, "end_session") for o in ran[:]}
    return {
        "user_id": user_id,
        "session_id": session_id,
        "pending_before": before,
        "pending_after": st.messages_pending if st is not None else 0,
        "ran": [own.pop(r["run_id"], r) for r in recorded] + list(own.values()),
        "timed_out": timed_out,
        "timeout_s": timeout_s,
    }


def _reported_since(st: SessionState | None, last: int) -> int:
    """The log position after which the session's extraction runs go in the
    report: the last one if nothing is pending because it extracted the
    session after it was last ended (or reopened it by new talk), else only
    what is recorded from now on."""
    if st is None or st.messages_pending or st.last_l1_position is None:
        return last
    if st.ended_at is not None and (st.last_l1_at is None or st.last_l1_at <= st.ended_at):
        return last  # reported when the session was ended then
    return st.last_l1_position - 1


def _runs_recorded(
    store: DeriveContext, conn: Connection, user_id: str, session_id: str, since: int
) -> list[StageRun]:
    """The session's extraction runs (done or failed) recorded after ``since``."""
    runs: list[StageRun] = []
    for ev in store.log.read(
        conn, after=since, types=[L1Extracted.TYPE, RunFailed.TYPE], user_id=user_id
    ):
        p = ev.payload
        if isinstance(p, L1Extracted) and p.session_id == session_id:
            runs.append(_stage_run("l1", True, p.run_id, None, "worker"))
        elif isinstance(p, RunFailed) and p.stage == "l1" and p.session_id == session_id:
            runs.append(_stage_run("l1", False, p.run_id, p.error, "worker"))
    return runs


def _stage_run(
    stage: str, ok: bool, run_id: str, error: str | None, by: Literal["end_session", "worker"]
) -> StageRun:
    return {"stage": stage, "ok": ok, "run_id": run_id, "error": error, "by": by}


def _finish_session(
    self: Ending,
    user_id: str,
    session_id: str,
    ran: list[Outcome],
    done: threading.Event,
    timeout_s: float,
) -> None:
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            ran.extend(self.drain(user_id=user_id, session_id=session_id, stages=("l1",)))
            if ran and not ran[-1].ok:
                return  # failed: its retry is scheduled; the report says so
            now = self.clock()
            seen = wakeup.mark()
            with self.store.db.write() as conn:
                st = get_session(conn, user_id, session_id)
                if st is None or st.messages_pending == 0:
                    return
                items = [
                    i
                    for i in queue.pending(conn, user_id)
                    if i.stage == "l1" and i.session_id == session_id
                ]
                if not items:  # captured after the last run: queue it too
                    queue.enqueue(conn, user_id, "l1", session_id=session_id, now=now)
                    continue
            if all(i.claimed_by is None and from_iso(i.run_after) > now for i in items):
                return  # only a retry that is not due yet
            # Another worker holds the session: wait until it lets go.
            holders = [i.claimed_by for i in items if i.claimed_by is not None]
            wakeup.wait(seen, holders, deadline - time.monotonic())
    except MemstoreError as e:
        level = logging.DEBUG if self.stopping else logging.WARNING
        why = loggable(e)
        log.log(level, "end_session %s/%s: extraction stopped: %s", user_id, session_id, why)
        debug_detail(log, "end_session", e)
    finally:
        done.set()


__all__ = ["end_session"]
