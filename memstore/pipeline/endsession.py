"""``end_session``: extract what a session has pending, within a bound, then
record that it ended. The extraction runs on its own daemon thread so the
caller's wait is bounded even when a run is not; what does not finish stays
queued (never lost) and the report says so."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from memstore.derive.messages.events import SessionEnded, l0_stream
from memstore.errors import MemstoreError
from memstore.events.log import NewEvent
from memstore.logtext import debug_detail, loggable
from memstore.pipeline import queue
from memstore.pipeline.runner import Outcome
from memstore.pipeline.scheduler import idle_job_id
from memstore.pipeline.state import get_session
from memstore.records import EndSessionReport
from memstore.timeutil import from_iso

if TYPE_CHECKING:
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
    return {
        "user_id": user_id,
        "session_id": session_id,
        "pending_before": before,
        "pending_after": st.messages_pending if st is not None else 0,
        "ran": [{"stage": o.stage, "ok": o.ok, "run_id": o.run_id, "error": o.error} for o in ran],
        "timed_out": timed_out,
        "timeout_s": timeout_s,
    }


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
            time.sleep(0.05)  # another worker holds the session: wait for it
    except MemstoreError as e:
        level = logging.DEBUG if self.stopping else logging.WARNING
        why = loggable(e)
        log.log(level, "end_session %s/%s: extraction stopped: %s", user_id, session_id, why)
        debug_detail(log, "end_session", e)
    finally:
        done.set()


__all__ = ["end_session"]
