"""Events: typed payloads, the registry with upcasters, and the append-only log."""

from memstore.events.log import EventLog, NewEvent, StoredEvent
from memstore.events.types import Event, registry, upcaster

__all__ = ["Event", "EventLog", "NewEvent", "StoredEvent", "registry", "upcaster"]
