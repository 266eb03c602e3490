"""Every event type memstore stores, in one table.

A log can only read the types its registry knows, so what a store can read
must not depend on which modules a process happened to import: the store
registers this table when it is built (``memstore.assembly.Parts``), and so
does the import of an export. A new event type is added here.
"""

from __future__ import annotations

from memstore.derive.events import (
    GenerationActivated,
    GenerationStarted,
    L1Extracted,
    MemoryForgotten,
    MemoryWritten,
    PersonaUpdated,
    RunFailed,
    ScenesUpdated,
)
from memstore.derive.messages.events import (
    ContentErased,
    MessagesCaptured,
    SessionEnded,
    UserErased,
)
from memstore.events.types import Event, Registry, registry

EVENT_TYPES: tuple[type[Event], ...] = (
    MessagesCaptured,
    SessionEnded,
    UserErased,
    ContentErased,
    L1Extracted,
    MemoryWritten,
    MemoryForgotten,
    ScenesUpdated,
    PersonaUpdated,
    RunFailed,
    GenerationStarted,
    GenerationActivated,
)


def register_all(reg: Registry = registry) -> Registry:
    """``reg`` with every type of ``EVENT_TYPES`` in it (registering twice is a no-op)."""
    for cls in EVENT_TYPES:
        reg.register(cls)
    return reg
