"""The SIGKILL experiments of ``memstore bench chaos``, with fewer trials: a child
process is killed at a random moment while it captures, rebuilds, erases or
extracts, and the reopened file must hold everything that was acknowledged."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from memstore.bench import chaos_kill
from memstore.bench.snapshot import snapshot

# The experiments are the benchmark's own (memstore/bench/chaos_kill.py): each
# makes SQLite files in its work folder and kills a child writing to them, so
# they run on SQLite (their tests take no backend). The checks that open a
# store of their own run on both engines.
pytestmark = [pytest.mark.reliability, pytest.mark.slow, pytest.mark.both_backends]


def test_sigkill_during_capture_loses_no_acknowledged_capture(tmp_path: Path) -> None:
    res = chaos_kill.kill_capture(3, tmp_path, snapshot, random.Random(1))
    assert res["acknowledged"] > 0
    assert (res["lost"], res["duplicates"], res["projection_mismatches"]) == (0, 0, 0)


def test_sigkill_while_threads_capture_loses_no_acknowledged_capture(tmp_path: Path) -> None:
    res = chaos_kill.kill_threads_capture(3, tmp_path, snapshot, random.Random(5))
    assert res["acknowledged"] > 0
    # The captures did share transactions before the kill (group commit).
    assert res["shared_transactions"] > 0
    assert (res["lost"], res["duplicates"], res["projection_mismatches"]) == (0, 0, 0)


def test_sigkill_during_rebuild_leaves_the_log_and_projections_intact(tmp_path: Path) -> None:
    res = chaos_kill.kill_rebuild(3, tmp_path, snapshot, random.Random(2), turns=600)
    assert res["events"] > 0
    assert (res["log_changed"], res["projection_mismatches"]) == (0, 0)


def test_sigkill_during_erasure_leaves_no_erased_bytes_after_reopen(tmp_path: Path) -> None:
    res = chaos_kill.kill_erase(3, tmp_path, random.Random(3), copies=200)
    assert res["secret_left_after_reopen"] == 0
    assert res["half_erased"] == 0 and res["keeper_lost"] == 0


def test_sigkill_during_extraction_never_moves_the_cursor_past_a_message(tmp_path: Path) -> None:
    res = chaos_kill.kill_extract(3, tmp_path, random.Random(4))
    assert res["acknowledged"] > 0
    assert res["lost"] == 0
    assert res["cursor_past_unextracted"] == 0
    assert res["unextracted_after_recovery"] == 0


def test_the_file_check_finds_the_secret_when_it_is_there(tmp_path: Path) -> None:
    # The erasure figure is only worth something if the byte search can fail.
    db = tmp_path / "e.db"
    chaos_kill._erasure_db(db, 50)
    assert chaos_kill.file_has(db, chaos_kill.SECRET)


def test_the_cursor_check_sees_a_cursor_past_unextracted_messages(target: str) -> None:
    from sqlalchemy import text

    from memstore.bench.chaos_child import child_settings
    from memstore.store import Store

    with Store.open(target, settings=child_settings()) as store:
        store.capture("u", "s1", [{"role": "user", "content": "I like tea", "id": "a"}])
        with store._db.write() as conn:  # a cursor moved without an extraction event
            conn.execute(text("INSERT INTO l1_cursors VALUES ('u', 's1', 0, 99, 1, 'r', 99)"))
        assert chaos_kill.uncovered(store, "u") == 1
