"""The upstream LocalStateBackend's behaviours, in durable form."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import select, text

from memstore.db.schema import pipeline_pending, pipeline_sessions
from memstore.pipeline import PipelineService, queue, scheduler, threshold_for
from memstore.pipeline.scheduler import idle_job_id, l2_job_id
from memstore.pipeline.state import get_session
from memstore.store import Store
from memstore.timeutil import timedelta
from tests.backends import Targets
from tests.pipeline_support import FakeClock, FakeDeriver, capture, open_store

pytestmark = pytest.mark.both_backends


def queued(store: Store) -> list[tuple[str, str, str]]:
    with store._db.read() as conn:
        return [(i.stage, i.user_id, i.session_id) for i in queue.pending(conn)]


def test_threshold_sequence_is_warmup_then_every_n(settings: object) -> None:
    from memstore.config import Settings

    s = Settings().replace(extract_every=5, warmup=(1, 2, 4))
    assert [threshold_for(n, s) for n in range(6)] == [1, 2, 4, 5, 5, 5]


def test_capture_atomic_through_the_warmup(
    env: tuple[Store, PipelineService, FakeDeriver], clock: FakeClock
) -> None:
    store, svc, der = env
    idle = idle_job_id("u", "s")
    armed = None
    for threshold in (1, 2, 4, 5, 5):
        for r in range(1, threshold):
            capture(store, svc, "u", "s")
            # below threshold: nothing enqueued; the first such capture arms
            # the idle timer at its deadline, later ones leave it (it re-arms
            # to the moved deadline when it fires: no job-store write each)
            assert queued(store) == []
            armed = armed or clock() + timedelta(seconds=600)
            assert svc.timers.get(idle) == armed
            with store._db.read() as conn:
                st = get_session(conn, "u", "s")
            assert st is not None and st.rounds_pending == r
            clock.advance(1)
        capture(store, svc, "u", "s")
        # at threshold: work enqueued in the capture's transaction
        assert queued(store) == [("l1", "u", "s")]
        assert [o.ok for o in svc.drain(stages=("l1",))] == [True]
        with store._db.read() as conn:
            st = get_session(conn, "u", "s")
        assert st is not None and st.rounds_pending == 0 and st.messages_pending == 0
    assert [c[0] for c in der.calls] == ["l1"] * 5
    # The idle timer left armed finds nothing pending when it fires.
    clock.advance(600)
    assert idle in svc.timers.run_due(clock())
    assert der.calls.count(("l1", "u", "s")) == 5
    assert svc.timers.get(idle) is None


def test_assistant_only_capture_counts_no_round(
    env: tuple[Store, PipelineService, FakeDeriver],
) -> None:
    store, svc, _ = env
    svc.drain()
    capture(store, svc, "u", "s", rounds=0)
    assert queued(store) == []
    # Nothing pending either (the capture held no message): no idle timer.
    assert svc.timers.get(idle_job_id("u", "s")) is None


def test_set_timer_if_earlier(
    env: tuple[Store, PipelineService, FakeDeriver], clock: FakeClock
) -> None:
    _, svc, _ = env
    t = svc.timers
    f, args = scheduler.DRAIN_TIMER, []
    assert t.set_if_earlier("j", f, args, clock() + timedelta(seconds=100))
    assert not t.set_if_earlier("j", f, args, clock() + timedelta(seconds=200))
    assert not t.set_if_earlier("j", f, args, clock() + timedelta(seconds=100))
    assert t.get("j") == clock() + timedelta(seconds=100)
    assert t.set_if_earlier("j", f, args, clock() + timedelta(seconds=50))
    assert t.get("j") == clock() + timedelta(seconds=50)
    t.remove("j")
    t.remove("j")  # already gone: still removed
    assert t.get("j") is None


def test_timer_expiry_is_reported_once(
    env: tuple[Store, PipelineService, FakeDeriver], clock: FakeClock
) -> None:
    store, svc, der = env
    capture(store, svc, "u", "s")
    svc.drain()
    assert svc.timers.run_due(clock() + timedelta(seconds=10)) == ["drain", "l2:u"]
    capture(store, svc, "u", "s")  # threshold 2: idle timer armed
    idle = idle_job_id("u", "s")
    assert svc.timers.run_due(clock() + timedelta(seconds=599)) == []
    clock.advance(600)
    assert svc.timers.run_due(clock()) == [idle]
    assert svc.timers.run_due(clock()) == []
    assert svc.timers.get(idle) is None
    assert der.calls.count(("l1", "u", "s")) == 2


def test_a_later_capture_moves_the_idle_deadline(
    env: tuple[Store, PipelineService, FakeDeriver], clock: FakeClock
) -> None:
    store, svc, der = env
    capture(store, svc, "u", "s")
    svc.drain()
    capture(store, svc, "u", "s")
    clock.advance(300)
    capture(store, svc, "u", "s", rounds=0)  # activity without a round
    idle = idle_job_id("u", "s")
    # the timer armed by the first capture stays (no write for this one) ...
    assert svc.timers.get(idle) == clock() + timedelta(seconds=300)
    # ... and when it fires it re-arms to the moved deadline instead of running
    clock.advance(300)
    assert idle in svc.timers.run_due(clock())
    assert der.calls.count(("l1", "u", "s")) == 1
    assert svc.timers.get(idle) == clock() + timedelta(seconds=300)
    clock.advance(300)
    assert idle in svc.timers.run_due(clock())
    assert der.calls.count(("l1", "u", "s")) == 2


def test_priority_order_and_fifo(
    env: tuple[Store, PipelineService, FakeDeriver], clock: FakeClock
) -> None:
    store, _, _ = env
    with store._db.write() as conn:
        queue.enqueue(conn, "a", "l3", now=clock())
        clock.advance(1)
        queue.enqueue(conn, "b", "l2", now=clock())
        clock.advance(1)
        queue.enqueue(conn, "c", "l1", session_id="s1", now=clock())
        clock.advance(1)
        queue.enqueue(conn, "a", "l2", now=clock())
        clock.advance(1)
        queue.enqueue(conn, "a", "l1", session_id="s2", now=clock())
        queue.enqueue(conn, "c", "l1", session_id="s1", now=clock())  # deduplicated
    order = []
    while True:
        with store._db.write() as conn:
            item = queue.claim(conn, "w", now=clock(), ttl_s=60)
            if item is None:
                break
            order.append((item.stage, item.user_id))
            queue.complete(conn, item, "w")
    assert order == [("l1", "c"), ("l1", "a"), ("l2", "b"), ("l2", "a"), ("l3", "a")]


def test_locks_with_ttl(env: tuple[Store, PipelineService, FakeDeriver], clock: FakeClock) -> None:
    store, _, _ = env
    with store._db.write() as conn:
        assert queue.acquire_lock(conn, "k", "w1", now=clock(), ttl_s=30)
        assert not queue.acquire_lock(conn, "k", "w2", now=clock(), ttl_s=30)
        assert queue.acquire_lock(conn, "k", "w1", now=clock(), ttl_s=30)  # re-entrant
        assert not queue.renew_lock(conn, "k", "w2", now=clock(), ttl_s=30)
        queue.release_lock(conn, "k", "w2")  # not the owner: no effect
        assert queue.lock_holder(conn, "k", now=clock()) == "w1"
    clock.advance(31)
    with store._db.write() as conn:
        assert queue.lock_holder(conn, "k", now=clock()) is None
        assert queue.acquire_lock(conn, "k", "w2", now=clock(), ttl_s=30)  # expired: taken over
        assert not queue.renew_lock(conn, "k", "w1", now=clock(), ttl_s=30)
        queue.release_lock(conn, "k", "w2")
        assert queue.lock_holder(conn, "k", now=clock()) is None


def test_claim_skips_a_session_whose_lock_is_held(
    env: tuple[Store, PipelineService, FakeDeriver], clock: FakeClock
) -> None:
    store, _, _ = env
    with store._db.write() as conn:
        queue.enqueue(conn, "u", "l1", session_id="s", now=clock())
        queue.enqueue(conn, "u", "l1", session_id="t", now=clock())
        assert queue.acquire_lock(
            conn, queue.lock_key("l1", "u", "s"), "other", now=clock(), ttl_s=60
        )
        item = queue.claim(conn, "w", now=clock(), ttl_s=60)
        assert item is not None and item.session_id == "t"
        assert queue.claim(conn, "w2", now=clock(), ttl_s=60) is None
    clock.advance(61)  # the other worker died: its lock and our claim expire
    with store._db.write() as conn:
        got = {queue.claim(conn, "w3", now=clock(), ttl_s=60).session_id for _ in range(2)}  # type: ignore[union-attr]
    assert got == {"s", "t"}


def test_two_workers_never_extract_one_session_at_once(new_target: Targets) -> None:
    store = open_store(new_target("m.db"))
    der = FakeDeriver(l1_delay_s=0.02)
    svc = PipelineService(store._derivation, deriver=der)
    try:
        for i in range(6):
            capture(store, svc, "u", f"s{i % 3}")

        def work() -> None:
            for _ in range(5):
                with store._db.write() as conn:
                    for st in ("s0", "s1", "s2"):
                        queue.enqueue(conn, "u", "l1", session_id=st, now=store._clock())
                svc.drain()

        threads = [threading.Thread(target=work) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert der.overlaps == 0
        assert {c[2] for c in der.calls} == {"s0", "s1", "s2"}
    finally:
        svc.stop()
        store.close()


def test_purge_removes_one_user_only(
    env: tuple[Store, PipelineService, FakeDeriver], clock: FakeClock
) -> None:
    store, svc, _ = env
    users = ["a", "a:b", "a%"]  # ids that would collide in an unquoted key prefix
    for u in users:
        capture(store, svc, u, "s")
        svc.drain(user_id=u)
        capture(store, svc, u, "s")  # timer armed
        svc.timers.set(l2_job_id(u), scheduler.L2_TIMER, [u], clock() + timedelta(seconds=5))
        with store._db.write() as conn:
            queue.enqueue(conn, u, "l2", now=clock())
            queue.acquire_lock(conn, queue.lock_key("l1", u, "s"), "w", now=clock(), ttl_s=60)
    with store._db.write() as conn:
        got = svc.purge_user(conn, "a")
    assert got == {"queued": 1, "timers": 2}
    with store._db.read() as conn:
        for t in (pipeline_sessions, pipeline_pending):
            assert {r[0] for r in conn.execute(select(t.c.user_id))} == {"a:b", "a%"}
        assert {i.user_id for i in queue.pending(conn)} == {"a:b", "a%"}
        locks = {r[0] for r in conn.execute(text("select key from pipeline_locks"))}
    assert locks == {queue.lock_key("l1", u, "s") for u in ("a:b", "a%")}
    jobs = {j for j, _ in svc.timers.jobs() if j != "drain"}
    assert jobs == {idle_job_id(u, "s") for u in ("a:b", "a%")} | {
        l2_job_id(u) for u in ("a:b", "a%")
    }


def test_failed_runs_keep_the_cursor_and_back_off(new_target: Targets, clock: FakeClock) -> None:
    store = open_store(new_target("m.db"), clock, retry_delay_s=30, max_retries=3)
    der = FakeDeriver(fail_l1=10)
    svc = PipelineService(store._derivation, deriver=der)
    try:
        capture(store, svc, "u", "s")
        outs = svc.drain()
        assert [o.ok for o in outs] == [False]
        with store._db.read() as conn:
            st = get_session(conn, "u", "s")
            item = queue.pending(conn)[0]
        assert st is not None and st.cursor_position == 0 and st.messages_pending == 2
        assert st.failures == 1 and st.last_error == "scripted failure"
        assert item.attempts == 1
        assert svc.drain() == []  # not yet: waits retry_delay_s
        assert svc.timers.run_due(clock()) == ["drain"]  # the capture's own wake-up
        assert svc.timers.get("drain") == clock() + timedelta(seconds=30)
        clock.advance(30)
        assert svc.timers.run_due(clock()) == ["drain"]
        clock.advance(30)
        svc.timers.run_due(clock())
        assert der.calls.count(("l1", "u", "s")) == 3
        # max_retries reached: still queued, waiting twice as long
        assert queued(store) == [("l1", "u", "s")]
        clock.advance(59)
        svc.timers.run_due(clock())
        assert der.calls.count(("l1", "u", "s")) == 3
        clock.advance(1)
        svc.timers.run_due(clock())
        assert der.calls.count(("l1", "u", "s")) == 4
        failures = store.read_events(types=["pipeline.run_failed"])
        assert [e.payload.attempt for e in failures] == [1, 2, 3, 4]  # type: ignore[attr-defined]
        der.fail_l1 = 0
        capture(store, svc, "u", "s")  # a capture at the threshold runs it sooner
        assert queued(store) == [("l1", "u", "s")]
        assert [o.ok for o in svc.drain(stages=("l1",))] == [True]
        with store._db.read() as conn:
            st = get_session(conn, "u", "s")
        assert st is not None and st.messages_pending == 0 and st.failures == 0
    finally:
        svc.stop()
        store.close()


def test_projection_rebuild_matches_incremental(
    env: tuple[Store, PipelineService, FakeDeriver], clock: FakeClock
) -> None:
    store, svc, der = env
    der.fail_l1 = 1
    for i in range(7):
        capture(store, svc, "u", f"s{i % 2}", rounds=i % 3)
        clock.advance(5)
        svc.drain()
        clock.advance(40)
    svc.end_session("u", "s0", timeout_s=10)

    def dump() -> list[list[tuple[object, ...]]]:
        with store._db.read() as conn:
            return [
                [tuple(r) for r in conn.execute(select(t).order_by(*t.primary_key.columns))]
                for t in (pipeline_sessions, pipeline_pending)
            ]

    before = dump()
    store.rebuild(["pipeline_state"])
    assert dump() == before
