"""The projection registry: declared inputs and dependencies, checked and obeyed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import pytest
from sqlalchemy import Connection

from memstore import Settings
from memstore.errors import ProjectionError
from memstore.events.log import EventLog, NewEvent, StoredEvent
from memstore.projections.base import Projection, Projections
from memstore.store import Store
from tests.helpers_events import Noted, Renamed

pytestmark = pytest.mark.both_backends

SEEN: list[tuple[str, str, int]] = []  # (projection, event type, what its dependency showed)
COUNTS: dict[str, int] = {}  # the state of "counter", as its dependents read it


class Counter(Projection):
    """Counts test.noted events; its count is what a dependent reads."""

    name: ClassVar[str] = "counter"
    handles: ClassVar[frozenset[str] | None] = frozenset({Noted.TYPE})

    def apply(self, conn: Connection, events: Sequence[StoredEvent]) -> None:
        for e in events:
            COUNTS["n"] = COUNTS.get("n", 0) + 1
            SEEN.append((self.name, e.type, COUNTS["n"]))

    def clear(self, conn: Connection) -> None:
        COUNTS.clear()


class Reader(Projection):
    """Reads the counter's state for every event it applies."""

    name: ClassVar[str] = "reader"
    handles: ClassVar[frozenset[str] | None] = frozenset({Noted.TYPE, Renamed.TYPE})
    depends_on: ClassVar[tuple[str, ...]] = ("counter",)

    def apply(self, conn: Connection, events: Sequence[StoredEvent]) -> None:
        SEEN.extend((self.name, e.type, COUNTS.get("n", 0)) for e in events)


def _registry(*ps: Projection) -> Projections:
    return Projections(EventLog(), ps)


def test_unknown_dependency_is_a_clear_error() -> None:
    with pytest.raises(ProjectionError, match="'reader' depends on unknown 'counter'"):
        _registry(Reader())


def test_a_cycle_is_a_clear_error() -> None:
    class A(Counter):
        name = "a"
        depends_on = ("b",)

    class B(Counter):
        name = "b"
        depends_on = ("a",)

    with pytest.raises(ProjectionError, match="cycle: a -> b -> a"):
        _registry(A(), B())
    reg = _registry(A.__base__())  # type: ignore[misc]
    with pytest.raises(ProjectionError, match="depends on unknown"):
        reg.add(A())
    assert reg.names == ["counter"]  # a refused add leaves the registry as it was


def test_handles_must_be_declared() -> None:
    class Silent(Projection):
        name = "silent"

        def apply(self, conn: Connection, events: Sequence[StoredEvent]) -> None: ...

    with pytest.raises(ProjectionError, match="must declare `handles`"):
        _registry(Silent())


def test_dependencies_apply_first_whatever_the_registration_order() -> None:
    reg = _registry(Reader(), Counter())
    assert reg.names == ["counter", "reader"]
    assert reg.dependencies("reader") == {"counter"}


def test_a_dependent_sees_its_dependency_as_of_each_event(target: str) -> None:
    """Batched application must equal event-at-a-time application: the reader
    sees the counter's state as of each event, never a later one."""
    SEEN.clear()
    COUNTS.clear()
    settings = Settings().replace(embedder="none", scheduler=False, background_indexer=False)
    with Store.open(target, settings=settings, projections=[Reader(), Counter()]) as s:
        s.append(
            [
                NewEvent("t", Renamed("a", "b")),
                NewEvent("t", Noted("x")),
                NewEvent("t", Renamed("c", "d")),
                NewEvent("t", Noted("y")),
                NewEvent("t", Renamed("e", "f")),
            ]
        )
        incremental = list(SEEN)
        assert [(p, n) for p, t, n in incremental if p == "reader"] == [
            ("reader", 0),
            ("reader", 1),
            ("reader", 1),
            ("reader", 2),
            ("reader", 2),
        ]
        SEEN.clear()
        s.rebuild(["reader"])  # replays its dependency too
        assert incremental == SEEN
