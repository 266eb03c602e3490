"""``memstore bench keyword`` on a tiny store: it builds, reuses, and its
one-user agreement check holds (per-user BM25 = bm25() there)."""

from __future__ import annotations

from pathlib import Path

from memstore.bench.keyword import format_keyword_bench, run_keyword_bench


def test_keyword_bench_builds_reuses_and_agrees(tmp_path: Path) -> None:
    path = tmp_path / "kw.db"
    res = run_keyword_bench(users=1, per_user=60, n_queries=8, store_path=path, log=lambda _: None)
    assert res["build_s"] is not None and path.exists()
    assert res["same_top10_as_bm25"] == res["same_scores_as_bm25"] == 8
    again = run_keyword_bench(users=1, per_user=60, n_queries=8, store_path=path, log=print)
    assert again["build_s"] is None  # reused
    assert "top 10 identical to bm25(): 8/8" in format_keyword_bench(again)
    many = run_keyword_bench(
        users=3, per_user=40, n_queries=8, store_path=tmp_path / "kw3.db", log=lambda _: None
    )
    assert 0.0 < many["mean_overlap_at_10"] <= 1.0
    assert many["keyword"]["n"] == 8
