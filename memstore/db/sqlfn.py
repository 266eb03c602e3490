"""Statements on the driver's own connection, whichever driver it is.

The hot read and capture paths run many small statements; these helpers run
them on the DB-API connection when that is safe, in its placeholder style.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from sqlalchemy import Connection, exc

from memstore.db import pgbatch
from memstore.errors import InvalidInputError

T = TypeVar("T")

# Prepared statements each DB-API SQLite connection keeps (the driver's
# ``cached_statements``; its default is 128). sqlean.py and pysqlite3 carry the
# sqlite3 module's cache from before Python 3.11: entries are ordered by use
# count, a new one joins at the tail, and a full cache evicts the tail, so a
# statement first run after the cache filled is evicted by the next new one
# and prepared again on every run. Creating a store (its migrations) runs
# ~140 statements on its first connection, the write connection; every
# capture of that process then prepared its ~14 (~0.3 ms of its ~0.8 ms of
# CPU). Room for every statement text memstore
# writes (``in_list`` keeps lists of values from multiplying them), ~4 KB each
# when used.
STATEMENT_CACHE = 1024


def driver_sql(conn: Connection, sql: str) -> str:
    """SQL for ``exec_driver_sql`` written with "?" placeholders, in the form this
    connection's driver takes (psycopg: "%s"). The text must hold no other "?"
    or "%": ``exec_driver_sql`` hands it to the driver as it is."""
    return sql if conn.dialect.paramstyle == "qmark" else sql.replace("?", "%s")


def in_list(values: Sequence[T]) -> tuple[str, list[T]]:
    """Placeholders for ``IN (...)`` over ``values`` (not empty) and their
    parameters, the list padded with its last value to a power of two.

    Every statement text is a prepared statement in the driver's cache
    (``STATEMENT_CACHE``): ids written into the text made a new statement per
    call, and a list of every length one per length. Padded, a list of up to
    1,024 values takes one of 11 texts; a repeated value changes nothing in
    an ``IN``."""
    out = list(values)
    if not out:
        raise InvalidInputError("an IN list needs at least one value")
    size = 1 << (len(out) - 1).bit_length()
    out.extend([out[-1]] * (size - len(out)))
    return ",".join("?" * size), out


def in_named(values: Sequence[T], name: str) -> tuple[str, dict[str, T]]:
    """``in_list`` for a ``text()`` clause: ``:name0,:name1,...`` and their values."""
    _, padded = in_list(values)
    return ",".join(f":{name}{i}" for i in range(len(padded))), {
        f"{name}{i}": v for i, v in enumerate(padded)
    }


def limit(n: int) -> str:
    """``LIMIT n`` with the number written into the statement, not bound.

    The SQLite memstore loads (3.50, sqlean.py) re-prepares a statement whose
    LIMIT is a parameter on every run, because its planner reads the value
    (``sqlite_stmt.reprep`` counts each one): 15-35 us of CPU per run on this
    machine, on statements that capture, index and recall run every time. With
    the number in the text the driver's cached statement is reused. A bound
    OFFSET does not do this."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise InvalidInputError(f"a row limit must be a whole number >= 0, not {n!r}")
    return f"LIMIT {n}"


def direct_connection(conn: Connection) -> Any:
    """The DB-API connection under ``conn`` to run a statement on directly, or
    None to go through SQLAlchemy.

    On SQLite a statement through ``exec_driver_sql`` costs 50-80 us of CPU
    (execution context, result metadata, events) against 3-7 us on the
    driver's connection (BENCHMARKS.md, "Idle capture"); the hot read and
    capture paths run many small ones. The statement stays in the
    transaction ``conn`` holds. While anyone listens to the engine's
    ``before_cursor_execute`` / ``after_cursor_execute`` (the query-plan
    tests, statement counters) statements go through SQLAlchemy so the
    listener sees them (a listener on one ``Connection`` only is not looked
    for; nothing in memstore registers one). PostgreSQL always goes through
    SQLAlchemy."""
    if conn.dialect.paramstyle != "qmark":
        return None
    # The engine's own dispatch: joined with the connection's it took 2.8 us
    # to ask, alone 1.1.
    dispatch = conn.engine.dispatch
    if dispatch.before_cursor_execute or dispatch.after_cursor_execute:
        return None
    return conn.connection.driver_connection


def driver_error(conn: Connection, sql: str, params: Any, error: Exception) -> BaseException:
    """A driver error of a direct statement as SQLAlchemy's wrapper
    (``IntegrityError``, ``OperationalError``...), as exec_driver_sql raises
    it, so callers and ``Database``'s translation see what they always saw."""
    many = isinstance(params, list)
    return exc.DBAPIError.instance(
        sql, params, error, conn.dialect.loaded_dbapi.Error, dialect=conn.dialect, ismulti=many
    )


def driver_rows(conn: Connection, sql: str, params: Any = (), *, replan: bool = False) -> list[Any]:
    """All rows of ``exec_driver_sql(sql, params)`` as the driver returns them
    (tuples), on the driver's connection when ``direct_connection`` allows
    it. Either way SQLAlchemy's per-row result objects are skipped, which on
    a hot read cost more than the statement (keyword search). ``replan``:
    never a prepared statement on PostgreSQL (``memstore.db.pgwire``)."""
    if isinstance(params, list):  # one statement's parameters, not executemany's rows
        params = tuple(params)
    if not isinstance(params, dict) and pgbatch.keeps_writes(conn):
        return pgbatch.rows_sent(conn, sql, params, replan=replan)
    raw = direct_connection(conn)
    if raw is not None:
        try:
            return list(raw.execute(sql, () if params is None else params).fetchall())
        except conn.dialect.loaded_dbapi.Error as e:
            raise driver_error(conn, sql, params, e) from e
    result = conn.exec_driver_sql(sql, params)
    try:
        cursor = result.cursor
        return [] if cursor is None else list(cursor.fetchall())
    finally:
        result.close()
