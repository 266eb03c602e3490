"""A process killed in the middle of a partial erasure (a session forgotten):
killed inside the transaction, nothing is erased and nothing is half-done;
killed after the commit, the erased text is still in the file (on PostgreSQL:
the compaction is still pending) until the next open of the store, which
finishes the compaction."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from memstore import Settings
from memstore.db import compaction as ec
from memstore.store import Store
from tests.backends import ENGINES
from tests.reliability.test_reliability_erasure import file_bytes

pytestmark = pytest.mark.both_backends

SECRET = "Zx71qp-narwhal-belltower"

CHILD = textwrap.dedent(
    """
    import pathlib, sys, time
    from memstore import Settings
    from memstore.store import Store
    import memstore.db.compaction as ec

    path, stage, ready, secret = sys.argv[1:5]

    def stop_here():
        pathlib.Path(ready).write_text(stage)
        time.sleep(600)  # killed here by the test

    # The points the test kills at, wrapped in this child process only:
    # "rewritten" (the user's events rewritten, the transaction still open),
    # "committed" (the erasure committed, nothing compacted: the first
    # compaction run) and "vacuumed" (VACUUM done and recorded, the WAL not
    # yet checkpointed: the WAL truncation).
    import memstore.db.backend.sqlite as sqlite_backend
    import memstore.forgetting.forget as forget_module

    def rewrite_then_stop(*args, original=forget_module._apply):
        original(*args)
        stop_here()

    settings = Settings().replace(embedder="hashing", scheduler=False, background_indexer=False)
    with Store.open(path, settings=settings) as s:
        for i in range(20):
            s.capture_turn("alice", "gone", f"turn {i}: I live in {secret}", "noted")
        s.capture_turn("alice", "kept", "My sister is called Yolanda.", "ok")
        s.end_session("alice", "gone")
        s.end_session("alice", "kept")
        s.run_pipeline("alice")
        s.reindex()
        if stage == "rewritten":
            forget_module._apply = rewrite_then_stop
        elif stage == "committed":
            ec.Compactor.run = lambda self, *a, **k: stop_here()
        else:
            sqlite_backend.truncate_wal = lambda *a, **k: stop_here()
        s.forget_session("alice", "gone")
    """
)


def _kill_child_at(stage: str, target: str, tmp_path: Path) -> None:
    ready = tmp_path / f"ready-{stage}"
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, target, stage, str(ready), SECRET],
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 180
        while not ready.exists():
            if proc.poll() is not None:
                err = proc.stderr.read() if proc.stderr else b""
                raise AssertionError(f"child exited early: {err!r}")
            if time.monotonic() > deadline:
                raise AssertionError("child never reached " + stage)
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
        if proc.stderr is not None:
            proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL


def _everything(store: Store) -> str:
    r = store.recall("alice", f"where do I live {SECRET}")
    hits = store.search_conversations("alice", SECRET, strategy="keyword", limit=20)
    mems = store.list_memories("alice", include_retired=True)
    return "\n".join(
        [r.text, store.get_persona("alice") or "", *(h.text for h in hits),
         *(m["content"] for m in mems), *(s["body"] for s in store.list_scenes("alice"))]
    )  # fmt: skip


def _killed_at(stage: str, target: str, backend: str) -> None:
    """The state the kill left, before the next open."""
    if backend == "sqlite":
        assert SECRET.encode() in file_bytes(Path(target))
    # Killed inside the transaction: rolled back, no compaction to finish.
    assert ec.is_pending_at(target) == (stage != "rewritten")


def _after(target: str, backend: str) -> None:
    if backend == "sqlite":
        assert SECRET.encode() not in file_bytes(Path(target))
    assert not ec.is_pending_at(target)


@pytest.mark.reliability
@pytest.mark.slow  # a child process killed mid-erasure, then a reopen
@pytest.mark.parametrize(
    ("backend", "stage"),
    [
        *((engine, stage) for engine in ENGINES for stage in ("rewritten", "committed")),
        # SQLite only: the kill lands between SQLite's VACUUM and its WAL truncation.
        ("sqlite", "vacuumed"),
    ],
    indirect=["backend"],
)
def test_sigkill_during_a_session_forget_leaves_a_state_the_next_open_finishes(
    stage: str, target: str, backend: str, tmp_path: Path, settings: Settings
) -> None:
    _kill_child_at(stage, target, tmp_path)
    _killed_at(stage, target, backend)
    with Store.open(target, settings=settings) as store:
        assert not ec.is_pending(store._db)
        if stage == "rewritten":
            # Rolled back whole: everything is still there and consistent, and
            # the forget, asked again, completes.
            assert SECRET in _everything(store)
            assert not store.read_events(types=["erasure.content"])
            report = store.forget_session("alice", "gone")
            assert report.compacted and report.messages_removed == 40
        assert SECRET not in _everything(store)
        assert "Yolanda" in _everything(store)
        assert [e.type for e in store.read_events(types=["erasure.content"])] == ["erasure.content"]
    _after(target, backend)
