"""Writers of several processes take turns on a SQLite file
(memstore.db.writerturn): a waiter is let in when the holder lets go, gives
up after busy_timeout with a LockedError, and a holder that dies leaves
nothing taken.

Two ``WriterTurns`` on one file stand for two processes: each opens the
sidecar on its own, and ``flock`` locks belong to the open file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from memstore import Settings
from memstore.db.writerturn import WriterTurns, turn_path
from memstore.errors import LockedError
from memstore.store import Store

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="flock: POSIX only")


def _settings(**kw: object) -> Settings:
    return Settings().replace(embedder="hashing", scheduler=False, background_indexer=False, **kw)


def test_a_second_writer_waits_for_the_first_and_gives_up_after_its_limit(
    tmp_path: Path,
) -> None:
    a, b = WriterTurns(tmp_path / "m.db"), WriterTurns(tmp_path / "m.db")
    try:
        assert a.acquire(1.0)
        assert turn_path(tmp_path / "m.db").exists()
        assert not b.acquire(0.2)
        a.release()
        # b's flock, still in the kernel for the writer that gave up, gets
        # the lock now and must let it go again: a can take its turn after.
        deadline = time.monotonic() + 30
        while b._pending and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not b._pending
        assert a.acquire(2.0)
        assert not b.acquire(0.2)
        a.release()
        assert b.acquire(10.0)
        assert not a.acquire(0.2)
        b.release()
        waiter = b._waiter
        assert waiter is not None and waiter.is_alive()
    finally:
        a.close()
        b.close()
    waiter.join(30)
    assert not waiter.is_alive()  # the thread b started ends with the close


def test_a_waiting_writer_is_let_in_when_the_holder_lets_go(tmp_path: Path) -> None:
    a, b = WriterTurns(tmp_path / "m.db"), WriterTurns(tmp_path / "m.db")
    got: list[tuple[bool, float]] = []

    def wait() -> None:
        started = time.monotonic()
        got.append((b.acquire(30.0), time.monotonic() - started))

    try:
        assert a.acquire(1.0)
        waiter = threading.Thread(target=wait)
        waiter.start()
        time.sleep(0.3)
        assert not got  # still waiting
        a.release()
        waiter.join(30)
        assert got and got[0][0]
        # Let in by the release, long before its 30 s ran out.
        assert got[0][1] < 15
        b.release()
    finally:
        a.close()
        b.close()


def test_writes_go_on_without_a_turn_where_flock_cannot_be_had(tmp_path: Path) -> None:
    turns = WriterTurns(tmp_path / "no-such-dir" / "m.db")
    assert turns.acquire(0.1)  # the sidecar cannot be created: no turn to take
    assert turns.off
    turns.release()
    turns.close()


HOLDER = """
import sys
from memstore import Settings
from memstore.store import Store
store = Store.open(sys.argv[1], settings=Settings().replace(
    embedder="hashing", scheduler=False, background_indexer=False))
with store._db.write() as conn:
    print("held", flush=True)
    sys.stdin.readline()
print("done", flush=True)
sys.stdin.readline()
"""


def _holder(tmp_path: Path, db: Path) -> subprocess.Popen[str]:
    script = tmp_path / "holder.py"
    script.write_text(HOLDER)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen(
        [sys.executable, str(script), str(db)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "held"
    return child


def _messages(store: Store, user: str) -> int:
    with store._db.read() as conn:
        got = conn.exec_driver_sql("SELECT count(*) FROM l0_messages WHERE user_id = ?", (user,))
        return int(got.scalar_one())


def test_a_capture_waits_for_another_process_s_writer_then_is_stored(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    impatient = Store.open(db, settings=_settings(busy_timeout_ms=300))
    patient = Store.open(db, settings=_settings(busy_timeout_ms=30_000))
    child = _holder(tmp_path, db)
    try:
        assert child.stdin is not None and child.stdout is not None
        with pytest.raises(LockedError, match="another process"):
            impatient.capture_turn("alice", "s1", "I moved to Porto", "Nice")
        assert _messages(patient, "alice") == 0
        stdin = child.stdin

        def let_go() -> None:
            stdin.write("\n")
            stdin.flush()

        done = threading.Timer(0.3, let_go)
        done.start()
        patient.capture_turn("alice", "s1", "I moved to Porto", "Nice")
        done.join()
        assert child.stdout.readline().strip() == "done"
        assert _messages(patient, "alice") == 2
    finally:
        child.kill()
        child.wait(30)
        impatient.close()
        patient.close()


def test_a_killed_writer_leaves_the_turn_free(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    Store.open(db, settings=_settings()).close()
    child = _holder(tmp_path, db)
    child.send_signal(signal.SIGKILL)
    child.wait(30)
    with Store.open(db, settings=_settings(busy_timeout_ms=2000)) as store:
        store.capture_turn("bob", "s1", "hello there", "hi")
        assert _messages(store, "bob") == 2


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_takes_its_own_turn(tmp_path: Path) -> None:
    """The child inherits the descriptor of its parent's open file, and with
    it the parent's lock: it must open its own and wait like any process."""
    db = tmp_path / "m.db"
    with Store.open(db, settings=_settings(busy_timeout_ms=300)) as store:
        store.capture_turn("carol", "s1", "first", "ok")  # opens the turn file
        with store._db.write():
            pid = os.fork()
            if pid == 0:  # pragma: no cover - the child reports by exit code
                code = 3
                try:
                    with store._db.write():
                        code = 1  # let in beside the parent's writer
                except LockedError as e:
                    # Refused by the turn, not by SQLite's lock after it.
                    code = 0 if "another process" in str(e) else 4
                except BaseException:
                    code = 2
                os._exit(code)
            deadline = time.monotonic() + 60
            done, status = 0, 0
            while not done and time.monotonic() < deadline:
                done, status = os.waitpid(pid, os.WNOHANG)
                time.sleep(0.05)
            if not done:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                pytest.fail("the forked child's write neither ran nor gave up")
    assert os.WIFEXITED(status)
    assert os.WEXITSTATUS(status) == 0


FORKING_HOLDER = """
import os, sys, time
from memstore import Settings
from memstore.store import Store
store = Store.open(sys.argv[1], settings=Settings().replace(
    embedder="hashing", scheduler=False, background_indexer=False))
store.capture_turn("dave", "s1", "first", "ok")
with store._db.write() as conn:
    pid = os.fork()
    if pid == 0:
        time.sleep(120)  # a worker that never writes
        os._exit(0)
    print(pid, flush=True)
    time.sleep(120)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_does_not_keep_its_killed_parent_s_turn(tmp_path: Path) -> None:
    """A child keeps what it inherited open; if that included the turn's
    open file, a parent killed mid-transaction would leave the turn taken
    for as long as the child lives."""
    db = tmp_path / "m.db"
    Store.open(db, settings=_settings()).close()
    script = tmp_path / "holder.py"
    script.write_text(FORKING_HOLDER)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    holder = subprocess.Popen(
        [sys.executable, str(script), str(db)], stdout=subprocess.PIPE, text=True, env=env
    )
    assert holder.stdout is not None
    child = int(holder.stdout.readline())
    try:
        holder.send_signal(signal.SIGKILL)
        holder.wait(30)
        with Store.open(db, settings=_settings(busy_timeout_ms=3000)) as store:
            store.capture_turn("erin", "s1", "hello", "hi")  # not LockedError
            assert _messages(store, "erin") == 2
    finally:
        os.kill(child, signal.SIGKILL)
