"""Closing is quiet, bounded and honest: the README's
first snippet prints nothing on stderr; close() during a run records no
failure; the timer thread survives a job removed under it and a fired
job it cannot delete."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from memstore import Settings
from memstore.db.connect import open_database
from memstore.derive.events import RunFailed
from memstore.derive.runs import RunOutcome
from memstore.pipeline import PipelineService, queue, scheduler
from memstore.pipeline.scheduler import DRAIN_JOB_ID
from memstore.store import Store
from memstore.timeutil import timedelta
from tests.pipeline_support import FakeDeriver, capture, open_store

pytestmark = pytest.mark.both_backends

ROOT = Path(__file__).resolve().parents[2]


def readme_first_snippet() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Use it from Python", 1)[1]
    m = re.search(r"```python\n(.*?)```", section, re.S)
    assert m is not None
    return m.group(1)


# SQLite only: the README's snippet opens a file of its own.
@pytest.mark.slow
def test_the_readme_snippet_prints_nothing_on_stderr(tmp_path: Path) -> None:
    code = readme_first_snippet()
    assert "Store.open" in code and "capture_turn" in code
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT)
    for run in range(5):
        cwd = tmp_path / f"run{run}"
        cwd.mkdir()
        res = subprocess.run(
            [sys.executable, "-c", code],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert res.returncode == 0, res.stderr
        assert res.stderr == "", f"run {run}: {res.stderr}"
        assert "Lisbon" in res.stdout


class _SlowDeriver(FakeDeriver):
    """Starts an L1 run, then keeps going past close()'s bound and finally
    touches the store, which is closed by then."""

    def __init__(self, hold_s: float) -> None:
        super().__init__()
        self.started = threading.Event()
        self.finished = threading.Event()
        self.hold_s = hold_s

    def run_l1(self, store: Any, user_id: str, session_id: str, **kw: Any) -> Any:
        self.started.set()
        try:
            time.sleep(self.hold_s)
            store.kernel.head()  # "store is closed" once close() went on
            return RunOutcome("l1", True, uuid.uuid4().hex)
        finally:
            self.finished.set()


def test_close_during_a_run_records_no_failure(
    target: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="memstore")
    path = target
    store = open_store(path, warmup=(5,), pipeline_close_timeout_s=0.3)
    deriver = _SlowDeriver(hold_s=1.5)
    svc = PipelineService(store._derivation, deriver=deriver)
    store._pipeline = svc
    capture(store, svc, "u", "s", rounds=2)
    with store._db.write() as conn:
        queue.enqueue(conn, "u", "l1", session_id="s", now=store._clock())
    worker = threading.Thread(target=lambda: svc.drain(), daemon=True)
    worker.start()
    assert deriver.started.wait(10)
    began = time.monotonic()
    store.close()
    assert time.monotonic() - began < 5  # bounded by close_timeout_s, not by the run
    assert deriver.finished.wait(10)
    worker.join(10)
    with open_store(path) as again:
        failed = again.read_events(types=[RunFailed.TYPE])
        with again._db.read() as conn:
            items = queue.pending(conn, "u")
    assert failed == []  # the close cut it short: no failure on record
    assert [(i.stage, i.attempts, i.claimed_by) for i in items] == [("l1", 0, None)]
    loud = [
        r
        for r in caplog.records
        if r.levelno > logging.DEBUG and r.name.startswith(("memstore", "apscheduler"))
    ]
    assert loud == [], [r.getMessage() for r in loud]


def _scheduler_store(path: str | Path, lease_ttl_s: float = 0.6, **settings: Any) -> Store:
    s = Settings().replace(
        embedder="hashing",
        scheduler=True,
        background_indexer=False,
        pipeline_lease_ttl_s=lease_ttl_s,
        **settings,
    )
    return Store.open(path, settings=s)


def _wait(cond: Any, timeout: float = 30.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.05)
    return False


def test_a_fired_job_whose_delete_fails_does_not_stop_the_timers(
    target: str, caplog: pytest.LogCaptureFixture
) -> None:
    """APScheduler deletes a fired job's row from its loop; "database is
    locked" there (PostgreSQL: the lock timeout) would end the loop's thread,
    and no timer fire again."""
    caplog.set_level(logging.DEBUG, logger="memstore.pipeline")
    # A long lease: its renewal must not fall into the locked second below.
    with _scheduler_store(target, lease_ttl_s=60, busy_timeout_ms=100) as store:
        svc = store._pipeline
        assert svc is not None
        assert _wait(lambda: svc.timers.running)
        svc.arm_drain(store._clock() + timedelta(seconds=0.5))
        other = open_database(target, busy_timeout_ms=100)  # like another process
        try:
            # Holds the timer's row (SQLite: the whole file) while the timer fires.
            with other.write() as conn:
                conn.execute(
                    text(f"UPDATE {scheduler.JOB_TABLE} SET id = id WHERE id = :id"),
                    {"id": DRAIN_JOB_ID},
                )
                time.sleep(1.5)  # it fires; its delete (and the drain) time out
        finally:
            other.close()
        msgs = [r.getMessage() for r in caplog.records]
        assert any("could not delete timer drain" in m for m in msgs), msgs
        assert _wait(lambda: svc.timers.get(DRAIN_JOB_ID) is None)  # fired again, deleted
        svc.arm_drain(store._clock())
        assert _wait(lambda: svc.timers.get(DRAIN_JOB_ID) is None)  # the loop still runs


def test_a_job_removed_under_the_scheduler_does_not_kill_it(
    target: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with _scheduler_store(target) as store:
        svc = store._pipeline
        assert svc is not None
        assert _wait(lambda: svc.timers.running)
        jobstore = svc.timers.store
        assert jobstore is not None
        real = jobstore.get_due_jobs
        raced = threading.Event()

        def racing(now: Any) -> Any:
            jobs = real(now)
            if jobs and not raced.is_set():
                raced.set()
                # Another process (or thread) removes the due job right now.
                with store._db.write() as conn:
                    scheduler_rows = conn.execute(
                        text(f"DELETE FROM {scheduler.JOB_TABLE} WHERE id = :id"),
                        {"id": DRAIN_JOB_ID},
                    )
                    assert scheduler_rows.rowcount == 1
            return jobs

        jobstore.get_due_jobs = racing  # type: ignore[method-assign]
        svc.arm_drain(store._clock())
        assert _wait(raced.is_set)
        time.sleep(0.3)
        jobstore.get_due_jobs = real  # type: ignore[method-assign]
        svc.arm_drain(store._clock())
        assert _wait(lambda: svc.timers.get(DRAIN_JOB_ID) is None)  # the loop still runs
    loud = [
        r
        for r in caplog.records
        if r.levelno > logging.DEBUG and r.name.startswith(("memstore", "apscheduler"))
    ]
    assert loud == [], [r.getMessage() for r in loud]


# The job below is stored by textual reference, like the pipeline's own timer
# jobs, and gets its service from the scheduler's executor; the test hands it
# the events it waits on.
_JOB: dict[str, Any] = {}


def _job_reading_timers_during_close(*, target: Any = None) -> None:
    assert isinstance(target, PipelineService)
    _JOB["running"].set()
    _JOB["closing"].wait(10)
    time.sleep(0.3)  # close() is inside APScheduler's shutdown by now
    # What Timers.get does once past its closed check (the race window): ask
    # APScheduler, which needs its job-store lock.
    _JOB["sched"].get_job("anything")
    _JOB["done"].set()


def test_close_while_a_job_reads_timers_does_not_deadlock(target: str) -> None:
    """APScheduler's shutdown(wait=True) waits for running jobs while holding
    its job-store lock; a job calling get_job() then waited forever (a test
    run hung for 38 minutes on this)."""
    store = _scheduler_store(target)
    svc = store._pipeline
    assert svc is not None
    svc.close_timeout_s = 60.0  # a bounded wait alone would not pass this test
    assert _wait(lambda: svc.timers.running)
    assert svc.timers.executor is not None
    svc.timers.executor.close_timeout_s = 60.0
    _JOB.update(
        running=threading.Event(),
        closing=threading.Event(),
        done=threading.Event(),
        sched=svc.timers.scheduler(),
    )
    svc.timers.set(
        "read-timers",
        f"{__name__}:_job_reading_timers_during_close",
        [],
        store._clock(),
    )
    assert _JOB["running"].wait(15)
    closer = threading.Thread(target=store.close, daemon=True)
    _JOB["closing"].set()
    closer.start()
    closer.join(20)
    assert not closer.is_alive(), "close() deadlocked with a running timer job"
    assert _JOB["done"].is_set()


HEAVY = """
import sys, threading
from memstore import Settings, Store
settings = Settings().replace(embedder="hashing", pipeline_lease_ttl_s=1.0)
with Store.open(sys.argv[1], settings=settings) as store:
    def work(k):
        for i in range(40):
            store.capture_turn(f"user{k}", f"s{i % 3}", f"I like sailing and tea, turn {i}", "ok")
            if i % 10 == 0:
                store.search_conversations(f"user{k}", "sailing")
    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    store.end_session("user0", "s0")
print("done")
"""


@pytest.mark.slow
def test_heavy_capture_with_timers_and_indexer_is_quiet(target: str) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT)
    res = subprocess.run(
        [sys.executable, "-c", HEAVY, target],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "done"
    assert res.stderr == ""
