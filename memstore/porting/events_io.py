"""Events as JSON objects: the shape ``events tail --json``, ``GET /v1/events``
and ``memstore export`` write, and ``import --format memstore`` reads."""

from __future__ import annotations

from typing import Any

from memstore.events.log import StoredEvent

EXPORT_FORMAT = "memstore-events/1"


def event_to_dict(e: StoredEvent) -> dict[str, Any]:
    out: dict[str, Any] = {
        "position": e.position,
        "event_id": e.event_id,
        "stream": e.stream,
        "seq": e.seq,
        "type": e.type,
        "version": e.version,
        "user_id": e.user_id,
        "occurred_at": e.occurred_at,
        "recorded_at": e.recorded_at,
        "payload": e.payload.to_dict(),
    }
    for key in ("idempotency_key", "causation_id", "correlation_id"):
        value = getattr(e, key)
        if value is not None:
            out[key] = value
    return out


__all__ = ["EXPORT_FORMAT", "event_to_dict"]
