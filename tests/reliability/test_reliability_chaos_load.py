"""Concurrent writers, LLM faults through the fake server, user isolation and
the mixed load of ``memstore bench chaos``, with fewer trials."""

from __future__ import annotations

from pathlib import Path

import pytest

from memstore.bench import chaos_llm, chaos_load
from memstore.bench.chaos import ChaosPlan, format_chaos, run_chaos
from memstore.cli import main

# The experiments are the benchmark's own (memstore/bench/chaos_load.py and
# chaos_llm.py): each makes SQLite files in its work folder, so they run on
# SQLite (their tests take no backend). The write timer, on a store of its
# own, runs on both engines.
pytestmark = [pytest.mark.reliability, pytest.mark.slow, pytest.mark.both_backends]


def test_concurrent_writers_lose_and_duplicate_nothing(tmp_path: Path) -> None:
    res = chaos_load.threads_and_processes(tmp_path, threads=8, procs=3, per=25)
    for kind in ("threads", "processes"):
        r = res[kind]
        assert (r["errors"], r["lost"], r["duplicates"]) == (0, 0, 0), r


def test_llm_faults_fail_the_run_and_lose_nothing(tmp_path: Path) -> None:
    res = chaos_llm.llm_faults(tmp_path, rounds=1)
    assert set(res) == set(chaos_llm.FAULTS)
    for kind, r in res.items():
        assert r["raw_exceptions"] == 0, kind
        assert r["cursor_past_unextracted"] == 0, kind
        assert r["lost_after_retry"] == 0, kind
    # Every fault but a citation of an unknown id (kept, attributed to the batch)
    # fails the run instead of counting as "nothing to remember".
    assert all(r["failed"] == r["runs"] for k, r in res.items() if k != "unknown_ids")


def test_no_read_path_shows_another_users_content(tmp_path: Path) -> None:
    res = chaos_llm.isolation(tmp_path, pairs=2)
    assert res["read_paths"] >= 12 and res["probes"] == 2 * res["read_paths"]
    assert res["leaks"] == 0


def test_mixed_load_loses_nothing(tmp_path: Path) -> None:
    res = chaos_load.mixed_load(tmp_path, seconds=8.0)
    assert res["captures"] > 0 and res["pipeline_runs"] >= 1
    assert (res["errors"], res["lost"], res["duplicates"]) == (0, 0, 0)
    assert res["other_failures"] == []
    assert res["write_longest_at"]  # the longest write transaction is located


def test_the_write_timer_names_the_caller(target: str) -> None:
    from memstore.bench.chaos_child import child_settings
    from memstore.store import Store

    with Store.open(target, settings=child_settings()) as store:
        timer = chaos_load.WriteTimer(store)
        store.capture("u", "s", [{"role": "user", "content": "hi"}])
        assert timer.holds and "capture" in timer.longest_at


def test_bench_chaos_prints_the_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = ChaosPlan(
        kill_trials=1,
        erase_trials=1,
        llm_rounds=1,
        isolation_pairs=1,
        writers_per=5,
        mixed_seconds=3.0,
    )
    table = format_chaos(run_chaos(plan, workdir=tmp_path))
    for row in (
        "SIGKILL during capture",
        "SIGKILL during capture from 8 threads",
        "SIGKILL during erasure",
        "writers, 8 threads",
        "LLM faults",
        "isolation",
        "mixed load",
        "longest write transaction at",
    ):
        assert row in table


def test_bench_chaos_refuses_bad_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "chaos", "--trials", "0"])
    assert exit_info.value.code == 2
    assert "must be positive" in capsys.readouterr().err
