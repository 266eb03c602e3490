"""The capture hook wakes the timer thread only when a timer may be missing
(one timer pass per capture, two read transactions and a job
lookup on another thread, competing with the next capture)."""

from __future__ import annotations

from typing import Any

import pytest

from memstore.pipeline import PipelineService, queue
from memstore.pipeline.scheduler import DRAIN_JOB_ID, idle_job_id
from memstore.timeutil import timedelta
from tests.backends import Targets
from tests.pipeline_support import FakeClock, FakeDeriver, capture, open_store

pytestmark = pytest.mark.both_backends


def _counting(svc: PipelineService) -> list[int]:
    passes: list[int] = []
    inner = svc._arm_captured

    def counted() -> None:
        passes.append(1)
        inner()

    svc._arm_captured = counted  # type: ignore[method-assign]
    return passes


def _env(new_target: Targets, clock: FakeClock, **settings: Any) -> tuple[Any, PipelineService]:
    store = open_store(new_target("m.db"), clock, **settings)
    return store, PipelineService(store._derivation, deriver=FakeDeriver())


def test_captures_under_an_armed_idle_timer_need_no_timer_pass(
    new_target: Targets, clock: FakeClock
) -> None:
    store, svc = _env(new_target, clock, warmup=(100,))
    try:
        passes = _counting(svc)
        for _ in range(30):
            capture(store, svc, "u", "s")
            clock.advance(1)
        assert len(passes) == 1
        # The one timer armed re-arms to the moved deadline when it fires.
        assert svc.timers.get(idle_job_id("u", "s")) == clock() - timedelta(seconds=30 - 600)
        clock.advance(600 - 29)
        assert svc.timers.run_due(clock()) == [idle_job_id("u", "s")]
        assert svc.timers.get(idle_job_id("u", "s")) == clock() + timedelta(seconds=28)
        capture(store, svc, "u", "other")
        assert len(passes) == 2  # another session: its own timer
    finally:
        svc.stop()
        store.close()


def test_after_the_timer_fired_or_was_removed_a_capture_arms_again(
    new_target: Targets, clock: FakeClock
) -> None:
    store, svc = _env(new_target, clock, warmup=(100,))
    try:
        passes = _counting(svc)
        capture(store, svc, "u", "s")
        clock.advance(601)
        svc.timers.run_due(clock())  # fired: the session's messages were queued and run
        assert svc.timers.get(idle_job_id("u", "s")) is None
        capture(store, svc, "u", "s")
        assert len(passes) == 2
        assert svc.timers.get(idle_job_id("u", "s")) == clock() + timedelta(seconds=600)
        svc.end_session("u", "s", timeout_s=5)
        assert svc.timers.get(idle_job_id("u", "s")) is None
        capture(store, svc, "u", "s")
        assert len(passes) == 3
        assert svc.timers.get(idle_job_id("u", "s")) == clock() + timedelta(seconds=600)
    finally:
        svc.stop()
        store.close()


def test_a_capture_that_queues_new_work_arms_the_drain(
    new_target: Targets, clock: FakeClock
) -> None:
    store, svc = _env(new_target, clock, warmup=(1,))
    try:
        passes = _counting(svc)
        capture(store, svc, "u", "s")  # threshold 1: L1 work queued
        assert svc.timers.get(DRAIN_JOB_ID) is not None
        capture(store, svc, "u", "s")  # the same unclaimed item: nothing new to arm
        assert len(passes) == 1
        svc.drain()  # claims it; the next threshold capture queues a new item
        capture(store, svc, "u", "s")
        assert len(passes) == 2
        assert svc.timers.get(DRAIN_JOB_ID) is not None
    finally:
        svc.stop()
        store.close()


def _l1_items(store: Any) -> list[tuple[str | None, int]]:
    with store._db.read() as conn:
        return [(i.claimed_by, i.id) for i in queue.pending(conn, "u") if i.stage == "l1"]


def test_a_capture_reuses_its_sessions_open_work_and_queues_anew_once_it_is_taken(
    new_target: Targets, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Once a session has work queued, each capture reads that item ahead (on
    # PostgreSQL, with its first reads): the answer must be the item as it is
    # when the capture runs, even after a worker took it meanwhile.
    store = open_store(new_target("m.db"), clock, warmup=(2,))
    ahead: list[tuple[Any, ...]] = []
    real = queue.read_open_ahead

    def counted(*args: Any, **kwargs: Any) -> None:
        ahead.append(args[1:])
        real(*args, **kwargs)

    monkeypatch.setattr(queue, "read_open_ahead", counted)
    try:
        store.capture_turn("u", "s", "first", "one")
        store.capture_turn("u", "s", "second", "two")  # threshold 2: work queued
        (first,) = _l1_items(store)
        assert first[0] is None and ahead == []
        store.capture_turn("u", "s", "third", "three")
        assert ahead == [("u", "l1")]
        assert _l1_items(store) == [first]  # the open item took the new work too
        taken = queue.claim_in(store._db, "worker-x", now=clock, ttl_s=60)
        assert taken is not None and taken.id == first[1]
        store.capture_turn("u", "s", "fourth", "four")
        assert len(ahead) == 2  # read ahead although the item was taken since
        items = _l1_items(store)
        assert len(items) == 2 and ("worker-x", first[1]) in items
        assert [c for c, i in items if i != first[1]] == [None]  # new work, unclaimed
    finally:
        store.close()
