"""Projection contract and the runner that keeps projections at the log's head.

A projection owns some tables and a checkpoint row. Its ``apply`` must be a
pure function of the events it is given (no clock, no randomness, no LLM):
that is what makes "incremental state == rebuilt state" hold, and the
property test in ``tests/projections/test_projection_invariant.py`` checks it.

Each projection declares what it reads:

- ``handles``: the event types it is fed (None: every type). Nothing else
  reaches its ``apply``, on an append, a catch-up or a rebuild.
- ``depends_on``: projections whose tables its ``apply`` reads. The registry
  rejects unknown names and cycles, applies and rebuilds in dependency order,
  and guarantees that when a projection applies event *e*, each dependency
  has applied exactly the events up to and including *e* — the state an
  event-at-a-time replay would show — however the events are batched (see
  ``Projections._segments``). Rebuilding a projection replays its
  dependencies too, since their tables must pass through the same history.
"""

from __future__ import annotations

import gc
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import ClassVar

from sqlalchemy import Connection, Table, delete, func, select

from memstore.db import backend, rawexec
from memstore.db.schema import events as ev_t
from memstore.db.schema import projection_checkpoints as cp_t
from memstore.errors import NotFoundError, ProjectionError
from memstore.events.log import EventLog, StoredEvent

_UPSERT_CHECKPOINT = (
    "INSERT INTO projection_checkpoints (name, position, version) VALUES (?, ?, ?) "
    "ON CONFLICT (name) DO UPDATE SET position = excluded.position, version = excluded.version"
)

Progress = Callable[[int], None]

# Events per replay read: large enough that per-batch statements (one
# executemany per table) amortise, small enough to bound memory.
REPLAY_BATCH = 5000


_gc_lock = threading.Lock()
_gc_pauses = 0
_gc_was_enabled = False


@contextmanager
def paused_gc() -> Iterator[None]:
    """Python's cyclic garbage collector off while a replay runs.

    A replay allocates a dozen containers per event, so the collector ran
    every few hundred events, and each older-generation pass walked every
    object the process holds: a third of the decode time at 100k messages.
    The replay's objects are freed by reference counting (they hold no
    cycles); the collector is turned back on — if it was on — when the last
    of any concurrent replays in this process ends, and catches up then.
    """
    global _gc_pauses, _gc_was_enabled
    with _gc_lock:
        if _gc_pauses == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_pauses += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_pauses -= 1
            if _gc_pauses == 0 and _gc_was_enabled:
                gc.enable()


def bulk_load(
    conn: Connection, deferred_indexes: Sequence[str], fts_tables: Sequence[str] = ()
) -> AbstractContextManager[None]:
    """Around a replay: whatever the backend does to load many rows cheaply
    (SQLite: a larger page cache and FTS5 term buffer for ``fts_tables``, and
    ``deferred_indexes`` dropped, then created again at the end — all inside
    the caller's transaction, so a rebuild that fails or is killed leaves
    them as they were)."""
    return backend.of(conn).bulk_load(conn, deferred_indexes, fts_tables)


class Projection(ABC):
    name: ClassVar[str]
    version: ClassVar[int] = 1
    # Event types this projection reads; None means every type. Required.
    handles: ClassVar[frozenset[str] | None]
    # Names of projections whose tables ``apply`` reads.
    depends_on: ClassVar[tuple[str, ...]] = ()
    tables: ClassVar[tuple[Table, ...]] = ()
    # Inline projections apply inside the append's transaction.
    inline: ClassVar[bool] = True
    # Indexes on ``tables`` that ``apply`` never reads through (nor does any
    # other projection's): a rebuild on SQLite drops them before replaying and
    # creates them again before it commits — one sort instead of a B-tree
    # insert per row. Names missing from the file are ignored.
    replay_deferred_indexes: ClassVar[tuple[str, ...]] = ()
    # Full-text tables ``apply`` fills: a rebuild on SQLite lets FTS5 buffer
    # more terms before writing a segment (memstore.db.backend.sqlite).
    replay_fts_tables: ClassVar[tuple[str, ...]] = ()

    @abstractmethod
    def apply(self, conn: Connection, events: Sequence[StoredEvent]) -> None: ...

    def apply_live(self, conn: Connection, events: Sequence[StoredEvent]) -> None:
        """``apply`` for events just appended (not a replay or a catch-up):
        a projection may leave derived rows to a background worker here that
        a replay must write at once."""
        self.apply(conn, events)

    def read_ahead(self, conn: Connection, user_ids: Sequence[str]) -> None:
        """An append for ``user_ids`` is coming in this write transaction:
        send ahead the reads ``apply_live`` will make (PostgreSQL answers
        them with an earlier round trip: memstore.db.pgbatch). Nothing by
        default."""
        return None

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
            self._register(p)
        self._resolve()

    def add(self, p: Projection) -> None:
        self._register(p)
        try:
            self._resolve()
        except ProjectionError:
            del self._items[p.name]
            self._resolve()
            raise

    def _register(self, p: Projection) -> None:
        if p.name in self._items:
            raise ProjectionError(f"projection {p.name!r} registered twice")
        if not hasattr(p, "handles"):
            raise ProjectionError(
                f"projection {p.name!r} must declare `handles` (its event types, or None for all)"
            )
        self._items[p.name] = p

    def _resolve(self) -> None:
        """Check the declared dependencies and fix the order everything runs in:
        dependencies first, otherwise the order of registration."""
        for p in self._items.values():
            unknown = [d for d in p.depends_on if d not in self._items]
            if unknown:
                raise ProjectionError(
                    f"projection {p.name!r} depends on unknown {', '.join(map(repr, unknown))}; "
                    f"known: {', '.join(sorted(self._items))}"
                )
        order: list[str] = []
        state: dict[str, int] = {}  # 1: on the current path, 2: placed

        def visit(name: str, path: list[str]) -> None:
            if state.get(name) == 2:
                return
            if state.get(name) == 1:
                cycle = [*path[path.index(name) :], name]
                raise ProjectionError(f"projection dependency cycle: {' -> '.join(cycle)}")
            state[name] = 1
            for dep in self._items[name].depends_on:
                visit(dep, [*path, name])
            state[name] = 2
            order.append(name)

        for name in self._items:
            visit(name, [])
        self._order = [self._items[n] for n in order]
        # Transitive dependencies and dependents, for rebuild closures and batching.
        deps: dict[str, set[str]] = {}
        for p in self._order:
            deps[p.name] = set(p.depends_on).union(*(deps[d] for d in p.depends_on))
        self._deps = deps
        self._dependents = {n: {m for m in deps if n in deps[m]} for n in deps}
        self._by_type: dict[str, tuple[list[Projection], frozenset[str], frozenset[str]]] = {}

    def get(self, name: str) -> Projection:
        try:
            return self._items[name]
        except KeyError:
            raise NotFoundError(
                f"no projection named {name!r}; known: {', '.join(sorted(self._items))}"
            ) from None

    @property
    def names(self) -> list[str]:
        """Every projection, dependencies before their dependents."""
        return [p.name for p in self._order]

    @property
    def inline(self) -> list[Projection]:
        return [p for p in self._order if p.inline]

    def dependencies(self, name: str) -> set[str]:
        """Everything ``name`` depends on, directly or through another projection."""
        self.get(name)
        return set(self._deps[name])

    # -- checkpoints ---------------------------------------------------------

    @staticmethod
    def checkpoint(conn: Connection, name: str) -> tuple[int, int]:
        row = conn.execute(
            select(cp_t.c.position, cp_t.c.version).where(cp_t.c.name == name)
        ).first()
        return (int(row[0]), int(row[1])) if row else (0, 0)

    @staticmethod
    def set_checkpoint(conn: Connection, name: str, position: int, version: int) -> None:
        Projections.set_checkpoints(conn, [(name, position, version)])

    @staticmethod
    def set_checkpoints(conn: Connection, rows: Sequence[tuple[str, int, int]]) -> None:
        """Upsert ``(name, position, version)`` rows in one driver-level
        statement. Every capture moves three checkpoints; an SQLAlchemy
        ``insert().on_conflict_do_update()`` built per checkpoint cost about
        0.3 ms CPU each (statement construction and cache key), most of the
        projections' share of an idle capture (BENCHMARKS.md, "Capture and search")."""
        if rows:
            rawexec.run_many(conn, _UPSERT_CHECKPOINT, rows)

    # -- applying ------------------------------------------------------------

    def _routing(self, type_: str) -> tuple[list[Projection], frozenset[str], frozenset[str]]:
        """For one event type: the projections it feeds (in order), their names,
        and the names of everything that depends on them."""
        got = self._by_type.get(type_)
        if got is None:
            feeds = [p for p in self._order if p.handles is None or type_ in p.handles]
            names = frozenset(p.name for p in feeds)
            after = frozenset().union(*(self._dependents[p.name] for p in feeds))
            got = self._by_type[type_] = (feeds, names, after)
        return got

    def _segments(self, events: Sequence[StoredEvent]) -> list[Sequence[StoredEvent]]:
        """Cut a batch where batching could show a projection the future.

        Within a segment each projection applies its events in one call,
        dependencies first. That is only exact if no dependency handles an
        event later in the segment than one its dependent already handled —
        else the dependent would read the dependency's state *after* that
        later event. So a segment ends just before such an event. A log of
        captures (no projection reading another) is one segment.
        """
        out: list[Sequence[StoredEvent]] = []
        start = 0
        touched: set[str] = set()
        for i, ev in enumerate(events):
            _, names, after = self._routing(ev.type)
            if after and not after.isdisjoint(touched):
                out.append(events[start:i])
                start, touched = i, set()
            touched |= names
        out.append(events[start:])
        return out

    def _apply(
        self,
        conn: Connection,
        events: Sequence[StoredEvent],
        targets: Sequence[Projection],
        *,
        live: bool = False,
    ) -> set[str]:
        """Feed ``events`` to ``targets`` (in dependency order), each only the
        types it handles; returns the names of those that got any. ``live``:
        just appended (``apply_live``)."""
        wanted = {p.name for p in targets}
        fed: set[str] = set()
        for seg in self._segments(events):
            if len(seg) == 1:
                feeds = [p for p in self._routing(seg[0].type)[0] if p.name in wanted]
                for p in feeds:
                    (p.apply_live if live else p.apply)(conn, seg)
                    fed.add(p.name)
                continue
            # One pass for the segment's types, so a projection that handles
            # none of them (most, in a log of captures) costs no scan of it.
            present = {e.type for e in seg}
            for p in targets:
                if p.handles is None or present <= p.handles:
                    mine = seg
                elif present.isdisjoint(p.handles):
                    continue
                else:
                    mine = [e for e in seg if e.type in p.handles]
                if mine:
                    (p.apply_live if live else p.apply)(conn, mine)
                    fed.add(p.name)
        return fed

    def read_ahead(self, conn: Connection, user_ids: Sequence[str]) -> None:
        """Each inline projection's ``read_ahead`` (nothing to do where
        statements run one at a time: SQLite, or a watched engine)."""
        if not rawexec.reads_ahead(conn):
            return
        for p in self.inline:
            p.read_ahead(conn, user_ids)

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
        inline = self.inline
        moved = []
        for name in self._apply(conn, fresh, inline, live=True):
            p = self._items[name]
            last = fresh[-1] if p.handles is None else [e for e in fresh if p.wants(e)][-1]
            moved.append((name, last.position, p.version))
        self.set_checkpoints(conn, moved)

    def catch_up(self, conn: Connection, name: str, *, batch: int = 2000) -> int:
        """Apply everything after the projection's checkpoint; returns events applied.

        Its dependencies must be current (``bring_current`` and ``Store.catch_up``
        go in dependency order)."""
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

        The projections named are rebuilt with everything they depend on (their
        tables must pass through the same history). Runs inside the caller's
        write transaction: readers keep seeing the old state until it commits.
        """
        chosen = {self.get(n).name for n in (names or self.names)}
        chosen |= set().union(*(self._deps[n] for n in chosen))
        targets = [p for p in self._order if p.name in chosen]
        for p in reversed(targets):  # dependents first, should one hold references
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
        types = None if wanted is None else sorted(wanted)
        deferred = [i for p in targets for i in p.replay_deferred_indexes]
        fts = [t for p in targets for t in p.replay_fts_tables]
        with bulk_load(conn, deferred, fts), paused_gc():
            for chunk in self.log.iter_all(conn, types=types, batch=REPLAY_BATCH):
                self._apply(conn, chunk, targets)
                seen += len(chunk)
                if progress:
                    progress(len(chunk))
        for p in targets:
            self.set_checkpoint(conn, p.name, head, p.version)
        return seen

    def status(self, conn: Connection) -> list[ProjectionStatus]:
        head = self.log.last_position(conn)
        out = []
        for p in self._order:
            pos, ver = self.checkpoint(conn, p.name)
            q = select(func.count()).select_from(ev_t).where(ev_t.c.position > pos)
            if p.handles is not None:
                q = q.where(ev_t.c.type.in_(sorted(p.handles)))
            pending = int(conn.execute(q).scalar_one())
            out.append(ProjectionStatus(p.name, p.inline, pos, head, ver, p.version, pending))
        return out

    def bring_current(self, conn: Connection) -> list[str]:
        """On open: rebuild projections whose code version changed (and what
        depends on them, whose state was computed from theirs), catch up the rest."""
        stale = {s.name for s in self.status(conn) if s.needs_rebuild}
        stale |= set().union(*(self._dependents[n] for n in stale))
        replayed = stale.union(*(self._deps[n] for n in stale))
        if stale:
            self.rebuild(conn, sorted(stale))
        for p in self._order:
            if p.name not in replayed:
                self.catch_up(conn, p.name)
        return [n for n in self.names if n in replayed]
