"""What a store holds per user: counts and last activity (``users list``, the
gateway's ``/v1/users``, ``export --all``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memstore.usercounts import users

if TYPE_CHECKING:
    from memstore.db.engine import Database
    from memstore.store import Store


def list_users(store: Store) -> list[dict[str, Any]]:
    """One row per user: events, sessions, messages, live memories, last activity."""
    return store.list_users()


def users_in(db: Database) -> list[dict[str, Any]]:
    """``list_users`` on the bare database (for commands that open no Store)."""
    return users(db)


def user_ids(store: Store) -> list[str]:
    return [u["user_id"] for u in list_users(store)]


__all__ = ["list_users", "user_ids", "users_in"]
