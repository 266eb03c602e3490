"""The kernel: one database file's event log, projections and the one append path.

Everything that writes events goes through ``Kernel.append`` or
``Kernel.append_if`` (the Store's public append and capture, derivation,
end of session, erasure). One write transaction appends the events, applies
the inline projections, then runs the registered in-transaction hooks (the
pipeline queues work from a capture there); after the commit the on-commit
hooks run (pipeline timers, the background indexer, pending compaction).
``derive/``, ``pipeline/`` and erasure are handed the kernel (or a context
built on it), never the ``Store``: the Store is the public facade over these
parts, the kernel the bottom they share.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, event

from memstore.config import Settings
from memstore.db.compaction import Compactor
from memstore.db.engine import Database
from memstore.errors import StorageError
from memstore.events.groupcommit import GroupBuild, GroupCommitter
from memstore.events.log import EventLog, NewEvent, StoredEvent
from memstore.projections.base import Projection, Projections
from memstore.timeutil import Clock, system_clock

# An in-transaction hook may return a callable: it runs after the commit
# (how a hook hands what it decided in the transaction to its after-commit
# work without thread-locals). Any other result is ignored.
InTransaction = Callable[[Connection, list[StoredEvent]], object]
OnCommit = Callable[[list[StoredEvent]], None]
OnErase = Callable[[Connection, str], object]
# (connection, the (user id, session id) of each capture): before the
# captures' builds make their first read.
BeforeCapture = Callable[[Connection, Sequence[tuple[str, str]]], None]


@dataclass(frozen=True)
class Batch:
    """What an ``append_if`` builder returns when a plain list of events is not enough.

    ``after`` is a floor for the new positions (erasure: positions of deleted
    events are never handed out again); ``then`` runs in the same
    transaction once the events and their projections are written."""

    events: Sequence[NewEvent]
    after: int = 0
    then: InTransaction | None = None


@dataclass(frozen=True)
class Hooks:
    """What runs around an append besides the log and the inline projections."""

    in_transaction: Sequence[InTransaction] = ()
    on_commit: Sequence[OnCommit] = ()


class Kernel:
    def __init__(
        self,
        db: Database,
        settings: Settings,
        projections: Sequence[Projection],
        *,
        clock: Clock = system_clock,
    ) -> None:
        self.db = db
        self.settings = settings
        self.clock = clock
        self.log = EventLog(clock=clock)
        # A rolled-back append must not leave stream heads cached that were
        # never written.
        event.listen(db.engine, "rollback", self._on_rollback)
        self.projections = Projections(self.log, projections)
        # Erasure compaction left pending (crash, reader in the way) is
        # finished on open, close and the next write.
        self.compactor = Compactor(db)
        self._in_transaction: list[InTransaction] = []
        self._on_commit: list[OnCommit] = [lambda _stored: self.compactor.after_write()]
        self.erase_hooks: list[OnErase] = []
        self._before_capture: list[BeforeCapture] = []
        # Held by whole-store rewrites (rebuild, erasure) so that background
        # writers of derived rows (the vector indexer) do not interleave.
        self.exclusive: Callable[[], AbstractContextManager[Any]] = contextlib.nullcontext
        self.closed = False
        self.group = GroupCommitter(self._commit_many)

    def _on_rollback(self, _conn: Any) -> None:
        self.log.forget_cache()

    @property
    def path(self) -> Path:
        return self.db.path

    def close(self) -> None:
        """Refuse appends and reads from now on (work still running in a
        background thread fails with "store is closed" instead of writing).
        Captures queued for the group committer's writer thread commit first."""
        self.group.close()
        self.closed = True

    def check_open(self) -> None:
        if self.closed:
            raise StorageError("store is closed")

    # -- hooks -------------------------------------------------------------------

    def add_hooks(
        self,
        *,
        in_transaction: InTransaction | None = None,
        on_commit: OnCommit | None = None,
        on_erase: OnErase | None = None,
        before_capture: BeforeCapture | None = None,
    ) -> None:
        """Register what runs with every append (``in_transaction``: after the
        inline projections, in the write transaction; ``on_commit``: after the
        commit, before the on-commit hooks registered earlier), inside an
        erasure's transaction (``on_erase``), and when a capture's build
        begins, before its first read (``before_capture``)."""
        if before_capture is not None:
            self._before_capture.append(before_capture)
        if in_transaction is not None:
            self._in_transaction.append(in_transaction)
        if on_commit is not None:
            # Newest first, so the compaction retry registered at construction
            # stays last, as it was before there were hooks.
            self._on_commit.insert(len(self._on_commit) - 1, on_commit)
        if on_erase is not None:
            self.erase_hooks.append(on_erase)

    def before_capture(self, conn: Connection, sessions: Sequence[tuple[str, str]]) -> None:
        """Captures into these (user, session) pairs build their events in
        ``conn``'s write transaction, which has written nothing for them yet:
        the inline projections and the ``before_capture`` hooks send their
        reads ahead (PostgreSQL answers them with the captures' first round
        trip) and note what they must read before the writes."""
        self.projections.read_ahead(conn, list(dict.fromkeys(u for u, _ in sessions)))
        for hook in self._before_capture:
            hook(conn, sessions)

    @property
    def hooks(self) -> Hooks:
        return Hooks(tuple(self._in_transaction), tuple(self._on_commit))

    # -- the one append path -------------------------------------------------------

    def append(
        self, events: Sequence[NewEvent], *, hooks: Hooks | None = None
    ) -> list[StoredEvent]:
        """Append ``events`` and apply the inline projections in one transaction."""
        return self.append_if(lambda _conn: events, hooks=hooks)

    def append_if(
        self,
        build: Callable[[Connection], Sequence[NewEvent] | Batch],
        *,
        hooks: Hooks | None = None,
        exclusive: bool = False,
    ) -> list[StoredEvent]:
        """Append what ``build`` returns, computed inside the write transaction.

        ``build`` sees the database as the append will (e.g. "which of these
        messages are already stored", "was the user erased since this run
        started"); an empty result appends nothing, runs no hook and returns
        ``[]``. ``hooks`` replaces the registered hooks for this append (a
        test driving its own pipeline service); ``exclusive`` holds the
        kernel's exclusive lock (whole-store rewrites).
        """
        self.check_open()
        hooks = hooks if hooks is not None else self.hooks
        lock = self.exclusive() if exclusive else contextlib.nullcontext()
        with lock, self.db.write() as conn:
            self.log.prefetch_head(conn)
            built = build(conn)
            batch = built if isinstance(built, Batch) else Batch(built)
            if not batch.events:
                return []
            stored, deferred = self._write(conn, batch.events, hooks, after=batch.after)
            if batch.then is not None:
                batch.then(conn, stored)
        self._after_commit(stored, deferred, hooks)
        return stored

    def append_grouped(self, build: GroupBuild) -> list[StoredEvent]:
        """``append_if`` for a write that may share its transaction with
        concurrent ones (captures; memstore.events.groupcommit): returns once the
        transaction holding its events committed. ``build`` gets a scratch
        dict shared by the builds of one transaction (what earlier ones
        claimed) and must not return a ``Batch``; the registered hooks run."""
        self.check_open()
        return self.group.submit(build)

    def append_grouped_later(self, build: GroupBuild) -> Future[list[StoredEvent]]:
        """``append_grouped`` for a caller that cannot wait (an event loop):
        returns at once with a future that resolves once the transaction
        holding its events committed (memstore.events.groupcommit)."""
        self.check_open()
        return self.group.submit_later(build)

    def _commit_many(
        self, builds: Sequence[GroupBuild]
    ) -> tuple[list[list[StoredEvent]], Callable[[], None]]:
        """Every build's events in one transaction: what each stored, and
        what to run once it committed (the deferred and on-commit hooks)."""
        self.check_open()
        hooks = self.hooks
        scratch: dict[Any, Any] = {}
        stored: list[StoredEvent] = []
        deferred: list[Callable[[], object]] = []
        with self.db.write() as conn:
            self.log.prefetch_head(conn)
            _read_together(conn, scratch, builds)
            built = [list(b(conn, scratch)) for b in builds]
            flat = [e for events in built for e in events]
            if flat:
                stored, deferred = self._write(conn, flat, hooks)
        out: list[list[StoredEvent]] = []
        start = 0
        for events in built:
            out.append(stored[start : start + len(events)])
            start += len(events)

        def after() -> None:
            if stored:
                self._after_commit(stored, deferred, hooks)

        return out, after

    def _write(
        self, conn: Connection, events: Sequence[NewEvent], hooks: Hooks, *, after: int = 0
    ) -> tuple[list[StoredEvent], list[Callable[[], object]]]:
        """In the write transaction: the log, the inline projections, the
        in-transaction hooks (and what they asked to run after the commit)."""
        stored = self.log.append(conn, events, after=after)
        self.projections.apply_inline(conn, stored)
        deferred: list[Callable[[], object]] = []
        for hook in hooks.in_transaction:
            then = hook(conn, stored)
            if callable(then):
                deferred.append(then)
        return stored, deferred

    @staticmethod
    def _after_commit(
        stored: list[StoredEvent], deferred: list[Callable[[], object]], hooks: Hooks
    ) -> None:
        for run in deferred:
            run()
        for done in hooks.on_commit:
            done(stored)

    # -- reads -------------------------------------------------------------------

    def head(self) -> int:
        """The log's last position (what a derivation run records when it
        starts, so that its appends can tell whether the user was erased)."""
        self.check_open()
        with self.db.read() as conn:
            return self.log.last_position(conn)


def _read_together(conn: Connection, scratch: dict[Any, Any], builds: Sequence[GroupBuild]) -> None:
    # A kind of build may read for all its builds of the batch at once, before
    # any of them runs (``read_together(conn, scratch, builds)`` on its class:
    # a capture's stored ids): one statement per batch instead of one per
    # build, and on PostgreSQL one round trip.
    kinds: dict[Any, list[GroupBuild]] = {}
    for b in builds:
        reader = getattr(type(b), "read_together", None)
        if reader is not None:
            kinds.setdefault(reader, []).append(b)
    for reader, group in kinds.items():
        reader(conn, scratch, group)


__all__ = ["Batch", "BeforeCapture", "Hooks", "InTransaction", "Kernel", "OnCommit", "OnErase"]
