"""SQL that differs between SQLite and PostgreSQL, behind one call.

The parts write portable SQLAlchemy Core where they can; these helpers cover
the few places where the two engines spell the same thing differently.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, func
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.sql.elements import ColumnElement


def driver_sql(conn: Connection, sql: str) -> str:
    """SQL for ``exec_driver_sql`` written with "?" placeholders, in the form this
    connection's driver takes (psycopg: "%s"). The text must hold no other "?"
    or "%": ``exec_driver_sql`` hands it to the driver as it is."""
    return sql if conn.dialect.paramstyle == "qmark" else sql.replace("?", "%s")


def driver_rows(conn: Connection, sql: str, params: Any = ()) -> list[Any]:
    """All rows of ``exec_driver_sql(sql, params)`` as the driver returns them
    (tuples). The statement still passes SQLAlchemy's execution events; only
    its per-row result objects are skipped, which on a hot read cost more than
    the statement (keyword search)."""
    result = conn.exec_driver_sql(sql, params)
    try:
        cursor = result.cursor
        return [] if cursor is None else list(cursor.fetchall())
    finally:
        result.close()


def json_text(conn: Connection, column: Any, key: str) -> ColumnElement[Any]:
    """The text of top-level ``key`` in a JSON text column (events.payload)."""
    if conn.dialect.name == "postgresql":
        return column.cast(JSONB)[key].astext  # type: ignore[no-any-return]
    return func.json_extract(column, f"$.{key}")
