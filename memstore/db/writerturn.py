"""Writers of several processes on one SQLite file take turns promptly.

SQLite lets one writer in at a time. A process that finds the file locked
waits in SQLite's busy handler, which sleeps 1, 2, 5, 10 ... up to 100 ms
between tries and has no queue: whoever tries at the right moment gets in.
Eight capturing threads beside three capturing processes on one file saw
p99 340-740 ms, 62-217x their p50, and fewer captures a second than one
thread alone, while a process's next capture, a fraction of a millisecond
after its own commit, found the lock free (BENCHMARKS.md, "Beside other
processes").

So before its ``BEGIN IMMEDIATE`` a memstore writer takes an exclusive
``flock`` on a sidecar file, ``<file>-writer``. A writer that finds it taken
sleeps in the kernel and wakes the moment the holder lets go, with no
back-off. Waiting has a limit (``busy_timeout``) and ``flock`` has none, so
the wait runs on a thread of its own (:class:`WriterTurns`): the writer waits
for that thread's answer as long as ``busy_timeout`` allows, and a lock the
thread obtains for a writer that gave up is let go at once.

SQLite's own lock is still what keeps writers apart; this only orders the
writers that take it. Others (another program, an older memstore, the WAL
checkpoint's connection) meet SQLite's lock as before, and where ``flock``
is missing or refused (Windows, some network file systems, a directory this
process cannot write) writes go on without the turn.

The kernel drops a ``flock`` when the last descriptor of the open file that
holds it closes, so a process that dies mid-transaction never leaves the
turn taken. A forked child opens its own descriptor: the one it inherited
shares its parent's open file, and its lock with it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import weakref
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["WriterTurns", "turn_path"]

log = logging.getLogger(__name__)


# Every instance of the process, so that a forked child closes what it
# inherited at once: a descriptor of the parent's open file keeps that file,
# and a lock the parent holds on it, alive for as long as the child keeps it
# (a parent killed mid-transaction would leave its turn taken until then).
_ALL: weakref.WeakSet[WriterTurns] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for turns in list(_ALL):
        turns.forget_inherited()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def turn_path(db_path: Path) -> Path:
    """The sidecar file whose ``flock`` is the writers' turn."""
    return Path(f"{db_path}-writer")


class WriterTurns:
    """This process's place in the writers' queue of one SQLite file.

    Callers serialise :meth:`acquire` / :meth:`release` themselves (the
    database's per-process write lock): at most one writer of the process
    asks at a time."""

    def __init__(self, db_path: Path) -> None:
        self.path = turn_path(db_path)
        self.off = fcntl is None
        self._pid = 0
        self._fd = -1
        self._waiter_fd = -1
        self._gen = 0  # which descriptor a waiter thread serves
        self._reset()
        _ALL.add(self)

    def forget_inherited(self) -> None:
        """In a forked child: close the parent's descriptors (the child opens
        its own at its first write)."""
        for fd in (self._fd, self._waiter_fd):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._fd = self._waiter_fd = -1
        self._pid = 0
        self._reset()

    def _reset(self) -> None:
        # Fresh locks and events too: a fork may have copied them mid-use.
        self._state = threading.Lock()
        self._request = threading.Event()
        self._granted = threading.Event()
        self._pending = False  # the waiter thread is inside a blocking flock
        self._wanted = False  # and a writer is waiting for its answer
        self._waiter: threading.Thread | None = None
        self._gen += 1

    def _file(self) -> int:
        """This process's descriptor of the turn file (-1: writes go without)."""
        pid = os.getpid()
        if self._pid == pid:
            return self._fd
        if self._pid:
            self.forget_inherited()  # where fork hooks did not run
        self._pid, self._fd = pid, -1
        if self.off:
            return -1
        try:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as e:
            self._give_up(e)
        return self._fd

    def _give_up(self, err: OSError) -> None:
        log.info("%s: writers of several processes wait in SQLite instead (%s)", self.path, err)
        self.off = True

    def acquire(self, timeout_s: float) -> bool:
        """Take the turn; False if another process held it ``timeout_s``
        seconds. True at once when there is no turn to take (see ``off``)."""
        fd = self._file()
        if fd < 0:
            return True
        with self._state:
            if not self._pending:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    return True
                except BlockingIOError:
                    pass
                except OSError as e:
                    self._give_up(e)
                    return True
                self._pending = True
                self._granted.clear()
                self._start_waiter()
                self._request.set()
            # Else a wait for a writer that gave up is still in the kernel:
            # its answer is this writer's now.
            self._wanted = True
        if self._granted.wait(timeout_s):
            return True
        with self._state:
            if self._granted.is_set():  # granted as the wait ran out
                return True
            self._wanted = False
        return False

    def release(self) -> None:
        """Let the next writer of any process in."""
        if self._fd >= 0 and not self.off and self._pid == os.getpid():
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _start_waiter(self) -> None:
        if self._waiter is None or not self._waiter.is_alive():
            # Its own descriptor of the same open file (so the same lock):
            # closing the store's never pulls one from under it.
            self._waiter_fd = os.dup(self._fd)
            self._waiter = threading.Thread(
                target=self._wait_loop,
                args=(self._waiter_fd, self._gen),
                name="memstore-writer-turn",
                daemon=True,
            )
            self._waiter.start()

    def _wait_loop(self, fd: int, gen: int) -> None:
        try:
            self._wait_for_requests(fd, gen)
        finally:
            with self._state:
                if self._waiter_fd == fd:
                    self._waiter_fd = -1
            os.close(fd)

    def _wait_for_requests(self, fd: int, gen: int) -> None:
        request, granted = self._request, self._granted
        while True:
            request.wait()
            request.clear()
            if gen != self._gen:  # closed while idle
                return
            failed: OSError | None = None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except OSError as e:
                failed = e
            with self._state:
                if gen != self._gen:  # closed meanwhile: the descriptor is not ours
                    return
                self._pending = False
                if failed is not None:
                    # The writer goes ahead without the turn, as ``off`` does.
                    self._give_up(failed)
                    granted.set()
                elif self._wanted:
                    self._wanted = False
                    granted.set()
                else:
                    fcntl.flock(fd, fcntl.LOCK_UN)

    def close(self) -> None:
        """Close the descriptor and end the waiter thread (one inside a
        ``flock``, which cannot be interrupted, ends once that returns)."""
        with self._state:
            fd, self._fd = self._fd, -1
            self._gen += 1
            self._request.set()  # an idle waiter thread ends
        if fd >= 0 and self._pid == os.getpid():
            os.close(fd)
