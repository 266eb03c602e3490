"""A killed process does not block its sessions.

A child process claims a session's extraction (the queue item and its lock)
and is SIGKILLed; the parent's ``end_session`` must take the work over at
once instead of waiting out the lock's TTL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from memstore import Settings
from memstore.pipeline import owners, queue
from memstore.pipeline.lease import LEASE_KEY
from memstore.store import Store
from memstore.timeutil import timedelta

REPO = Path(__file__).resolve().parents[2]

CHILD = """
import sys, time
from memstore import Settings
from memstore.pipeline import queue
from memstore.store import Store
store = Store.open(sys.argv[1], settings=Settings().replace(
    embedder="hashing", scheduler=False, background_indexer=False))
svc = store._pipeline
for i in range(3):
    store.capture_turn("alice", "s1", f"I live in Porto and I like jazz {i}")
with store._db.write() as conn:
    queue.enqueue(conn, "alice", "l1", session_id="s1", now=store._clock())
    item = queue.claim(conn, svc._owner(), now=store._clock(), ttl_s=svc.lock_ttl_s)
    assert item is not None
print("claimed", item.lock_key, flush=True)
while True:
    time.sleep(0.2)
"""


def _settings() -> Settings:
    return Settings().replace(embedder="hashing", scheduler=False, background_indexer=False)


def _spawn_and_kill(tmp_path: Path, db: Path) -> str:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen(
        [sys.executable, str(script), str(db)], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline().split()
        assert line[:1] == ["claimed"], line
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    return line[1]


def test_end_session_takes_over_from_a_killed_process(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    Store.open(db, settings=_settings()).close()
    key = _spawn_and_kill(tmp_path, db)
    with Store.open(db, settings=_settings()) as store:
        assert store._pipeline is not None
        assert store._pipeline.lock_ttl_s >= 30  # the TTL alone would block for this long
        with store._db.read() as conn:
            dead = conn.exec_driver_sql(
                "SELECT owner FROM pipeline_locks WHERE key = ?", (key,)
            ).scalar_one()
        assert owners.is_dead(dead)
        started = time.monotonic()
        report = store.end_session("alice", "s1", timeout_s=20)
        took = time.monotonic() - started
        assert report["timed_out"] is False, report
        assert report["pending_before"] > 0
        assert report["pending_after"] == 0
        assert [r["ok"] for r in report["ran"]] == [True]
        assert took < 20
        assert store.list_memories("alice")


def test_live_and_foreign_owners_keep_their_locks(store: Store) -> None:
    now = store._clock()
    me = owners.new_instance("live0001")
    try:
        foreign = "some-other-host:4242:abcd1234:1"
        with store._db.write() as conn:
            assert queue.acquire_lock(conn, "k-foreign", foreign, now=now, ttl_s=60)
            assert queue.acquire_lock(conn, "k-mine", f"{me}:1", now=now, ttl_s=60)
            # Neither can be taken before its TTL: one is alive, the other unknowable.
            assert not queue.acquire_lock(conn, "k-foreign", "x:1:y:1", now=now, ttl_s=60)
            assert not queue.acquire_lock(conn, "k-mine", "x:1:y:1", now=now, ttl_s=60)
            later = now + timedelta(seconds=61)
            assert queue.acquire_lock(conn, "k-foreign", "x:1:y:1", now=later, ttl_s=60)
    finally:
        owners.retire(me)
    # A service of this process that closed is dead at once.
    with store._db.write() as conn:
        assert queue.acquire_lock(conn, "k-mine", "x:1:y:1", now=now, ttl_s=60)
    assert not owners.is_dead(f"{owners.HOST}:1:whatever")  # pid 1 (init) lives


def test_the_scheduler_lease_of_a_killed_process_is_free(store: Store) -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(30)
    owner = f"{owners.HOST}:{child.pid}:deadbeef"
    with store._db.write() as conn:
        assert queue.acquire_lock(conn, LEASE_KEY, owner, now=store._clock(), ttl_s=600)
        assert queue.lock_holder(conn, LEASE_KEY, now=store._clock()) is None
        assert queue.acquire_lock(conn, LEASE_KEY, "next:1:x", now=store._clock(), ttl_s=15)
