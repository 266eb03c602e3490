"""Real APScheduler: a timer pending at close fires after reopening; one
scheduler per database file across processes, taken over when its holder
dies, and firing jobs other processes wrote into its own service."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from memstore.pipeline import PipelineService
from memstore.pipeline.lease import LEASE_KEY
from memstore.pipeline.queue import lock_holder
from memstore.pipeline.scheduler import idle_job_id
from memstore.pipeline.status import timer_times
from memstore.store import Store
from tests.backends import Targets
from tests.pipeline_support import FakeDeriver, capture, open_store

pytestmark = pytest.mark.both_backends

REPO = Path(__file__).resolve().parents[2]


def wait_for(cond: Callable[[], bool], timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


def extracted(store: Store) -> int:
    return len(store.read_events(types=["l1.extracted"]))


def test_timer_pending_at_close_fires_after_reopen(new_target: Targets) -> None:
    path = new_target("m.db")
    settings = {"l1_idle_s": 1.0, "warmup": (3,)}
    store = open_store(path, **settings)
    # Not started: this process's scheduler stays paused, so the timer cannot
    # fire before the close however slow the machine is (any process may arm
    # timers; only the lease holder runs them).
    svc = PipelineService(store._derivation, deriver=FakeDeriver(), lease_ttl_s=2.0)
    try:
        capture(store, svc, "u", "s")  # 1 round < 3: idle timer armed for +1 s
        assert svc.timers.get(idle_job_id("u", "s")) is not None
    finally:
        svc.stop()
        store.close()
    # Closed with the timer pending; let its due time pass while nothing runs.
    time.sleep(1.5)
    store = open_store(path, **settings)
    try:
        assert extracted(store) == 0
        with store._db.read() as conn:  # the timer itself survived, in the file
            assert idle_job_id("u", "s") in timer_times(conn)
        svc = PipelineService(store._derivation, deriver=FakeDeriver(), lease_ttl_s=2.0)
        svc.start()
        try:
            assert wait_for(lambda: extracted(store) == 1)
            # APScheduler deletes a fired one-shot job's row after handing it to
            # the executor, so the run can finish first (seen in CI): wait for it.
            assert wait_for(lambda: svc.timers.get(idle_job_id("u", "s")) is None)
            assert extracted(store) == 1  # fired once
        finally:
            svc.stop()
    finally:
        store.close()


CHILD = """
import sys, time
from pathlib import Path
sys.path.insert(0, {repo!r})
from memstore.pipeline import PipelineService
from tests.pipeline_support import FakeDeriver, open_store
store = open_store(sys.argv[1])  # a file path or a database URL
svc = PipelineService(store._derivation, deriver=FakeDeriver(), lease_ttl_s=1.0)
svc.start()
print("started", flush=True)
while True:
    time.sleep(0.2)
"""


def probe(marker: str, *, target: object = None) -> None:
    """A timer job: records which process ran it, for which service."""
    Path(marker).write_text(f"{os.getpid()} {type(target).__name__}")


@pytest.mark.slow  # real interpreters racing for the lease
def test_one_scheduler_per_database_across_processes(new_target: Targets, tmp_path: Path) -> None:
    path = new_target("m.db")
    open_store(path).close()  # schema in place before the children race
    script = tmp_path / "child.py"
    script.write_text(CHILD.format(repo=str(REPO)))
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    def spawn() -> subprocess.Popen[str]:
        p = subprocess.Popen(
            [sys.executable, str(script), str(path)], stdout=subprocess.PIPE, text=True, env=env
        )
        assert p.stdout is not None and p.stdout.readline().strip() == "started"
        return p

    store = open_store(path)

    def holder_pid() -> int | None:
        with store._db.read() as conn:
            owner = lock_holder(conn, LEASE_KEY, now=store._clock())
        return int(owner.split(":")[1]) if owner else None

    a = spawn()
    b = None
    try:
        assert wait_for(lambda: holder_pid() == a.pid)
        b = spawn()
        time.sleep(1.5)  # several lease periods: b keeps trying and must not win
        assert holder_pid() == a.pid and b.poll() is None
        a.send_signal(signal.SIGKILL)  # dies without releasing: the lease expires
        a.wait()
        # A timer written now by this (non-holder) process fires in b, into
        # b's own service, once b has taken the lease over.
        marker = tmp_path / "fired"
        mine = PipelineService(store._derivation, deriver=FakeDeriver())
        try:
            mine.timers.set("probe", f"{__name__}:probe", [str(marker)], store._clock())
            assert wait_for(lambda: holder_pid() == b.pid)
            assert wait_for(marker.exists)
            assert marker.read_text() == f"{b.pid} PipelineService"
        finally:
            mine.stop()
    finally:
        for p in (a, b):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
        store.close()
