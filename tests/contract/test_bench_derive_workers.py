"""``memstore bench derive-workers`` measures what it says: two worker
processes derive every pending session of a fresh store, and the run checks
itself (nothing twice, nothing lost)."""

from __future__ import annotations

import pytest

from memstore.bench.derive_workers import format_derive_workers, run_derive_workers
from tests.backends import pg_admin_url


@pytest.mark.slow
def test_two_workers_derive_all_sessions_exactly(backend: str) -> None:
    res = run_derive_workers(
        db_url=pg_admin_url() if backend == "postgresql" else None,
        workers=[2],
        model="rules",
        users=2,
        sessions=2,
        rounds=2,
    )
    runs = [r for r in res["runs"] if r["backend"] == backend]
    assert len(runs) == 1
    run = runs[0]
    assert run["exact"] and run["sessions"] == 4 and run["messages"] == 16
    assert len(run["runs_per_worker"]) == 2 and run["runs"] >= 4  # an L1 run per session at least
    assert run["wall_s"] > 0 and run["events_per_s"] > 0
    assert f"| {backend} | 2 |" in format_derive_workers(res)
