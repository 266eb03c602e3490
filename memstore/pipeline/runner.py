"""Running one derivation stage: the deriver seam, lock heartbeat, failure record.

The deriver is ``memstore.derive.api`` (``run_l1``, ``run_l2``, ``run_l3``,
``persona_due``) unless a test passes another object with those methods.
A run that raises or returns ``ok=False`` is a failed run: it must not have
advanced the cursor (the deriver appends ``L1Extracted`` only on success),
and it is recorded as a ``pipeline.run_failed`` event if the deriver did not
record one itself, so the failure is in the log and in ``status``.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

from memstore.db.engine import Database
from memstore.derive.events import RunFailed
from memstore.derive.runs import RunOutcome, append_checked
from memstore.errors import MemstoreError
from memstore.logtext import loggable
from memstore.pipeline import queue
from memstore.redact import redact
from memstore.timeutil import Clock

if TYPE_CHECKING:
    from memstore.derive.context import DeriveContext

log = logging.getLogger(__name__)


class Outcome(Protocol):
    """What a stage run reports (``memstore.derive.runs.RunOutcome`` fits)."""

    @property
    def stage(self) -> str: ...
    @property
    def ok(self) -> bool: ...
    @property
    def run_id(self) -> str: ...
    @property
    def persona_requested(self) -> bool: ...
    @property
    def error(self) -> str | None: ...


class Deriver(Protocol):
    def run_l1(
        self, store: DeriveContext, user_id: str, session_id: str, *, generation: int | None = None
    ) -> Outcome: ...
    def run_l2(self, store: DeriveContext, user_id: str) -> Outcome: ...
    def run_l3(self, store: DeriveContext, user_id: str) -> Outcome: ...
    def persona_due(self, store: DeriveContext, user_id: str) -> bool: ...


class ModuleDeriver:
    """``memstore.derive.api``, imported on first use (it imports the store)."""

    def _api(self) -> Any:
        from memstore.derive import api  # type: ignore[attr-defined,unused-ignore]

        return api

    def run_l1(
        self, store: DeriveContext, user_id: str, session_id: str, *, generation: int | None = None
    ) -> Outcome:
        out: Outcome = self._api().run_l1(store, user_id, session_id, generation=generation)
        return out

    def run_l2(self, store: DeriveContext, user_id: str) -> Outcome:
        out: Outcome = self._api().run_l2(store, user_id)
        return out

    def run_l3(self, store: DeriveContext, user_id: str) -> Outcome:
        out: Outcome = self._api().run_l3(store, user_id)
        return out

    def persona_due(self, store: DeriveContext, user_id: str) -> bool:
        return bool(self._api().persona_due(store, user_id))


class _Heartbeat:
    """Renews a lock every ttl/3 while a run is in progress, so a long LLM
    call keeps its session while a dead worker's lock still expires."""

    def __init__(self, db: Database, clock: Clock, key: str, owner: str, ttl_s: float) -> None:
        self._db, self._clock, self._key, self._owner, self._ttl = db, clock, key, owner, ttl_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="memstore-lock", daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(max(0.05, self._ttl / 3)):
            try:
                with self._db.write() as conn:
                    if not queue.renew_lock(
                        conn, self._key, self._owner, now=self._clock(), ttl_s=self._ttl
                    ):
                        log.warning("lock %s was taken over while its run went on", self._key)
                        return
            except MemstoreError as e:
                # Routine under heavy load (busy_timeout): the TTL allows two misses.
                log.debug("could not renew lock %s (will retry): %s", self._key, e)

    def __enter__(self) -> _Heartbeat:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()


class Runner:
    def __init__(self, store: DeriveContext, deriver: Deriver, lock_ttl_s: float) -> None:
        self.store = store
        self.deriver = deriver
        self.lock_ttl_s = lock_ttl_s

    def run(
        self,
        stage: str,
        user_id: str,
        session_id: str,
        owner: str,
        attempt: int,
        *,
        cancelled: Callable[[], bool] = lambda: False,
    ) -> Outcome:
        """Run one stage while ``owner`` holds its lock; never raises for a
        failed derivation (the failure is the outcome, and is in the log).
        A run that fails once ``cancelled()`` is true (the store is closing)
        is not recorded: the close cut it short, not the work."""
        store = self.store
        with store.db.read() as conn:
            before = store.log.last_position(conn)
        key = queue.lock_key(stage, user_id, session_id)
        outcome: Outcome
        with _Heartbeat(store.db, store.clock, key, owner, self.lock_ttl_s):
            try:
                if stage == "l1":
                    outcome = self.deriver.run_l1(store, user_id, session_id)
                elif stage == "l2":
                    outcome = self.deriver.run_l2(store, user_id)
                else:
                    outcome = self.deriver.run_l3(store, user_id)
            except Exception as e:
                # A deriver bug or an unmapped dependency error: the run
                # failed, which is recorded below and retried; never lost.
                # The traceback's last line is the message, which may quote
                # user text: the traceback goes to DEBUG.
                log.log(
                    logging.DEBUG if cancelled() else logging.ERROR,
                    "%s run for %s/%s raised %s",
                    stage,
                    user_id,
                    session_id,
                    loggable(e),
                )
                log.debug("%s run for %s/%s raised", stage, user_id, session_id, exc_info=True)
                outcome = RunOutcome(
                    stage, False, uuid.uuid4().hex, error=redact(f"{type(e).__name__}: {e}")
                )
        if not outcome.ok and not cancelled():
            self._record_failure(outcome, stage, user_id, session_id, attempt, before)
        return outcome

    def _record_failure(
        self, outcome: Outcome, stage: str, user_id: str, session_id: str, attempt: int, after: int
    ) -> None:
        store = self.store
        with store.db.read() as conn:
            recorded = any(
                isinstance(e.payload, RunFailed) and e.payload.run_id == outcome.run_id
                for e in store.log.read(conn, after=after, types=[RunFailed.TYPE], user_id=user_id)
            )
        if recorded:
            return
        # Checked like every derivation append: no failure record (its error
        # text may quote the user) for a user erased while the run went on.
        append_checked(
            store,
            user_id,
            [
                RunFailed(
                    stage=stage,
                    session_id=session_id if stage == "l1" else "",
                    error=redact(outcome.error or "failed without an error message"),
                    attempt=attempt,
                    run_id=outcome.run_id,
                )
            ],
            since=after,
        )


__all__ = ["Deriver", "ModuleDeriver", "Outcome", "Runner"]
