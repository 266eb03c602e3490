"""The optional row filters both keyword paths (FTS5 and PostgreSQL) add to
their SQL: one session of messages, one type or scene of memories.

Values are bound as parameters (they are user input); only the column
names, which are fixed here, become SQL text."""

from __future__ import annotations

from typing import Any, TypedDict


class RowFilter(TypedDict):
    """The filters as keyword arguments of `row_filters` and the keyword searches."""

    session_id: str | None
    type_: str | None
    scene: str | None


def row_filters(
    kind: str,
    params: dict[str, Any],
    *,
    session_id: str | None = None,
    type_: str | None = None,
    scene: str | None = None,
) -> str:
    """`` AND ...`` conditions on the searched rows ``m``; fills ``params``."""
    sql = ""
    if kind == "l0":
        if session_id:
            sql += " AND m.session_id = :s"
            params["s"] = session_id
        return sql
    if type_:
        sql += " AND m.type = :t"
        params["t"] = type_
    if scene:
        sql += " AND m.scene_name = :sc"
        params["sc"] = scene
    return sql
