"""One scheduler per database on both backends (the lease lives in
the database): while its holder lives only it fires timers; when it is
SIGKILLed another process takes the lease over and fires the timers that
came due, each exactly once, into its own service. (A timer its holder was
firing at the moment of death may fire again: see below.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from memstore import Settings
from memstore.pipeline import PipelineService
from memstore.pipeline.lease import LEASE_KEY
from memstore.pipeline.queue import lock_holder
from memstore.store import Store
from memstore.timeutil import timedelta
from tests.pipeline_support import FakeDeriver

REPO = Path(__file__).resolve().parents[2]

CHILD = """
import sys, time
sys.path.insert(0, {repo!r})
from memstore import Settings
from memstore.pipeline import PipelineService
from memstore.store import Store
from tests.pipeline_support import FakeDeriver
settings = Settings().replace(embedder="hashing", scheduler=False, background_indexer=False)
store = Store.open(sys.argv[1], settings=settings)
svc = PipelineService(store._derivation, deriver=FakeDeriver(), lease_ttl_s=1.0)
svc.start()
print("started", flush=True)
while True:
    time.sleep(0.2)
"""


def probe(marker: str, *, target: object = None) -> None:
    """A timer job: appends which process ran it, for which service."""
    with open(marker, "a", encoding="utf-8") as fh:
        fh.write(f"{os.getpid()} {type(target).__name__}\n")


def _wait(cond: Callable[[], bool], timeout_s: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


@pytest.mark.slow
def test_a_killed_schedulers_lease_is_taken_over_and_due_timers_fire_once(
    target: str, settings: Settings, tmp_path: Path
) -> None:
    Store.open(target, settings=settings).close()  # schema in place before the children race
    script = tmp_path / "child.py"
    script.write_text(CHILD.format(repo=str(REPO)))
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    def spawn() -> subprocess.Popen[str]:
        p = subprocess.Popen(
            [sys.executable, str(script), target], stdout=subprocess.PIPE, text=True, env=env
        )
        assert p.stdout is not None and p.stdout.readline().strip() == "started"
        return p

    store = Store.open(target, settings=settings)

    def holder_pid() -> int | None:
        with store._db.read() as conn:
            owner = lock_holder(conn, LEASE_KEY, now=store._clock())
        return int(owner.split(":")[1]) if owner else None

    def fired(marker: Path) -> list[str]:
        return marker.read_text().splitlines() if marker.exists() else []

    a = spawn()
    b = None
    # This process arms timers but never holds the lease (not started).
    mine = PipelineService(store._derivation, deriver=FakeDeriver())
    try:
        assert _wait(lambda: holder_pid() == a.pid)
        b = spawn()
        before, after = tmp_path / "before", tmp_path / "after"
        mine.timers.set("probe-before", f"{__name__}:probe", [str(before)], store._clock())
        assert _wait(lambda: len(fired(before)) == 1)
        # APScheduler deletes a fired one-shot job's row just after handing it
        # to the executor: a holder killed in between leaves the row, and its
        # successor fires it again (at least once; every memstore timer
        # callback re-reads the state, so that is harmless). The kill below
        # comes after the delete, so "once" is what this test can demand.
        assert _wait(lambda: mine.timers.get("probe-before") is None)
        assert holder_pid() == a.pid and b.poll() is None  # b tried, and did not win
        # Due in 2 s: after a's death, so only a successor can fire it.
        due = store._clock() + timedelta(seconds=2)
        mine.timers.set("probe-after", f"{__name__}:probe", [str(after)], due)
        a.send_signal(signal.SIGKILL)  # dies holding the lease, releasing nothing
        a.wait()
        assert _wait(lambda: holder_pid() == b.pid)
        assert _wait(lambda: len(fired(after)) == 1)
        time.sleep(2.5)  # several lease periods: nothing fires a second time
        assert fired(before) == [f"{a.pid} PipelineService"]
        assert fired(after) == [f"{b.pid} PipelineService"]
        assert _wait(lambda: mine.timers.get("probe-after") is None)  # removed once fired
    finally:
        mine.stop()
        for p in (a, b):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
        store.close()
