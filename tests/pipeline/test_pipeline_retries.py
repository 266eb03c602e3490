"""Failed work resumes by itself: it is retried on a capped back-off for as long
as it is pending (never dropped), so an outage longer than any schedule ends
with the work done once the endpoint is back, with no capture and no manual
run; ``run_pipeline`` claims only what was queued when it was called.

The clock is the test's (``FakeClock``) and the scheduler is driven through
``Timers.run_due``: no sleeps."""

from __future__ import annotations

from typing import Any

import pytest

from memstore.cli.core import doctor_report
from memstore.derive.context import DeriveContext
from memstore.pipeline import PipelineService, queue
from memstore.pipeline.state import get_session
from memstore.store import Store
from memstore.timeutil import from_iso
from tests.backends import Targets
from tests.pipeline_support import FakeClock, FakeDeriver, Outcome, capture, open_store

pytestmark = pytest.mark.both_backends


def _queued(store: Store) -> list[tuple[str, str, str]]:
    with store._db.read() as conn:
        return [(i.stage, i.user_id, i.session_id) for i in queue.pending(conn)]


def _item(store: Store) -> queue.WorkItem:
    with store._db.read() as conn:
        (item,) = queue.pending(conn)
    return item


def _pending(store: Store, user: str, session: str) -> int:
    with store._db.read() as conn:
        st = get_session(conn, user, session)
    assert st is not None
    return st.messages_pending


def test_retry_delay_steady_then_doubling_up_to_the_cap() -> None:
    delays = [queue.retry_delay(n, base_s=30, steady=3, cap_s=3600) for n in range(1, 11)]
    assert delays == [30, 30, 60, 120, 240, 480, 960, 1920, 3600, 3600]
    assert queue.retry_delay(10**6, base_s=30, steady=3, cap_s=3600) == 3600  # no overflow


def test_failing_work_is_retried_past_max_retries_and_resumes_by_itself(
    new_target: Targets,
) -> None:
    clock = FakeClock()
    store = open_store(
        new_target("m.db"), clock, max_retries=2, retry_delay_s=30, retry_max_delay_s=300
    )
    der = FakeDeriver(fail_l1=10**6)  # the LLM is down
    svc = PipelineService(store._derivation, deriver=der)
    try:
        capture(store, svc, "u", "s")
        svc.drain()
        waits = []
        for _ in range(8):  # far past max_retries: still queued, each wait longer
            item = _item(store)
            due = from_iso(item.run_after)
            waits.append((due - clock()).total_seconds())
            armed = svc.timers.get("drain")  # the scheduler will run it
            assert armed is not None and armed <= due
            clock.now = due
            svc.timers.run_due(clock())
        assert waits == [30, 60, 120, 240, 300, 300, 300, 300]
        assert _item(store).attempts == 9 and _pending(store, "u", "s") == 2
        row = svc.status("u")[0]
        assert row["next_run_at"] == _item(store).run_after
        assert row["queued"][0]["attempts"] == 9
        assert row["queued"][0]["last_error"] == "scripted failure"
        report, _ = doctor_report(new_target("m.db"))
        assert report["pipeline_waiting"] == (
            "1 item(s) queued, 1 retrying after failures (they run by themselves); "
            f"next run at {_item(store).run_after}"
        )

        # The endpoint is back; nobody captures or runs anything by hand.
        der.fail_l1 = 0
        clock.now = from_iso(_item(store).run_after)
        svc.timers.run_due(clock())
        assert _pending(store, "u", "s") == 0
        assert _queued(store) == []
    finally:
        svc.stop()
        store.close()


def test_a_session_ended_during_an_outage_is_extracted_after_recovery(new_target: Targets) -> None:
    clock = FakeClock()
    path = new_target("m.db")
    store = open_store(path, clock, max_retries=1, retry_delay_s=10, retry_max_delay_s=600)
    der = FakeDeriver(fail_l1=10**6)
    svc = PipelineService(store._derivation, deriver=der)
    try:
        capture(store, svc, "u", "s", after_commit=False)
        with store._db.write() as conn:
            queue.drop(conn, "u", "l1", "s")  # below the threshold: nothing queued yet
        report = svc.end_session("u", "s", timeout_s=10)
        assert report["pending_after"] == 2 and report["ran"][0]["ok"] is False
        for _ in range(5):
            clock.now = from_iso(_item(store).run_after)
            svc.timers.run_due(clock())
        assert _item(store).attempts == 6
    finally:
        svc.stop()
        store.close()

    # Reopened during the outage: the waiting retry is still there and armed.
    store = open_store(path, clock, max_retries=1, retry_delay_s=10, retry_max_delay_s=600)
    svc = PipelineService(store._derivation, deriver=der)
    try:
        svc.reconcile()
        assert svc.timers.get("drain") == from_iso(_item(store).run_after)
        der.fail_l1 = 0
        clock.advance(600)
        svc.timers.run_due(clock())
        assert _pending(store, "u", "s") == 0
        assert ("l1", "u", "s") in der.calls[-1:]
    finally:
        svc.stop()
        store.close()


def test_a_failure_due_at_once_runs_once_per_drain(new_target: Targets) -> None:
    clock = FakeClock()
    store = open_store(new_target("m.db"), clock, max_retries=2, retry_delay_s=0)
    der = FakeDeriver(fail_l1=10**6)
    svc = PipelineService(store._derivation, deriver=der)
    try:
        capture(store, svc, "u", "s")
        capture(store, svc, "u", "other")
        assert len(svc.drain()) == 2  # one attempt each, though both are due again
        assert len(svc.drain()) == 2
        assert sorted(i[2] for i in _queued(store)) == ["other", "s"]
        assert svc.reconcile()["enqueued"] == 0  # the items wait; nothing re-queued
    finally:
        svc.stop()
        store.close()


class _CapturingDeriver(FakeDeriver):
    """Each L1 run sees a new session captured meanwhile (capture under load)."""

    def __init__(self, store: Store, limit: int) -> None:
        super().__init__()
        self.store, self.limit, self.svc = store, limit, None
        self.n = 0

    def run_l1(
        self, store: DeriveContext, user_id: str, session_id: str, *, generation: int | None = None
    ) -> Any:
        out: Outcome = super().run_l1(store, user_id, session_id, generation=generation)
        if self.n < self.limit and self.svc is not None:
            self.n += 1
            capture(self.store, self.svc, "u", f"load{self.n}")  # threshold 1: queued
        return out


def test_run_pipeline_claims_only_what_was_due_when_called(new_target: Targets) -> None:
    clock = FakeClock()
    store = open_store(new_target("m.db"), clock)
    der = _CapturingDeriver(store, limit=25)
    svc = PipelineService(store._derivation, deriver=der)
    der.svc = svc
    try:
        capture(store, svc, "u", "s")
        outs = svc.run_pipeline("u")
        assert [(o.stage, o.ok) for o in outs] == [("l1", True), ("l2", True)]
        assert _queued(store) == [("l1", "u", "load1")]  # left for the scheduler
        clock.advance(1)
        assert [o.stage for o in svc.run_pipeline("u")] == ["l1", "l2"]
        assert _queued(store) == [("l1", "u", "load2")]
    finally:
        svc.stop()
        store.close()


def test_a_retry_that_works_brings_the_other_waiting_retries_forward(new_target: Targets) -> None:
    clock = FakeClock()
    store = open_store(new_target("m.db"), clock, retry_delay_s=30, retry_max_delay_s=3600)
    der = FakeDeriver(fail_l1=10**6)
    svc = PipelineService(store._derivation, deriver=der)
    try:
        capture(store, svc, "u", "s1")
        svc.drain()
        clock.advance(10)
        capture(store, svc, "v", "s2")
        svc.drain()  # both failed: s1 retries at +30 s, s2 at +40 s
        der.fail_l1 = 0  # the endpoint is back
        clock.advance(20)
        svc.timers.run_due(clock())
        # s1's retry worked, so s2 did not wait out its own back-off.
        assert _pending(store, "u", "s1") == 0 and _pending(store, "v", "s2") == 0
        assert _queued(store) == []
    finally:
        svc.stop()
        store.close()
