"""Per-user counts (``users list``, the gateway's ``/v1/users``, the inspector).

A module of its own with nothing heavy imported: ``memstore users list``
reads it without building a Store."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import text

if TYPE_CHECKING:
    from memstore.db.engine import Database

# Users are whoever owns an event; counts come from the projections, which
# always equal a replay of the log.
_USERS = text(
    """
    SELECT e.user_id AS user_id,
           count(*) AS events,
           max(e.recorded_at) AS last_recorded,
           (SELECT count(*) FROM l0_messages m WHERE m.user_id = e.user_id) AS messages,
           (SELECT count(DISTINCT m.session_id) FROM l0_messages m
             WHERE m.user_id = e.user_id) AS sessions,
           (SELECT max(m.occurred_at) FROM l0_messages m WHERE m.user_id = e.user_id)
             AS last_message_at,
           (SELECT count(*) FROM l1_memories l WHERE l.user_id = e.user_id
             AND l.status = 'active' AND l.generation = coalesce(
               (SELECT generation FROM active_generations g WHERE g.user_id = l.user_id), 0))
             AS memories
    FROM events e
    WHERE e.user_id != '' AND e.type != 'erasure.user'
    GROUP BY e.user_id
    ORDER BY e.user_id
    """
)


def users(db: Database) -> list[dict[str, Any]]:
    """One row per user: events, sessions, messages, live memories, last activity."""
    with db.read() as conn:
        return [
            {
                "user_id": r.user_id,
                "sessions": int(r.sessions),
                "messages": int(r.messages),
                "memories": int(r.memories),
                "events": int(r.events),
                "last_message_at": r.last_message_at,
                "last_recorded_at": r.last_recorded,
            }
            for r in conn.execute(_USERS)
        ]


__all__ = ["users"]
