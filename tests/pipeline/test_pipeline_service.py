"""PipelineService: L2/L3 timing, end_session, run_pipeline, reconcile, status."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from memstore.pipeline import PipelineService, queue, wakeup
from memstore.pipeline.runner import Outcome
from memstore.pipeline.scheduler import idle_job_id, l2_job_id
from memstore.pipeline.state import get_session
from memstore.store import Store
from memstore.timeutil import timedelta
from tests.backends import Targets
from tests.pipeline_support import FakeClock, FakeDeriver, capture, open_store

pytestmark = pytest.mark.both_backends


def test_l2_after_delay_min_interval_and_l3_on_request(
    env: tuple[Store, PipelineService, FakeDeriver], clock: FakeClock
) -> None:
    store, svc, der = env
    der.persona_requested = True
    capture(store, svc, "u", "s")
    svc.drain()
    assert svc.timers.get(l2_job_id("u")) == clock() + timedelta(seconds=10)
    clock.advance(10)
    svc.timers.run_due(clock())
    assert [c[0] for c in der.calls] == ["l1", "l2", "l3"]
    # active user: L2 comes back at most l2_max_interval_s later
    assert svc.timers.get(l2_job_id("u")) == clock() + timedelta(seconds=3600)
    der.persona_requested = False
    clock.advance(60)
    capture(store, svc, "u", "s", rounds=2)  # threshold 2 reached
    svc.drain()
    # 10 s after L1 would be too soon: not before 900 s after the last L2
    assert svc.timers.get(l2_job_id("u")) == clock() - timedelta(seconds=60) + timedelta(
        seconds=900
    )
    clock.advance(900)
    svc.timers.run_due(clock())
    assert [c[0] for c in der.calls] == ["l1", "l2", "l3", "l1", "l2"]


def test_l2_timer_without_new_input_only_rearms_while_active(
    env: tuple[Store, PipelineService, FakeDeriver], clock: FakeClock
) -> None:
    store, svc, der = env
    capture(store, svc, "u", "s")
    svc.drain()
    clock.advance(10)
    svc.timers.run_due(clock())
    clock.advance(3600)
    svc.timers.run_due(clock())  # nothing new: no run, re-armed (active < 24 h)
    assert [c[0] for c in der.calls] == ["l1", "l2"]
    assert svc.timers.get(l2_job_id("u")) is not None
    clock.advance(86400)
    svc.timers.run_due(clock())
    assert svc.timers.get(l2_job_id("u")) is None  # idle for a day: stops


def test_end_session_extracts_cancels_timer_and_records_end(
    env: tuple[Store, PipelineService, FakeDeriver], clock: FakeClock
) -> None:
    store, svc, _der = env
    capture(store, svc, "u", "s")
    svc.drain()
    capture(store, svc, "u", "s")  # below threshold 2: pending, idle timer armed
    assert svc.timers.get(idle_job_id("u", "s")) is not None
    report = svc.end_session("u", "s", timeout_s=30)
    assert report["pending_before"] == 2 and report["pending_after"] == 0
    assert report["timed_out"] is False
    assert [(r["ok"], r["by"]) for r in report["ran"]] == [(True, "end_session")]
    assert svc.timers.get(idle_job_id("u", "s")) is None
    assert store.read_events(types=["l0.session_ended"])[0].user_id == "u"
    status = svc.status("u")[0]["sessions"][0]
    assert status["ended_at"] is not None and status["messages_pending"] == 0


def test_end_session_reports_a_timeout(new_target: Targets) -> None:
    store = open_store(new_target("m.db"))
    der = FakeDeriver(l1_delay_s=0.5)
    svc = PipelineService(store._derivation, deriver=der)
    try:
        capture(store, svc, "u", "s", after_commit=False)
        with store._db.write() as conn:
            queue.drop(conn, "u", "l1", "s")
        report = svc.end_session("u", "s", timeout_s=0.01)
        assert report["timed_out"] is True
        assert store.read_events(types=["l0.session_ended"])  # recorded anyway
    finally:
        svc.stop()  # waits for the extraction still running
        store.close()
    assert der.calls == [("l1", "u", "s")]


def test_end_session_reports_the_extraction_a_worker_already_did(
    env: tuple[Store, PipelineService, FakeDeriver],
) -> None:
    # The store's scheduler extracts a session once it reaches its threshold;
    # ending it afterwards must not report that nothing was done.
    store, svc, _der = env
    capture(store, svc, "u", "s")  # threshold 1: queued
    [done] = svc.drain()  # what the scheduler's drain timer does
    report = svc.end_session("u", "s")
    assert report["pending_before"] == 0 and report["pending_after"] == 0
    assert report["ran"] == [
        {"stage": "l1", "ok": True, "run_id": done.run_id, "error": None, "by": "worker"}
    ]
    assert svc.end_session("u", "s")["ran"] == []  # reported once, when it was ended
    capture(store, svc, "u", "s", rounds=2)  # new talk reopens it (threshold now 2)
    [again] = svc.drain()
    assert [r["run_id"] for r in svc.end_session("u", "s")["ran"]] == [again.run_id]


def test_end_session_waits_for_the_run_a_worker_holds_and_reports_it(
    new_target: Targets, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Woken when the worker lets go, not by polling: a poll would outlast the timeout.
    monkeypatch.setattr(wakeup, "LOCAL_RECHECK_S", 60.0)
    store = open_store(new_target("m.db"))
    der = FakeDeriver(l1_delay_s=0.5)
    svc = PipelineService(store._derivation, deriver=der)
    drained: list[list[Outcome]] = []
    worker = threading.Thread(target=lambda: drained.append(svc.drain()))
    try:
        capture(store, svc, "u", "s", after_commit=False)  # threshold 1: queued
        worker.start()  # the scheduler's drain, on its own thread
        deadline = time.monotonic() + 10
        while not der.calls and time.monotonic() < deadline:
            time.sleep(0.01)
        assert der.calls == [("l1", "u", "s")]  # claimed, running
        report = svc.end_session("u", "s", timeout_s=30)
        worker.join()
    finally:
        svc.stop()
        store.close()
    assert report["pending_before"] == 2 and report["pending_after"] == 0
    assert report["timed_out"] is False
    [[done]] = drained
    assert [(r["run_id"], r["ok"], r["by"]) for r in report["ran"]] == [
        (done.run_id, True, "worker")
    ]
    assert der.calls == [("l1", "u", "s")]  # extracted once


def test_end_session_with_nothing_pending(env: tuple[Store, PipelineService, FakeDeriver]) -> None:
    _store, svc, der = env
    report = svc.end_session("nobody", "s")
    assert report["ran"] == [] and report["pending_before"] == 0 and der.calls == []


def test_run_pipeline_runs_l1_then_l2_then_l3(
    env: tuple[Store, PipelineService, FakeDeriver], clock: FakeClock
) -> None:
    store, svc, der = env
    for u in ("a", "b"):
        capture(store, svc, u, "s")
        svc.drain()
        capture(store, svc, u, "s")  # pending below threshold
    der.calls.clear()
    der.persona_is_due = True
    outs = svc.run_pipeline(user_id="a")
    assert [(o.stage, o.ok) for o in outs] == [("l1", True), ("l2", True), ("l3", True)]
    assert der.calls == [("l1", "a", "s"), ("l2", "a", ""), ("l3", "a", "")]
    outs = svc.run_pipeline()
    assert [o.stage for o in outs] == ["l1", "l2", "l3"]  # only b had anything left
    assert svc.run_pipeline() == []


def test_manual_run_retries_failed_work_now(
    env: tuple[Store, PipelineService, FakeDeriver], clock: FakeClock
) -> None:
    store, svc, der = env
    der.fail_l1 = 1
    capture(store, svc, "u", "s")
    assert [o.ok for o in svc.drain()] == [False]
    outs = svc.run_pipeline("u")
    assert [(o.stage, o.ok) for o in outs] == [("l1", True), ("l2", True)]


def test_run_pipeline_without_wait_queues_for_the_scheduler(
    env: tuple[Store, PipelineService, FakeDeriver], clock: FakeClock
) -> None:
    store, svc, der = env
    capture(store, svc, "u", "s", after_commit=False)
    assert svc.run_pipeline(wait=False) == []
    svc.flush()
    assert svc.timers.run_due(clock()) == ["drain"]
    assert der.calls[0] == ("l1", "u", "s")


def test_reconcile_rearms_what_a_crash_lost(
    env: tuple[Store, PipelineService, FakeDeriver], clock: FakeClock
) -> None:
    store, svc, _der = env
    capture(store, svc, "u", "s")
    svc.drain()
    svc.timers.run_due(clock() + timedelta(seconds=10))
    # committed, then "crashed" before after_commit armed anything
    capture(store, svc, "u", "s", after_commit=False)
    capture(store, svc, "v", "t", after_commit=False)  # threshold 1: queued
    assert svc.timers.get(idle_job_id("u", "s")) is None
    got = svc.reconcile()
    assert got["timers_armed"] >= 1
    assert svc.timers.get(idle_job_id("u", "s")) == clock() + timedelta(seconds=600)
    assert svc.timers.get("drain") is not None
    assert svc.reconcile()["timers_armed"] == 0  # idempotent
    clock.advance(600)
    svc.timers.run_due(clock())
    with store._db.read() as conn:
        assert all(
            (st := get_session(conn, u, s)) is not None and st.messages_pending == 0
            for u, s in (("u", "s"), ("v", "t"))
        )


def test_reconcile_enqueues_a_session_at_threshold(
    env: tuple[Store, PipelineService, FakeDeriver], clock: FakeClock
) -> None:
    store, svc, _ = env
    capture(store, svc, "u", "s", after_commit=False)
    with store._db.write() as conn:  # the queue is operational state: rebuildable
        queue.drop(conn, "u", "l1", "s")
    assert svc.reconcile()["enqueued"] == 1
    with store._db.read() as conn:
        assert [i.stage for i in queue.pending(conn)] == ["l1"]


def test_status_shapes(env: tuple[Store, PipelineService, FakeDeriver], clock: FakeClock) -> None:
    store, svc, _ = env
    capture(store, svc, "u", "s")
    rows = svc.status()
    assert rows[0]["user_id"] == "u"
    assert rows[0]["queued"][0]["stage"] == "l1"
    sess = rows[0]["sessions"][0]
    assert sess["threshold"] == 1 and sess["rounds_pending"] == 1
    assert svc.status("other") == []


def test_on_captured_requires_the_projection_first(
    env: tuple[Store, PipelineService, FakeDeriver],
) -> None:
    from memstore.derive.messages.events import MessagesCaptured, l0_stream
    from memstore.errors import PipelineError
    from memstore.events.log import NewEvent

    store, svc, _ = env
    with pytest.raises(PipelineError), store._db.write() as conn:
        stored = store._log.append(
            conn,
            [
                NewEvent(
                    l0_stream("u", "s"), MessagesCaptured(session_id="s", messages=[]), user_id="u"
                )
            ],
        )
        svc.on_captured(conn, stored)


def test_run_pipeline_waits_for_work_another_worker_holds(
    env: tuple[Store, PipelineService, FakeDeriver], clock: FakeClock
) -> None:
    # A store's own background scheduler, or another process, may hold the
    # scenes step when run_pipeline looks: returning then would leave the
    # scenes and persona it was asked for still unwritten.
    store, svc, der = env
    capture(store, svc, "u", "s")
    svc.drain()
    der.calls.clear()
    other = "otherhost:1:worker"
    with store._db.queue_write() as conn:
        queue.enqueue(conn, "u", "l2", now=clock())
        held = queue.claim(conn, other, now=clock(), ttl_s=600, user_id="u", stages=("l2",))
    assert held is not None

    def finish() -> None:
        time.sleep(0.3)
        with store._db.queue_write() as conn:
            queue.complete(conn, held, other)

    worker = threading.Thread(target=finish)
    started = time.monotonic()
    worker.start()
    outs = svc.run_pipeline("u")
    worker.join()
    assert time.monotonic() - started >= 0.3
    assert ("l2", True) in [(o.stage, o.ok) for o in outs]
    assert ("l2", "u", "") in der.calls


def test_run_pipeline_is_woken_when_a_worker_of_this_process_lets_go(
    new_target: Targets, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The store's scheduler holds the session's extraction when run_pipeline
    # looks: the wait ends when that drain completes the item, not at the next
    # poll (set here past the bound below; it was every 20 ms for up to 30 s).
    monkeypatch.setattr(wakeup, "LOCAL_RECHECK_S", 60.0)
    monkeypatch.setattr(wakeup, "OTHER_PROCESS_POLL_S", 60.0)
    store = open_store(new_target("m.db"))
    der = FakeDeriver(l1_delay_s=0.5)
    svc = PipelineService(store._derivation, deriver=der)
    worker = threading.Thread(target=svc.drain)  # the scheduler's drain, on its own thread
    try:
        capture(store, svc, "u", "s", after_commit=False)  # threshold 1: queued
        worker.start()
        deadline = time.monotonic() + 10
        while not der.calls and time.monotonic() < deadline:
            time.sleep(0.01)
        assert der.calls == [("l1", "u", "s")]  # claimed, running
        started = time.monotonic()
        outs = svc.run_pipeline("u")
        waited = time.monotonic() - started
        worker.join()
    finally:
        svc.stop()
        store.close()
    assert waited < 10
    # The scenes after its L1 ran once: by run_pipeline, or, when the scheduler's
    # drain got to them first (a loaded machine), by the drain while
    # run_pipeline waited for it.
    assert [c for c in der.calls if c[0] == "l2"] == [("l2", "u", "")]
    assert [(o.stage, o.ok) for o in outs] in ([("l2", True)], [])
    assert der.calls == [("l1", "u", "s"), ("l2", "u", "")]


def test_a_drain_takes_a_turn_per_item_and_rests_only_after_captures(
    env: tuple[Store, PipelineService, FakeDeriver],
) -> None:
    store, svc, der = env
    rests: list[float] = []
    svc.pacer._rest = rests.append  # type: ignore[method-assign]
    capture(store, svc, "u", "s1")
    capture(store, svc, "u", "s2")
    turns = 0
    inner = svc.pacer.turn

    def turn() -> Any:
        nonlocal turns
        turns += 1
        return inner()

    svc.pacer.turn = turn  # type: ignore[method-assign]
    svc.drain()  # asked for now (run_pipeline, end_session): no turns
    assert turns == 0 and [c[0] for c in der.calls] == ["l1", "l1"]
    capture(store, svc, "u", "s3")
    capture(store, svc, "u", "s4")
    svc.drain(paced=True)  # as the timers drain
    # A turn per item and one for the claim that found nothing; the captures
    # came before the items, so no rest.
    assert [c[0] for c in der.calls] == ["l1"] * 4 and turns == 3
    assert rests == []
    # A capture while an item runs: the drain rests before its next claim.
    capture(store, svc, "u", "s5")
    capture(store, svc, "u", "s6")
    real_run = svc.runner.run

    def run_and_capture(*args: Any, **kwargs: Any) -> Any:
        out = real_run(*args, **kwargs)
        svc.pacer.captured()
        return out

    svc.runner.run = run_and_capture  # type: ignore[method-assign]
    svc.drain(paced=True)
    assert [c[0] for c in der.calls] == ["l1"] * 6
    assert len(rests) >= 1 and all(r > 0 for r in rests)
