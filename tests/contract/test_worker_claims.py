"""Several workers claim one queue at once: on PostgreSQL claims
run without the log's lock (``FOR UPDATE SKIP LOCKED`` and a conditional
lock upsert), on SQLite one at a time; on both, no item and no session lock
is ever handed to two workers, and a claim whose owner cannot be checked
(another host) returns to the queue once its TTL ran out."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest

from memstore import Settings
from memstore.bench.fakeopenai import FakeOpenAI
from memstore.derive.events import L1Extracted, ScenesUpdated
from memstore.pipeline import queue
from memstore.store import Store
from memstore.timeutil import UTC, timedelta
from tests.contract import derive_workers
from tests.derive_support import ScriptedLLM, say

T0 = datetime(2030, 1, 7, 9, 0, 0, tzinfo=UTC)
# An owner on another host: ``owners.is_dead`` cannot check it, so only its
# TTL frees what it holds (same-host owners are checked by pid at once).
ELSEWHERE = "elsewhere.example:4242:feedbeef:1"


def test_a_claim_from_another_host_returns_to_the_queue_after_its_ttl(store: Store) -> None:
    db = store._db
    with db.write() as conn:
        first = queue.enqueue(conn, "u", "l1", session_id="s", now=T0)
    with db.queue_write() as conn:
        item = queue.claim(conn, ELSEWHERE, now=T0, ttl_s=60)
    assert item is not None and item.id == first
    # ...and that owner never reports back (its process or machine died).
    with db.queue_write() as conn:
        assert queue.claim(conn, "here:1:a:1", now=T0 + timedelta(seconds=59), ttl_s=60) is None
    with db.queue_write() as conn:
        again = queue.claim(conn, "here:1:a:1", now=T0 + timedelta(seconds=61), ttl_s=60)
    assert again is not None and again.id == first and again.claimed_by == "here:1:a:1"
    with db.read() as conn:
        assert queue.lock_holder(conn, again.lock_key, now=T0 + timedelta(seconds=62)) == (
            "here:1:a:1"
        )


def test_a_claim_in_flight_hides_only_the_item_it_takes(store: Store) -> None:
    """While one claim's transaction is open, another claimer still finds the
    rest of the queue: on PostgreSQL at once (it skips the one locked row), on
    SQLite after the first commits (one writer at a time)."""
    db = store._db
    with db.write() as conn:
        for i in range(3):
            queue.enqueue(conn, "u", "l1", session_id=f"s{i}", now=T0)
    second: list[queue.WorkItem | None] = []

    def other() -> None:
        second.append(queue.claim_in(db, "here:1:b:1", now=lambda: T0, ttl_s=60))

    t = threading.Thread(target=other)
    with db.queue_write() as conn:
        first = queue.claim(conn, "here:1:a:1", now=T0, ttl_s=60)
        t.start()
        if db.dialect == "postgresql":
            t.join(60)  # must not wait for this transaction
            assert not t.is_alive() and second
    t.join(60)
    assert first is not None and second and second[0] is not None
    assert second[0].id != first.id


def test_racing_claimers_never_share_an_item_or_a_session(store: Store) -> None:
    """8 threads claim 60 items (20 sessions' L1, and L2 + L3 of 10 users,
    which share one lock per user) without completing any: every claim is of a
    different item, and no lock key is handed out twice."""
    db = store._db
    with db.write() as conn:
        for i in range(20):
            queue.enqueue(conn, f"u{i % 5}", "l1", session_id=f"s{i}", now=T0)
        for i in range(10):
            queue.enqueue(conn, f"v{i}", "l2", now=T0)
            queue.enqueue(conn, f"v{i}", "l3", now=T0)
    got: list[queue.WorkItem] = []
    got_lock = threading.Lock()
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            barrier.wait(30)
            for k in range(1000):
                # An owner per claim: a lock is re-entrant for its owner, and a
                # real worker completes an item before it claims the next.
                item = queue.claim_in(db, f"here:1:w{n}:{k}", now=lambda: T0, ttl_s=600)
                if item is None:
                    return
                with got_lock:
                    got.append(item)
        except BaseException as e:  # reported below, in the test's thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors
    ids = [i.id for i in got]
    assert len(ids) == len(set(ids))
    keys = [i.lock_key for i in got]
    assert len(keys) == len(set(keys))
    # Every L1 session and one of each user's L2/L3 pair (they share a lock);
    # the other of the pair waits, unclaimed.
    assert len(got) == 20 + 10
    with db.read() as conn:
        left = {(i.user_id, i.stage) for i in queue.pending(conn) if i.claimed_by is None}
    claimed = {(i.user_id, i.stage) for i in got if i.stage != "l1"}
    for i in range(10):
        pair = {(f"v{i}", "l2"), (f"v{i}", "l3")}
        assert len(pair & claimed) == 1 and pair - claimed <= left


@pytest.mark.slow
def test_worker_processes_derive_every_session_once_and_survive_a_killed_one(
    target: str, settings: Settings
) -> None:
    """Three worker processes derive one queue; the first is SIGKILLed while
    it holds a claim (mid-run, its model call pending). Its session goes to
    another worker (a dead owner on this host is seen at once; on another
    host its TTL frees it, tested above). Every captured message is extracted
    exactly once, and no (user, session, generation, cursor) is derived twice."""
    users, sessions = 3, 4
    script = ScriptedLLM()

    def slow(request: dict[str, Any]) -> str:
        time.sleep(0.2)  # long enough that a worker is caught holding a claim
        return script(request)

    with FakeOpenAI(chat=slow) as fake:
        s = settings.replace(llm_base_url=fake.base_url, llm_model="fake-model")
        with Store.open(target, settings=s) as store:
            for u in range(users):
                for n in range(sessions):
                    say(store, f"u{u}", f"s{n}", f"I live in Berlin ({u}/{n})", "ok, thanks")
            expected = _user_message_ids(store)
        ctx = mp.get_context("spawn")
        done = ctx.Queue()
        starts = [ctx.Event() for _ in range(3)]
        procs = []
        for w in range(3):
            ready = ctx.Event()
            p = ctx.Process(
                target=derive_workers.drain_worker,
                args=(target, fake.base_url, ready, starts[w], done),
            )
            p.start()
            assert ready.wait(120)
            procs.append(p)
        victim = procs[0]
        try:
            with Store.open(target, settings=s) as watcher:
                starts[0].set()
                assert _wait(lambda: _claims_of(watcher, victim.pid) > 0)
                for e in starts[1:]:
                    e.set()
                # The others are at work too (a claim of theirs is seen) before the kill.
                assert _wait(
                    lambda: (
                        any(_claims_of(watcher, p.pid) > 0 for p in procs[1:])
                        or not any(p.is_alive() for p in procs[1:])
                    )
                )
                assert _claims_of(watcher, victim.pid) > 0
                os.kill(victim.pid, signal.SIGKILL)
                victim.join(30)
                runs = []
                for p in procs[1:]:
                    p.join(300)
                    assert p.exitcode == 0
                    runs.append(done.get(timeout=10))
                assert sum(runs) > 0
                # The victim's claim was taken over: none of its claims is left.
                assert _claims_of(watcher, victim.pid) == 0
                _assert_each_message_derived_once(watcher, expected)
        finally:
            for p in procs:
                if p.is_alive():
                    p.kill()
                    p.join()


def _user_message_ids(store: Store) -> set[str]:
    with store._db.read() as conn:
        return {
            str(r[0])
            for r in conn.exec_driver_sql("SELECT message_id FROM l0_messages WHERE role = 'user'")
        }


def _claims_of(store: Store, pid: int) -> int:
    with store._db.read() as conn:
        return sum(
            1
            for i in queue.pending(conn)
            if i.claimed_by is not None and i.claimed_by.split(":")[1] == str(pid)
        )


def _wait(cond: Callable[[], bool], timeout_s: float = 120.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.02)
    return cond()


def _assert_each_message_derived_once(store: Store, expected: set[str]) -> None:
    extracted: list[str] = []
    keys: list[tuple[str, str, int, int]] = []
    for e in store.read_events(types=[L1Extracted.TYPE]):
        p = e.payload
        assert isinstance(p, L1Extracted)
        extracted += p.message_ids
        keys.append((e.user_id, p.session_id, p.generation, p.cursor_position))
    assert len(keys) == len(set(keys))  # no cursor derived twice
    assert len(extracted) == len(set(extracted))  # no message derived twice
    assert set(extracted) == expected  # none lost
    scenes = [
        (e.user_id, e.payload.generation, e.payload.memory_cursor)
        for e in store.read_events(types=[ScenesUpdated.TYPE])
        if isinstance(e.payload, ScenesUpdated)
    ]
    assert len(scenes) == len(set(scenes))
