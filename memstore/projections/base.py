"""Projection contract and the runner that keeps projections at the log's head.

A projection owns some tables and a checkpoint row. Its ``apply`` must be a
pure function of the events it is given (no clock, no randomness, no LLM):
that is what makes "incremental state == rebuilt state" hold, and the
property test in ``tests/test_projection_invariant.py`` checks it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import ClassVar

from sqlalchemy import Connection, Table, delete, func, select
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from memstore.db.schema import events as ev_t
from memstore.db.schema import projection_checkpoints as cp_t
from memstore.errors import NotFoundError, ProjectionError
from memstore.events.log import EventLog, StoredEvent

Progress = Callable[[int], None]


class Projection(ABC):
    name: ClassVar[str]
    version: ClassVar[int] = 1
    # Event types this projection reads; None means every type.
    handles: ClassVar[frozenset[str] | None]
    tables: ClassVar[tuple[Table, ...]] = ()
    # Inline projections apply inside the append's transaction.
    inline: ClassVar[bool] = True

    @abstractmethod
    def apply(self, conn: Connection, events: Sequence[StoredEvent]) -> None: ...

    def clear(self, conn: Connection) -> None:
        """Empty everything this projection owns (children before parents)."""
        for t in reversed(self.tables):
            conn.execute(delete(t))

    def wants(self, ev: StoredEvent) -> bool:
        return self.handles is None or ev.type in self.handles


@dataclass(frozen=True)
class ProjectionStatus:
    name: str
    inline: bool
    position: int
    head: int
    stored_version: int
    code_version: int

    # Events of the types this projection handles that it has not applied yet.
    pending: int = 0

    @property
    def lag(self) -> int:
        return self.pending

    @property
    def needs_rebuild(self) -> bool:
        return self.stored_version != self.code_version


class Projections:
    def __init__(self, log: EventLog, projections: Iterable[Projection] = ()) -> None:
        self.log = log
        self._items: dict[str, Projection] = {}
        for p in projections:
            self.add(p)

    def add(self, p: Projection) -> None:
        if p.name in self._items:
            raise ProjectionError(f"projection {p.name!r} registered twice")
        self._items[p.name] = p

    def get(self, name: str) -> Projection:
        try:
            return self._items[name]
        except KeyError:
            raise NotFoundError(
                f"no projection named {name!r}; known: {', '.join(sorted(self._items))}"
            ) from None

    @property
    def names(self) -> list[str]:
        return list(self._items)

    @property
    def inline(self) -> list[Projection]:
        return [p for p in self._items.values() if p.inline]

    # -- checkpoints ---------------------------------------------------------

    @staticmethod
    def checkpoint(conn: Connection, name: str) -> tuple[int, int]:
        row = conn.execute(
            select(cp_t.c.position, cp_t.c.version).where(cp_t.c.name == name)
        ).first()
        return (int(row[0]), int(row[1])) if row else (0, 0)

    @staticmethod
    def set_checkpoint(conn: Connection, name: str, position: int, version: int) -> None:
        stmt = sqlite_insert(cp_t).values(name=name, position=position, version=version)
        stmt = stmt.on_conflict_do_update(
            index_elements=[cp_t.c.name], set_={"position": position, "version": version}
        )
        conn.execute(stmt)

    # -- applying ------------------------------------------------------------

    def apply_inline(self, conn: Connection, stored: Sequence[StoredEvent]) -> None:
        """Called by every append, in its transaction, with what it appended.

        Only projections that handled something move their checkpoint: events
        of other types change nothing for them, and catching up reads only the
        types a projection handles, so a checkpoint behind such events is
        still exact — and appends do not pay one checkpoint write per projection.
        """
        fresh = [e for e in stored if not e.duplicate]
        if not fresh:
            return
        for p in self.inline:
            mine = [e for e in fresh if p.wants(e)]
            if mine:
                p.apply(conn, mine)
                self.set_checkpoint(conn, p.name, mine[-1].position, p.version)

    def catch_up(self, conn: Connection, name: str, *, batch: int = 2000) -> int:
        """Apply everything after the projection's checkpoint; returns events applied."""
        p = self.get(name)
        position, _ = self.checkpoint(conn, name)
        head = self.log.last_position(conn)
        applied = 0
        types = None if p.handles is None else sorted(p.handles)
        for chunk in self.log.iter_all(conn, after=position, batch=batch, types=types):
            p.apply(conn, chunk)
            applied += len(chunk)
        if head != position:
            self.set_checkpoint(conn, name, head, p.version)
        return applied

    def rebuild(
        self, conn: Connection, names: Sequence[str] | None = None, progress: Progress | None = None
    ) -> int:
        """Empty the projections, reset their checkpoints and replay the log in one pass.

        Runs inside the caller's write transaction: readers keep seeing the old
        state until it commits.
        """
        targets = [self.get(n) for n in (names or self.names)]
        for p in targets:
            p.clear(conn)
        head = self.log.last_position(conn)
        wanted: set[str] | None = set()
        for p in targets:
            if p.handles is None:
                wanted = None
                break
            assert wanted is not None
            wanted |= p.handles
        seen = 0
        for chunk in self.log.iter_all(conn, types=None if wanted is None else sorted(wanted)):
            for p in targets:
                mine = [e for e in chunk if p.wants(e)]
                if mine:
                    p.apply(conn, mine)
            seen += len(chunk)
            if progress:
                progress(len(chunk))
        for p in targets:
            self.set_checkpoint(conn, p.name, head, p.version)
        return seen

    def status(self, conn: Connection) -> list[ProjectionStatus]:
        head = self.log.last_position(conn)
        out = []
        for p in self._items.values():
            pos, ver = self.checkpoint(conn, p.name)
            q = select(func.count()).select_from(ev_t).where(ev_t.c.position > pos)
            if p.handles is not None:
                q = q.where(ev_t.c.type.in_(sorted(p.handles)))
            pending = int(conn.execute(q).scalar_one())
            out.append(ProjectionStatus(p.name, p.inline, pos, head, ver, p.version, pending))
        return out

    def bring_current(self, conn: Connection) -> list[str]:
        """On open: rebuild projections whose code version changed, catch up the rest."""
        rebuilt = [s.name for s in self.status(conn) if s.needs_rebuild]
        if rebuilt:
            self.rebuild(conn, rebuilt)
        for p in self._items.values():
            if p.name not in rebuilt:
                self.catch_up(conn, p.name)
        return rebuilt
