"""``memstore bench large-user`` on a tiny store: it runs every timed part and
the postings' ranking equals the SQL ranking on each query."""

from __future__ import annotations

from pathlib import Path

import pytest

from memstore.bench import large_user
from memstore.bench.large_user import format_large_user, run_large_user
from memstore.config import Settings
from memstore.search import postings
from memstore.store import Store


def test_large_user_bench_runs_and_agrees(
    tmp_path: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "big.db"
    with Store.open(path, settings=settings) as store:
        for i in range(6):
            store.capture(
                "solo",
                f"s{i}",
                [
                    {"role": "user", "content": f"my trip to Lisbon number {i} was great"},
                    {"role": "assistant", "content": "what did you eat at the marathon?"},
                ],
            )
        store.reindex()
    # Every user counts as large here, so the postings answer.
    monkeypatch.setattr(postings, "MIN_DOCS", 1)
    res = run_large_user(path, "hashing", 5)
    assert res["postings_users"] == ["solo"] and res["messages"] == 12
    assert res["ranking_same_as_sql"] == 5
    assert all(res[name]["n"] == 5 for name in large_user._NAMES)
    assert all(res[name]["p50_ms"] >= 0.0 for name in large_user._NAMES)  # not NaN
    assert "ranking from postings = from SQL (ids and scores): 5/5" in format_large_user(res)
