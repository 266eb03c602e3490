"""Background threads of the pipeline: timer writes that fail are reported,
and the reconciler does not run on (and cannot stall) the lease thread."""

from __future__ import annotations

import logging
import threading

import pytest

from memstore.db.connect import open_database
from memstore.db.engine import Database
from memstore.pipeline import PipelineService
from memstore.pipeline.scheduler import idle_job_id
from memstore.store import Store
from tests.backends import Targets
from tests.pipeline_support import FakeDeriver, capture, open_store

pytestmark = pytest.mark.both_backends


def _locked_store(new_target: Targets) -> tuple[Store, PipelineService]:
    store = open_store(new_target("m.db"), busy_timeout_ms=50, warmup=(5,))
    svc = PipelineService(store._derivation, deriver=FakeDeriver())
    svc.timers.jobs()  # the (paused) scheduler and its job table exist
    return store, svc


def _other_process(new_target: Targets) -> Database:
    """A second handle on the store: its writes do not share the store's
    in-process write lock, exactly like another process's."""
    return open_database(new_target("m.db"), busy_timeout_ms=50)


def _close(store: Store, svc: PipelineService) -> None:
    svc.stop()
    store.close()


# SQLite only: another process's write transaction locks the whole file; on
# PostgreSQL it blocks only the writers that take the store's write lock, and
# the scheduler's job rows are written around it.
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_failed_timer_write_is_logged_and_reconcile_rearms(
    new_target: Targets, caplog: pytest.LogCaptureFixture
) -> None:
    store, svc = _locked_store(new_target)
    try:
        stored = capture(store, svc, "u", "s", after_commit=False)  # below threshold: a timer
        # Routine under heavy capture: recorded at DEBUG, never on stderr.
        caplog.set_level(logging.DEBUG, logger="memstore.pipeline")
        other = _other_process(new_target)
        try:
            with other.write():  # another process holds the database meanwhile
                svc.after_commit(stored)
                svc.flush()
        finally:
            other.close()
        recs = [r for r in caplog.records if r.name.startswith("memstore.pipeline")]
        msgs = [r.getMessage() for r in recs]
        assert any("could not arm" in m and "locked" in m for m in msgs), msgs
        assert all(r.levelno <= logging.DEBUG for r in recs), msgs
        assert idle_job_id("u", "s") not in {j for j, _ in svc.timers.jobs()}
        assert svc.reconcile()["timers_armed"] == 1
        assert idle_job_id("u", "s") in {j for j, _ in svc.timers.jobs()}
    finally:
        _close(store, svc)


# SQLite only: another process's write transaction locks the whole file; on
# PostgreSQL it blocks only the writers that take the store's write lock, and
# the scheduler's job rows are written around it.
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_any_failure_on_the_timer_thread_is_logged(
    new_target: Targets, caplog: pytest.LogCaptureFixture
) -> None:
    store, svc = _locked_store(new_target)
    try:
        # Routine under heavy capture: recorded at DEBUG, never on stderr.
        caplog.set_level(logging.DEBUG, logger="memstore.pipeline")
        gate = threading.Event()
        svc._timer_thread.submit(gate.wait, 30)  # hold the timer thread back
        svc.run_pipeline(wait=False)  # queues the drain wake-up on the timer thread
        other = _other_process(new_target)
        try:
            with other.write():  # another process holds the database when it runs
                gate.set()
                svc.flush()
        finally:
            other.close()
        msgs = [r.getMessage() for r in caplog.records if r.name.startswith("memstore.pipeline")]
        assert any("timer thread" in m and "locked" in m for m in msgs), msgs
    finally:
        _close(store, svc)


class _SlowReconcile(PipelineService):
    def __init__(self, store: Store) -> None:
        super().__init__(store._derivation, deriver=FakeDeriver(), reconcile_every_s=0.0)
        self.threads: list[str] = []
        self.started = threading.Event()
        self.release = threading.Event()
        self.running = 0
        self.max_running = 0
        self._count = threading.Lock()

    def reconcile(self) -> dict[str, int]:
        with self._count:
            self.running += 1
            self.max_running = max(self.max_running, self.running)
        self.threads.append(threading.current_thread().name)
        self.started.set()
        self.release.wait(timeout=30)
        with self._count:
            self.running -= 1
        return {}


def test_reconcile_runs_off_the_lease_thread(new_target: Targets) -> None:
    store = open_store(new_target("m.db"))
    svc = _SlowReconcile(store)
    try:
        svc.start()
        assert svc.started.wait(timeout=30)
        assert svc.threads and svc.threads[0] != "memstore-lease"
        assert svc._lease is not None
        for _ in range(3):  # lease renewals go on while the reconcile is stuck
            svc._lease.tick()
            svc._on_lease_tick()
        assert svc._lease.held
        assert svc.max_running == 1  # ticks do not pile reconciles up
    finally:
        svc.release.set()
        svc.stop()
        store.close()
