"""Event types used only by the core tests (registered once per process)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memstore.events.types import Event, registry, upcaster


@registry.register
@dataclass(frozen=True)
class Noted(Event):
    TYPE = "test.noted"
    text: str
    n: int = 0


@registry.register
@dataclass(frozen=True)
class Renamed(Event):
    """Stored at version 1 as {"name": ...}; version 2 splits it into first/last."""

    TYPE = "test.renamed"
    VERSION = 2
    first: str
    last: str


@upcaster("test.renamed", 1)
def _renamed_v1(data: dict[str, Any]) -> dict[str, Any]:
    first, _, last = data.pop("name").partition(" ")
    return {**data, "first": first, "last": last}
