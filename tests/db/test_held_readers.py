"""SQLite read transactions run on connections kept between them: no pool
checkout per read, no snapshot or lock held while idle, a failed read's
connection goes back to the pool, a forked child never reads through its
parent's, and closing the store closes them."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from memstore.config import Settings
from memstore.db.backend.sqlite import truncate_wal
from memstore.db.engine import IDLE_READERS
from memstore.store import Store


def _settings() -> Settings:
    return Settings().replace(embedder="hashing", scheduler=False, background_indexer=False)


def _driver(conn: Any) -> Any:
    return conn.connection.driver_connection


def test_reads_reuse_a_kept_connection_without_a_checkout(tmp_path: Path) -> None:
    with Store.open(tmp_path / "r.db", settings=_settings()) as store:
        db = store._db
        with db.read() as conn:
            first = _driver(conn)
        checkouts: list[object] = []
        event.listen(db.engine.pool, "checkout", lambda *a: checkouts.append(a))
        for _ in range(5):
            with db.read() as conn:
                assert _driver(conn) is first
                assert conn.exec_driver_sql("SELECT 1").scalar() == 1
        assert checkouts == []


def test_kept_connections_hold_no_snapshot(tmp_path: Path) -> None:
    with Store.open(tmp_path / "s.db", settings=_settings()) as store:
        db = store._db
        # Several readers at once, so several are kept.
        barrier = threading.Barrier(4)

        def read() -> None:
            with db.read() as conn:
                conn.exec_driver_sql("SELECT count(*) FROM l0_messages").scalar()
                barrier.wait(30)

        threads = [threading.Thread(target=read) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert len(db._idle) == 4
        for i in range(20):
            store.capture_turn("u", "s", f"turn {i} about the pottery class", "noted")
        # A checkpoint that must wait for every reader of an older snapshot
        # finishes at once: the kept connections hold none.
        with db.exclusive_connection() as conn:
            assert truncate_wal(_driver(conn), time.monotonic() + 5, db.busy_timeout_ms)


def test_a_failed_read_returns_its_connection_to_the_pool(tmp_path: Path) -> None:
    with Store.open(tmp_path / "f.db", settings=_settings()) as store:
        db = store._db
        with db.read() as conn:
            kept = _driver(conn)
        with pytest.raises(ZeroDivisionError), db.read() as conn:
            assert _driver(conn) is kept
            raise ZeroDivisionError
        assert all(_driver(c) is not kept for c in db._idle)
        # The pool has it back, rolled back: the next read works on it.
        with db.read() as conn:
            assert conn.exec_driver_sql("SELECT 1").scalar() == 1


def test_no_more_than_the_bound_are_kept(tmp_path: Path) -> None:
    with Store.open(tmp_path / "b.db", settings=_settings()) as store:
        db = store._db
        n = IDLE_READERS + 3
        barrier = threading.Barrier(n)

        def read() -> None:
            with db.read() as conn:
                conn.exec_driver_sql("SELECT 1").scalar()
                barrier.wait(30)

        threads = [threading.Thread(target=read) for _ in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert len(db._idle) == IDLE_READERS


def test_closing_the_store_closes_the_kept_connections(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "c.db", settings=_settings())
    db = store._db
    with db.read() as conn:
        conn.exec_driver_sql("SELECT 1").scalar()
    kept = list(db._idle)
    assert kept
    store.close()
    assert all(c.closed for c in kept)
    assert db.engine.pool.checkedout() == 0


FORK_CHILD = textwrap.dedent(
    """
    import os, sys
    from memstore.config import Settings
    from memstore.store import Store

    settings = Settings().replace(embedder="hashing", scheduler=False, background_indexer=False)
    with Store.open(sys.argv[1], settings=settings) as store:
        store.capture("u", "s", [{"role": "user", "content": "before the fork", "id": "a"}])
        with store._db.read() as conn:
            parents = conn.connection.driver_connection
        assert store._db._idle
        store._pipeline._timer_thread.submit(lambda: None).result(timeout=60)
        pid = os.fork()
        if pid == 0:  # the child: read and write, then out without cleanup
            code = 1
            try:
                with store._db.read() as conn:
                    mine = conn.connection.driver_connection
                    n = conn.exec_driver_sql("SELECT count(*) FROM l0_messages").scalar()
                store.capture("u", "s", [{"role": "user", "content": "in the child", "id": "b"}])
                code = 0 if (mine is not parents and n == 1) else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, status
        # The parent's connections still work: the child closed none of them.
        with store._db.read() as conn:
            assert conn.exec_driver_sql("SELECT count(*) FROM l0_messages").scalar() == 2
    """
)


def test_a_forked_child_reads_on_connections_of_its_own(tmp_path: Path) -> None:
    # In a process of its own: a pytest worker carries threads of earlier tests,
    # and a fork copies whatever lock one of them holds (SQLite's included).
    done = subprocess.run(
        [sys.executable, "-c", FORK_CHILD, str(tmp_path / "k.db")],
        capture_output=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
