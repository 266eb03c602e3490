"""Erasure leaves no byte of the erased content behind, even when the process
is killed between the erasure's commit and the compaction, or when another
connection holds an old snapshot."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from memstore import Settings
from memstore.cli import cli
from memstore.db import compaction as ec
from memstore.errors import NotFoundError
from memstore.store import Store

pytestmark = pytest.mark.both_backends

SECRET = "Qv83kz-wombat-lighthouse"

CHILD = textwrap.dedent(
    """
    import pathlib, sys, time
    from memstore import Settings
    from memstore.store import Store
    import memstore.db.backend.sqlite as sqlite_backend
    import memstore.db.compaction as ec

    path, stage, ready, secret = sys.argv[1:5]

    def stop_here():
        pathlib.Path(ready).write_text(stage)
        time.sleep(600)  # killed here by the test

    # The two points the test kills at, wrapped in this child process only:
    # "committed" (the erasure committed, nothing compacted) is the first
    # compaction run; "vacuumed" (VACUUM done and recorded, the WAL not yet
    # checkpointed) is the WAL truncation after it.
    if stage == "committed":
        ec.Compactor.run = lambda self, *a, **k: stop_here()
    else:
        sqlite_backend.truncate_wal = lambda *a, **k: stop_here()
    settings = Settings().replace(embedder="hashing", scheduler=False, background_indexer=False)
    with Store.open(path, settings=settings) as s:
        for i in range(60):
            s.capture_turn("victim", f"s{i % 3}", f"turn {i}: my code is {secret}", "noted")
        s.capture_turn("keeper", "k1", "I like green tea", "ok")
        s.reindex()
        s.forget_user("victim")
    """
)


def file_bytes(path: Path) -> bytes:
    data = b""
    for suffix in ("", "-wal"):
        p = Path(f"{path}{suffix}")
        if p.exists():
            data += p.read_bytes()
    return data


def _kill_child_at(stage: str, db_path: Path, tmp_path: Path) -> None:
    ready = tmp_path / f"ready-{stage}"
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(db_path), stage, str(ready), SECRET],
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 180
        while not ready.exists():
            if proc.poll() is not None:
                raise AssertionError(f"child exited early: {proc.stderr.read()!r}")  # type: ignore[union-attr]
            if time.monotonic() > deadline:
                raise AssertionError("child never reached " + stage)
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
        if proc.stderr is not None:
            proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL


# SQLite only (a file at db_path): the child stops at SQLite's WAL truncation
# and the test reads the file's bytes.
@pytest.mark.reliability
@pytest.mark.slow  # a child process killed mid-erasure, then a reopen
@pytest.mark.parametrize("stage", ["committed", "vacuumed"])
def test_sigkill_between_commit_and_compaction_is_finished_on_open(
    stage: str, db_path: Path, tmp_path: Path, settings: Settings
) -> None:
    _kill_child_at(stage, db_path, tmp_path)
    # The kill landed in the window: the erased text is still in the file ...
    assert SECRET.encode() in file_bytes(db_path)
    # ... and the next open of the store removes it.
    with Store.open(db_path, settings=settings) as store:
        assert not ec.is_pending(store._db)
        assert SECRET.encode() not in file_bytes(db_path)
        assert store.read_events(user_id="victim") == []
        assert [e.type for e in store.read_events(types=["erasure.user"])] == ["erasure.user"]
        hits = store.search_conversations("keeper", "green tea", strategy="keyword")
        assert [h.text for h in hits] == ["I like green tea"]
    assert SECRET.encode() not in file_bytes(db_path)


def _victim(store: Store) -> None:
    for i in range(20):
        store.capture_turn("victim", "s1", f"turn {i}: my code is {SECRET}", "noted")
    store.capture_turn("keeper", "k1", "I like green tea", "ok")


def _reader(store: Store) -> object:
    """Another connection inside a read transaction: it pins the snapshot."""
    conn = store._db.module.connect(str(store.path), isolation_level=None, check_same_thread=False)
    conn.execute("BEGIN")
    conn.execute("SELECT count(*) FROM events").fetchone()
    return conn


# SQLite's file bytes, WAL and read snapshots: PostgreSQL's side of erasure
# (VACUUM, --vacuum-full) is tested in tests/contract/test_erasure_files.py.
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_reader_holding_a_snapshot_is_reported_then_finished_by_the_next_write(
    store: Store, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ec, "RETRY_INTERVAL_S", 0.0)
    _victim(store)
    reader = _reader(store)
    try:
        report = store.forget_user("victim", wait_s=0.3)
        assert report.events_removed == 20
        assert report.compacted is False
        assert "read transaction" in report.detail
        assert SECRET.encode() in file_bytes(db_path)  # honest: the bytes are still there
        assert ec.is_pending(store._db)
        store.capture_turn("keeper", "k1", "still here", "ok")  # retried, reader still in the way
        assert ec.is_pending(store._db)
    finally:
        reader.execute("COMMIT")  # type: ignore[attr-defined]
        reader.close()  # type: ignore[attr-defined]
    store.capture_turn("keeper", "k1", "one more", "ok")  # the next write finishes
    assert not ec.is_pending(store._db)
    assert SECRET.encode() not in file_bytes(db_path)


# As above: SQLite's file bytes.
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_reader_that_ends_within_the_bound_is_waited_for(store: Store, db_path: Path) -> None:
    _victim(store)
    reader = _reader(store)

    def release() -> None:
        time.sleep(0.5)
        reader.execute("COMMIT")  # type: ignore[attr-defined]
        reader.close()  # type: ignore[attr-defined]

    t = threading.Thread(target=release)
    t.start()
    try:
        report = store.forget_user("victim", wait_s=60)
    finally:
        t.join()
    assert report.compacted is True and report.detail == ""
    assert not ec.is_pending(store._db)
    assert SECRET.encode() not in file_bytes(db_path)


# As above: SQLite's file bytes.
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_close_finishes_a_pending_compaction(store: Store, db_path: Path) -> None:
    _victim(store)
    reader = _reader(store)
    assert store.forget_user("victim", wait_s=0.1).compacted is False
    reader.execute("COMMIT")  # type: ignore[attr-defined]
    reader.close()  # type: ignore[attr-defined]
    store.close()
    assert SECRET.encode() not in file_bytes(db_path)
    assert not ec.is_pending_at(db_path)


# As above: SQLite's file bytes.
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_cli_forget_exits_non_zero_while_the_bytes_remain(
    store: Store, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMSTORE_EMBEDDER", "hashing")
    _victim(store)
    store.close()
    with Store.open(db_path, settings=store.settings) as holder:
        reader = _reader(holder)
        try:
            args = ["users", "forget", "victim", "--db", str(db_path), "--yes", "--wait", "0.2"]
            res = CliRunner().invoke(cli, args)
            assert res.exit_code == 3, res.output
            assert "still in the file" in res.output
        finally:
            reader.execute("COMMIT")  # type: ignore[attr-defined]
            reader.close()  # type: ignore[attr-defined]
    # the holder's close finished it
    assert SECRET.encode() not in file_bytes(db_path)
    # --vacuum-full is PostgreSQL's option; SQLite's VACUUM rewrites the file anyway.
    res = CliRunner().invoke(
        cli, ["users", "forget", "keeper", "--db", str(db_path), "--yes", "--vacuum-full"]
    )
    assert res.exit_code == 0, res.output
    assert "erased" in res.output


def test_forgetting_an_unknown_user_says_so_and_changes_nothing(store: Store) -> None:
    store.capture_turn("keeper", "k1", "I like green tea", "ok")
    head = store.event_count()
    with pytest.raises(NotFoundError, match="nobody"):
        store.forget_user("nobody")
    assert store.event_count() == head
    assert store.read_events(types=["erasure.user"]) == []
    assert not ec.is_pending(store._db)
