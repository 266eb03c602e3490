"""Work resumes by itself, on both backends: a failing job is retried past
``max_retries`` on a capped back-off, the first retry that works brings the
others forward, and ``run_pipeline`` claims only what was due when called."""

from __future__ import annotations

from typing import Any

from memstore import Settings
from memstore.derive import derive_projections
from memstore.pipeline import PipelineService, PipelineStateProjection, queue
from memstore.projections.stats import StatsProjection
from memstore.store import Store
from memstore.timeutil import from_iso
from tests.pipeline_support import FakeClock, FakeDeriver, capture


def _open(target: str, clock: FakeClock, settings: Settings) -> Store:
    projections = [StatsProjection(), *derive_projections(), PipelineStateProjection()]
    s = settings.replace(max_retries=2, retry_delay_s=30, retry_max_delay_s=120)
    return Store.open(target, settings=s, projections=projections, clock=clock)


def _items(store: Store) -> list[queue.WorkItem]:
    with store._db.read() as conn:
        return queue.pending(conn)


def test_failed_work_backs_off_and_resumes(target: str, settings: Settings) -> None:
    clock = FakeClock()
    store = _open(target, clock, settings)
    der = FakeDeriver(fail_l1=10**6)
    svc = PipelineService(store._derivation, deriver=der)
    try:
        capture(store, svc, "u", "s1")
        svc.drain()
        clock.advance(10)
        capture(store, svc, "v", "s2")
        svc.drain()
        waits: list[float] = []
        for _ in range(4):  # s1's retries: steady, then doubling up to the cap
            first = min(_items(store), key=lambda i: i.run_after)
            waits.append((from_iso(first.run_after) - clock()).total_seconds())
            clock.now = from_iso(first.run_after)
            svc.drain()
        assert len(_items(store)) == 2  # never dropped
        der.fail_l1 = 0
        clock.now = from_iso(min(i.run_after for i in _items(store)))
        svc.drain()
        assert _items(store) == []  # the first success brought the other forward
        assert waits[0] > 0 and max(waits) <= 120
    finally:
        svc.stop()
        store.close()


class _Capturing(FakeDeriver):
    def __init__(self, store: Store) -> None:
        super().__init__()
        self.store, self.svc, self.n = store, None, 0

    def run_l1(self, store: Any, user_id: str, session_id: str, **kw: Any) -> Any:
        out = super().run_l1(store, user_id, session_id, **kw)
        if self.svc is not None and self.n < 10:
            self.n += 1
            capture(self.store, self.svc, "u", f"load{self.n}")
        return out


def test_run_pipeline_claims_only_what_was_due(target: str, settings: Settings) -> None:
    clock = FakeClock()
    store = _open(target, clock, settings)
    der = _Capturing(store)
    svc = PipelineService(store._derivation, deriver=der)
    der.svc = svc
    try:
        capture(store, svc, "u", "s")
        assert [o.stage for o in svc.run_pipeline("u")] == ["l1", "l2"]
        assert [i.session_id for i in _items(store)] == ["load1"]
    finally:
        svc.stop()
        store.close()
