"""Group commit: concurrent appends of one process share a write transaction.

A capture returns only once it is durable, and with one transaction per
capture concurrent callers (the threads of a gateway, several agents in one
host) waited for each other one transaction at a time, each paying its own
BEGIN, COMMIT and per-statement set-up. Here the first caller to find no
transaction under way becomes the *leader*: it takes every request waiting
at that moment (its own first), appends them in one transaction through the
kernel, and wakes each caller once the batch is committed. Callers that
arrive meanwhile queue; when the leader's transaction committed it hands the
lead to the oldest of them, which commits everything queued by then. A lone
caller finds nobody waiting and commits alone, with no timer and no thread
of its own (nothing to restart after a ``fork``; a forked child starts with
an empty queue).

What a caller is promised does not change: its call returns only after the
transaction holding its events committed (a kill after the return loses
nothing), and it fails only for its own reasons. When a batch's transaction
fails, nothing of it was written; each of its requests is then committed in
a transaction of its own, so a bad request fails only its own caller.

A caller that cannot wait, an event loop (the gateway's capture routes),
submits with ``submit_later`` and gets a future instead. Nobody's thread is
then waiting to lead, so the committer's own writer thread (started on the
first such call) leads whenever the oldest request queued is one of these:
it takes everything waiting, commits it as a leading caller would, and
resolves each future once the batch is durable. A request's promise is the
same either way; only who waits differs. ``close`` lets the writer commit
what is queued and stops it.

A leader waits a moment for the callers of the transaction before. Eight
threads capturing in a loop otherwise split into two groups that take turns:
the callers of a batch are woken just after the next leader took whatever
was queued, so each transaction held about half of them (6,000 captures
from 8 threads took ~1,320 transactions). So a leader first waits, up to
``GATHER_S``, until as many requests are queued as the last transaction saw
(its own and those queued behind it when it committed), as PostgreSQL's
``commit_delay`` waits only when other transactions are active. A lone caller
never waits (the last transaction saw one request); after a burst the first
lone capture waits once, and the next one expects what that one saw.

Requests build their events inside the transaction (``GroupBuild``), with a
scratch dict shared by the builds of one batch: a build sees the database
before the batch's events are written, so what the batch already claimed (a
capture's message ids) is passed along there.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import Future, InvalidStateError
from typing import Any

from sqlalchemy import Connection

from memstore.errors import StorageError
from memstore.events.log import NewEvent, StoredEvent

log = logging.getLogger(__name__)

# (connection, scratch shared by the batch's builds) -> the events to append.
GroupBuild = Callable[[Connection, dict[Any, Any]], Sequence[NewEvent]]
# Appends a whole batch in one transaction: per build, its stored events, and
# the work to run once the transaction committed (hooks).
CommitMany = Callable[[Sequence[GroupBuild]], tuple[list[list[StoredEvent]], Callable[[], None]]]

# The most requests one transaction takes; the rest wait for the next. Threads
# that wait to commit rarely queue this many, but submissions (a gateway's
# every open request) do: fifty clients through the gateway captured more per
# second, with p99 1.4-1.7x p50 against 1.6-3.2x, at 32 than at 256 (8 did
# worse than either).
MAX_BATCH = 32

# The longest a leader waits for the requests it expects. Long enough for
# the callers of the last batch to come back with their next capture (about
# 0.1 ms of the interpreter each, one at a time), short against a capture's
# latency under load (3-5 ms at 8 threads). 8 threads on a 2-core VM, in one
# process, alternating with no wait, eight rounds: ~760 transactions for
# 6,000 captures against ~1,320, CPU per capture 0.66 of one thread's against
# 0.74 (medians), captures per second 1.47x one thread's against 1.33x.
GATHER_S = 0.001


class _Request:
    __slots__ = ("build", "error", "future", "lead", "stored", "wake")

    def __init__(self, build: GroupBuild, future: Future[list[StoredEvent]] | None = None) -> None:
        self.build = build
        self.future = future
        # A waiting caller's: acquired here, released by whoever finished the
        # request (or handed it the lead). Cheaper than an Event, which is a
        # Condition and a lock.
        self.wake = threading.Lock()
        if future is None:
            self.wake.acquire()
        self.stored: list[StoredEvent] | None = None
        self.error: BaseException | None = None
        self.lead = False

    def result(self) -> list[StoredEvent]:
        if self.error is not None:
            raise self.error
        assert self.stored is not None
        return self.stored

    def finish(self) -> None:
        """Wake the caller waiting for this request, or resolve its future."""
        if self.future is None:
            self.wake.release()
            return
        try:
            if self.error is not None:
                self.future.set_exception(self.error)
            else:
                self.future.set_result(self.result())
        except InvalidStateError:
            pass  # cancelled by its caller, who no longer waits: nothing to tell


class GroupCommitter:
    """Queues requests and commits them in batches (module docstring)."""

    def __init__(self, commit_many: CommitMany) -> None:
        self._commit_many = commit_many
        self._reset()
        _COMMITTERS.add(self)
        # Transactions committed for more than one request, and the requests
        # they held (what the load benchmark and the tests read).
        self.batches = 0
        self.batched = 0

    def _reset(self) -> None:
        # Also in a forked child: the leader, the waiters and the writer
        # thread (and whoever held the lock at the fork) live on in the
        # parent only.
        self._lock = threading.Lock()
        self._waiting: list[_Request] = []
        # A leader waiting for more requests waits on this (``_gather``);
        # ``_want`` is how many it waits for (0: nobody waits).
        self._arrived = threading.Condition(self._lock)
        self._want = 0
        # Requests the last transaction saw: its own, and those queued when
        # it committed. What the next leader expects (``_gather``).
        self._seen = 1
        self._leading = False
        self._in_flight = 0
        # The writer thread: started by the first ``submit_later``; each
        # release of ``_go`` is one lead handed to it (``_writer_turns``),
        # or, once ``_stopping``, the request to stop.
        self._writer: threading.Thread | None = None
        self._go = threading.Semaphore(0)
        self._writer_turns = 0
        self._stopping = False

    @property
    def pending(self) -> tuple[int, int]:
        """(requests in the transaction under way, requests queued behind it)."""
        with self._lock:
            return self._in_flight, len(self._waiting)

    def submit(self, build: GroupBuild) -> list[StoredEvent]:
        """Commit what ``build`` returns, alone or with other waiting requests."""
        req = _Request(build)
        with self._lock:
            self._queue(req)
            lead = not self._leading
            self._leading = True
        if not lead:
            req.wake.acquire()
            if not req.lead:
                return req.result()
        self._lead(req)
        return req.result()

    def submit_later(self, build: GroupBuild) -> Future[list[StoredEvent]]:
        """Queue ``build`` and return at once: the future resolves with what
        ``submit`` would return once its transaction committed (or with its
        error). Raises ``StorageError`` once ``close`` has begun."""
        fut: Future[list[StoredEvent]] = Future()
        req = _Request(build, fut)
        with self._lock:
            if self._stopping:
                raise StorageError("store is closed")
            if self._writer is None or not self._writer.is_alive():
                self._writer = threading.Thread(
                    target=self._write_loop, name="memstore-group-commit", daemon=True
                )
                self._writer.start()
            self._queue(req)
            if not self._leading:
                self._leading = True
                self._give_writer_the_lead()
        return fut

    def close(self, timeout_s: float = 60.0) -> None:
        """Refuse ``submit_later`` from now on, let what is queued commit,
        then stop the writer thread (bounded by ``timeout_s``)."""
        with self._lock:
            self._stopping = True
            writer = self._writer
        if writer is None or writer is threading.current_thread():
            return
        deadline = time.monotonic() + timeout_s
        # Until nobody leads, a queued future may still be handed to the
        # writer; past that point none can be (new ones are refused).
        while time.monotonic() < deadline:
            with self._lock:
                if not (self._leading or self._waiting):
                    break
            time.sleep(0.01)
        self._go.release()
        writer.join(max(0.0, deadline - time.monotonic()))

    def _queue(self, req: _Request) -> None:
        # Under ``_lock``: wakes a gathering leader once it has what it waits for.
        self._waiting.append(req)
        if self._want and len(self._waiting) >= self._want:
            self._want = 0
            self._arrived.notify()

    def _gather(self) -> None:
        # Under ``_lock``, before a leader takes its batch (module docstring).
        want = min(self._seen, MAX_BATCH)
        if len(self._waiting) >= want:
            return
        deadline = time.monotonic() + GATHER_S
        self._want = want
        while len(self._waiting) < want:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self._arrived.wait(left)
        self._want = 0

    def _give_writer_the_lead(self) -> None:
        # Under ``_lock``: the oldest queued request has no thread to lead.
        self._writer_turns += 1
        self._go.release()

    def _write_loop(self) -> None:
        while True:
            self._go.acquire()
            with self._lock:
                lead = self._writer_turns > 0
                if lead:
                    self._writer_turns -= 1
                elif self._stopping:
                    return
            if not lead:
                continue
            try:
                self._lead(None)
            except Exception:  # the writer must outlive any one batch
                log.exception("group commit: the writer thread's batch failed")

    def _lead(self, me: _Request | None) -> None:
        """Commit what is queued (``me``: the calling request, which reads its
        own result; None on the writer thread) and pass the lead on."""
        with self._lock:
            self._gather()
            batch = self._waiting[:MAX_BATCH]
            del self._waiting[:MAX_BATCH]
            self._in_flight = len(batch)
        handed = False

        def hand_off() -> None:
            # The oldest queued request leads the next transaction; the
            # writer thread does when that request's caller is not waiting.
            nonlocal handed
            if handed:
                return
            handed = True
            with self._lock:
                self._in_flight = 0
                self._seen = len(batch) + len(self._waiting)
                nxt = self._waiting[0] if self._waiting else None
                if nxt is None:
                    self._leading = False
                elif nxt.future is not None:
                    self._give_writer_the_lead()
                    nxt = None
            if nxt is not None:
                nxt.lead = True
                nxt.wake.release()

        try:
            self._commit(batch, hand_off)
        finally:
            hand_off()
            for r in batch:
                if r is not me:
                    r.finish()

    def _commit(self, batch: list[_Request], hand_off: Callable[[], None]) -> None:
        try:
            if len(batch) == 1:
                self._commit_alone(batch[0], hand_off)
            elif not self._commit_batch(batch, hand_off):
                # The shared transaction failed and wrote nothing: each
                # request alone, so a failure is its own caller's only.
                for r in batch:
                    self._commit_alone(r, lambda: None)
        except BaseException as e:  # e.g. KeyboardInterrupt in the leader
            for r in batch:
                if r.stored is None and r.error is None:
                    r.error = e

    def _commit_alone(self, r: _Request, hand_off: Callable[[], None]) -> None:
        try:
            results, after = self._commit_many([r.build])
        except BaseException as e:  # handed to its caller, re-raised there
            r.error = e
            return
        r.stored = results[0]
        self._after(after, [r], hand_off)

    def _commit_batch(self, batch: list[_Request], hand_off: Callable[[], None]) -> bool:
        """One transaction for the whole batch; False if it did not commit."""
        try:
            results, after = self._commit_many([r.build for r in batch])
        except Exception as e:
            # Nothing was written; every request is committed alone next, so the
            # one at fault gets this error as its own and the others succeed.
            log.debug(
                "a shared transaction of %d captures failed (%s); committing each alone",
                len(batch),
                type(e).__name__,
            )
            return False
        for r, stored in zip(batch, results, strict=True):
            r.stored = stored
        self.batches += 1
        self.batched += len(batch)
        self._after(after, batch, hand_off)
        return True

    @staticmethod
    def _after(
        after: Callable[[], None], batch: list[_Request], hand_off: Callable[[], None]
    ) -> None:
        # The next transaction may begin while this one's after-commit hooks
        # run (they ran beside other writers before there were batches too);
        # the callers still wait for them, as a lone capture's caller did.
        hand_off()
        try:
            after()
        except BaseException as e:
            # Committed, but what runs after a commit failed: a lone capture
            # raises this to its caller, so every caller of the batch sees it.
            for r in batch:
                r.error = e


_COMMITTERS: weakref.WeakSet[GroupCommitter] = weakref.WeakSet()


def _reset_in_child() -> None:
    for committer in list(_COMMITTERS):
        committer._reset()


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(after_in_child=_reset_in_child)


__all__ = ["GATHER_S", "MAX_BATCH", "GroupBuild", "GroupCommitter"]
