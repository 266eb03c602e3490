"""WAL checkpoints run on the checkpoint thread, never inside a commit, and a
forked child writes through a connection of its own."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

from memstore.config import Settings
from memstore.db import checkpoint
from memstore.db.checkpoint import Checkpointer
from memstore.store import Store


def _settings() -> Settings:
    return Settings().replace(embedder="hashing", scheduler=False, background_indexer=False)


def test_commits_do_not_checkpoint_the_thread_does(tmp_path: Path) -> None:
    with Store.open(tmp_path / "c.db", settings=_settings()) as store:
        with store._db.read() as conn:
            auto = conn.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar()
        assert auto == 0
        cp = store._db._checkpointer
        assert isinstance(cp, Checkpointer)
        for i in range(checkpoint.EVERY * 2):
            store.capture_turn("u", "s", f"turn {i} about the pottery class", "noted")
        deadline = time.monotonic() + 60
        while cp.passes == 0:
            assert time.monotonic() < deadline, "no checkpoint pass ran"
            time.sleep(0.01)


FORK_CHILD = textwrap.dedent(
    """
    import os, sys
    from memstore.config import Settings
    from memstore.store import Store

    settings = Settings().replace(embedder="hashing", scheduler=False, background_indexer=False)
    with Store.open(sys.argv[1], settings=settings) as store:
        store.capture("u", "s", [{"role": "user", "content": "before the fork", "id": "a"}])
        held = store._db._held
        # Fork while no other thread is inside SQLite: the capture handed the
        # pipeline's timer thread some work (a fork copies any lock it holds).
        store._pipeline._timer_thread.submit(lambda: None).result(timeout=60)
        pid = os.fork()
        if pid == 0:  # the child: one capture, then out without cleanup
            code = 1
            try:
                store.capture("u", "s", [{"role": "user", "content": "in the child", "id": "b"}])
                code = 0 if store._db._held is not held else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, status
        store.capture("u", "s", [{"role": "user", "content": "after the fork", "id": "c"}])
    """
)


def test_a_forked_child_writes_on_its_own_connection(tmp_path: Path) -> None:
    # In a process of its own: a pytest worker carries threads of earlier tests,
    # and a fork copies whatever lock one of them holds (SQLite's included).
    path = tmp_path / "f.db"
    done = subprocess.run(
        [sys.executable, "-c", FORK_CHILD, str(path)], capture_output=True, timeout=300
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    with Store.open(path, settings=_settings()) as store, store._db.read() as conn:
        ids = [r[0] for r in conn.exec_driver_sql("SELECT message_id FROM l0_messages")]
    assert sorted(ids) == ["a", "b", "c"]
