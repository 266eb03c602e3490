"""The capture hook wakes the timer thread only when a timer may be missing
(one timer pass per capture, two read transactions and a job
lookup on another thread, competing with the next capture)."""

from __future__ import annotations

from typing import Any

import pytest

from memstore.pipeline import PipelineService
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
