"""``memstore bench keyword`` on tiny stores: it builds, reuses, and its
agreement check holds: per-user BM25 ranks exactly as ``bm25()`` over a
standalone FTS5 table of the same user's messages, with one user or many,
on conversation-like and on template text."""

from __future__ import annotations

from pathlib import Path

import pytest

from memstore.bench.keyword import chat_calls, format_keyword_bench, run_keyword_bench


def test_keyword_bench_builds_reuses_and_agrees(tmp_path: Path) -> None:
    path = tmp_path / "kw.db"
    res = run_keyword_bench(users=1, per_user=60, n_queries=8, store_path=path, log=lambda _: None)
    assert res["build_s"] is not None and path.exists()
    assert res["same_top10_as_per_user_bm25"] == res["same_scores_as_per_user_bm25"] == 8
    again = run_keyword_bench(users=1, per_user=60, n_queries=8, store_path=path, log=print)
    assert again["build_s"] is None  # reused
    assert "top 10 identical to the per-user table's bm25(): 8/8" in format_keyword_bench(again)


@pytest.mark.parametrize("text", ["chat", "template"])
def test_many_users_rank_as_their_own_fts5_table(tmp_path: Path, text: str) -> None:
    many = run_keyword_bench(
        users=3,
        per_user=40,
        n_queries=8,
        store_path=tmp_path / "kw3.db",
        log=lambda _: None,
        text=text,
    )
    assert many["same_top10_as_per_user_bm25"] == many["same_scores_as_per_user_bm25"] == 8
    assert many["keyword"]["n"] == many["ref_fts5_per_user"]["n"] == 8


def test_chat_capture_calls_are_one_turn_each() -> None:
    calls = chat_calls(users=2, per_user=40)
    assert len(calls) == 40  # 80 messages, two a call
    assert all([m["role"] for m in msgs] == ["user", "assistant"] for _, _, msgs in calls)
    assert {u for u, _, _ in calls} == {"u0000", "u0001"}
    assert sum(len(m["content"]) for _, _, msgs in calls for m in msgs) / 80 > 150


def test_unknown_text_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="text must be one of"):
        run_keyword_bench(
            users=1, per_user=2, n_queries=1, store_path=tmp_path / "x.db", log=print, text="x"
        )
