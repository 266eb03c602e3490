"""``Store``: the public face of memstore. One per database file per process.

It wires the pieces together: the database, the event log, the projections
(applied inline in every append's transaction) and, from later layers,
capture, search and the derivation pipeline.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from memstore.config import Settings, default_db_path
from memstore.db import migrate
from memstore.db.engine import Database
from memstore.errors import StorageError
from memstore.events.log import EventLog, NewEvent, StoredEvent
from memstore.projections.base import Projection, Projections, ProjectionStatus
from memstore.projections.stats import StatsProjection
from memstore.timeutil import Clock, system_clock


def default_projections() -> list[Projection]:
    return [StatsProjection()]


class Store:
    def __init__(
        self,
        db: Database,
        settings: Settings,
        *,
        projections: Sequence[Projection] | None = None,
        clock: Clock = system_clock,
    ) -> None:
        self.db = db
        self.settings = settings
        self.clock = clock
        self.log = EventLog(clock=clock)
        self.projections = Projections(
            self.log, projections if projections is not None else default_projections()
        )
        self._closed = False

    # -- lifecycle -------------------------------------------------------------

    @classmethod
    def open(
        cls,
        path: str | Path | None = None,
        *,
        settings: Settings | None = None,
        upgrade: bool = True,
        projections: Sequence[Projection] | None = None,
        clock: Clock = system_clock,
    ) -> Store:
        """Open (creating if needed) the store at ``path``.

        ``path`` defaults to ``$MEMSTORE_DB`` or the user data directory. The
        schema is upgraded to the newest revision unless ``upgrade=False``, in
        which case an out-of-date database raises ``MigrationError``.
        """
        settings = settings or Settings.load()
        target = Path(path).expanduser() if path is not None else default_db_path()
        db = Database(target, busy_timeout_ms=settings.busy_timeout_ms)
        try:
            migrate.ensure_current(db, upgrade_schema=upgrade)
            store = cls(db, settings, projections=projections, clock=clock)
            with db.write() as conn:
                store.projections.bring_current(conn)
        except BaseException:
            db.close()
            raise
        return store

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def path(self) -> Path:
        return self.db.path

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError("store is closed")

    # -- the log ---------------------------------------------------------------

    def append(self, events: Sequence[NewEvent]) -> list[StoredEvent]:
        """Append events and apply inline projections, in one transaction."""
        self._check_open()
        with self.db.write() as conn:
            stored = self.log.append(conn, events)
            self.projections.apply_inline(conn, stored)
        return stored

    def read_events(
        self,
        *,
        after: int = 0,
        types: Sequence[str] | None = None,
        user_id: str | None = None,
        limit: int | None = None,
    ) -> list[StoredEvent]:
        self._check_open()
        with self.db.read() as conn:
            return self.log.read(conn, after=after, types=types, user_id=user_id, limit=limit)

    def read_stream(self, stream: str, *, after_seq: int = 0) -> list[StoredEvent]:
        self._check_open()
        with self.db.read() as conn:
            return self.log.read_stream(conn, stream, after_seq=after_seq)

    def tail(self, n: int = 20) -> list[StoredEvent]:
        self._check_open()
        with self.db.read() as conn:
            head = self.log.last_position(conn)
            return self.log.read(conn, after=max(0, head - n))

    # -- projections -----------------------------------------------------------

    def projection_status(self) -> list[ProjectionStatus]:
        with self.db.read() as conn:
            return self.projections.status(conn)

    def rebuild(
        self, names: Sequence[str] | None = None, progress: Callable[[int], None] | None = None
    ) -> int:
        """Drop and replay projections (all by default); returns events replayed."""
        self._check_open()
        with self.db.write() as conn:
            return self.projections.rebuild(conn, names, progress)

    def catch_up(self) -> dict[str, int]:
        self._check_open()
        out: dict[str, int] = {}
        with self.db.write() as conn:
            for name in self.projections.names:
                out[name] = self.projections.catch_up(conn, name)
        return out

    def event_count(self) -> int:
        with self.db.read() as conn:
            return self.log.last_position(conn)

    def info(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "revision": migrate.current_revision(self.db),
            "events": self.event_count(),
        }
