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

Requests build their events inside the transaction (``GroupBuild``), with a
scratch dict shared by the builds of one batch: a build sees the database
before the batch's events are written, so what the batch already claimed (a
capture's message ids) is passed along there.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import Connection

from memstore.events.log import NewEvent, StoredEvent

log = logging.getLogger(__name__)

# (connection, scratch shared by the batch's builds) -> the events to append.
GroupBuild = Callable[[Connection, dict[Any, Any]], Sequence[NewEvent]]
# Appends a whole batch in one transaction: per build, its stored events, and
# the work to run once the transaction committed (hooks).
CommitMany = Callable[[Sequence[GroupBuild]], tuple[list[list[StoredEvent]], Callable[[], None]]]

# A bound on one transaction's size (memory, and how long a reader's snapshot
# of the WAL grows), far above what a host's threads queue in practice.
MAX_BATCH = 256


class _Request:
    __slots__ = ("build", "error", "lead", "stored", "wake")

    def __init__(self, build: GroupBuild) -> None:
        self.build = build
        # Acquired here, released by whoever finished the request (or handed
        # it the lead): cheaper than an Event, which is a Condition and a lock.
        self.wake = threading.Lock()
        self.wake.acquire()
        self.stored: list[StoredEvent] | None = None
        self.error: BaseException | None = None
        self.lead = False

    def result(self) -> list[StoredEvent]:
        if self.error is not None:
            raise self.error
        assert self.stored is not None
        return self.stored


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
        # Also in a forked child: the leader and the waiters (and whoever
        # held the lock at the fork) live on in the parent only.
        self._lock = threading.Lock()
        self._waiting: list[_Request] = []
        self._leading = False
        self._in_flight = 0

    @property
    def pending(self) -> tuple[int, int]:
        """(requests in the transaction under way, requests queued behind it)."""
        with self._lock:
            return self._in_flight, len(self._waiting)

    def submit(self, build: GroupBuild) -> list[StoredEvent]:
        """Commit what ``build`` returns, alone or with other waiting requests."""
        req = _Request(build)
        with self._lock:
            self._waiting.append(req)
            lead = not self._leading
            self._leading = True
        if not lead:
            req.wake.acquire()
            if not req.lead:
                return req.result()
        self._lead()
        return req.result()

    def _lead(self) -> None:
        with self._lock:
            batch = self._waiting[:MAX_BATCH]
            del self._waiting[:MAX_BATCH]
            self._in_flight = len(batch)
        handed = False

        def hand_off() -> None:
            # The oldest queued request leads the next transaction.
            nonlocal handed
            if handed:
                return
            handed = True
            with self._lock:
                self._in_flight = 0
                nxt = self._waiting[0] if self._waiting else None
                if nxt is None:
                    self._leading = False
            if nxt is not None:
                nxt.lead = True
                nxt.wake.release()

        try:
            self._commit(batch, hand_off)
        finally:
            hand_off()
            for r in batch[1:]:  # batch[0] is the leader itself
                r.wake.release()

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


__all__ = ["MAX_BATCH", "GroupBuild", "GroupCommitter"]
