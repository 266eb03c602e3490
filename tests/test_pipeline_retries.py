"""A session that keeps failing is not re-queued by the reconciler forever."""

from __future__ import annotations

from pathlib import Path

from memstore.pipeline import PipelineService, queue
from memstore.store import Store
from tests.pipeline_support import FakeClock, FakeDeriver, capture, open_store


def _queued(store: Store) -> list[tuple[str, str, str]]:
    with store.db.read() as conn:
        return [(i.stage, i.user_id, i.session_id) for i in queue.pending(conn)]


def _failures(store: Store) -> int:
    return len(store.read_events(types=["pipeline.run_failed"]))


def test_reconcile_leaves_a_session_that_exhausted_its_retries(tmp_path: Path) -> None:
    clock = FakeClock()
    store = open_store(tmp_path / "m.db", clock, max_retries=2, retry_delay_s=0)
    der = FakeDeriver(fail_l1=1000)
    svc = PipelineService(store, deriver=der)
    try:
        capture(store, svc, "u", "s")  # first capture: at the warm-up threshold
        capture(store, svc, "u", "other")
        svc.drain()
        assert _queued(store) == [] and _failures(store) == 4  # 2 sessions x 2 attempts
        for _ in range(3):  # the reconciler runs every minute on the lease holder
            clock.advance(60)
            assert svc.reconcile()["enqueued"] == 0
            svc.drain()
        assert _queued(store) == [] and _failures(store) == 4

        # New talk in one session brings that session back (and only it).
        clock.advance(60)
        der.fail_l1 = 0
        capture(store, svc, "u", "s", after_commit=False)
        with store.db.write() as conn:  # as if the capture's enqueue was lost
            queue.drop(conn, "u", "l1", "s")
        assert svc.reconcile()["enqueued"] == 1
        assert _queued(store) == [("l1", "u", "s")]
        assert [o.ok for o in svc.drain(stages=("l1",))] == [True]
        clock.advance(60)
        assert svc.reconcile()["enqueued"] == 0
    finally:
        svc.stop()
        store.close()
