"""Statements straight on the DB-API connection, for the one-capture path.

A capture runs about 16 small statements in its write transaction. Through
``Connection.exec_driver_sql`` each costs 50-80 µs of CPU on this machine
(execution context, result metadata, events) against 3-7 µs for the same
statement on the driver's own connection (BENCHMARKS.md, "Idle capture").
These helpers take the driver's connection from the SQLAlchemy connection
the transaction already holds, so the statements stay inside that
transaction (BEGIN, COMMIT and ROLLBACK are still SQLAlchemy's).

What exec_driver_sql gave and these keep:

- Driver errors are raised as SQLAlchemy's wrappers (``IntegrityError``,
  ``OperationalError`` ...), so callers and ``Database.write``'s translation
  see what they saw before.
- Anyone listening to the engine's ``before_cursor_execute`` /
  ``after_cursor_execute`` (the write-path query-plan test, statement
  counters) still sees every statement: while such a listener is registered
  the helpers go through ``exec_driver_sql``. (A listener on one
  ``Connection`` only is not looked for; nothing in memstore registers one.)
- PostgreSQL always goes through ``exec_driver_sql`` ("?" becomes "%s"); the
  bypass is for SQLite, whose per-statement cost is mostly this overhead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection

from memstore.db import pgbatch
from memstore.db.sqlfn import direct_connection, driver_error, driver_rows, driver_sql


def run(conn: Connection, sql: str, params: Sequence[Any] = ()) -> None:
    """Execute one statement (written with "?" placeholders), no rows wanted.
    On PostgreSQL it goes to the server with the next statement that needs
    an answer (``memstore.db.pgbatch``): its error is raised there, or by
    ``flush``."""
    if pgbatch.keeps_writes(conn):
        pgbatch.send(conn, driver_sql(conn, sql), tuple(params) if params else None)
        return
    raw = direct_connection(conn)
    if raw is None:
        conn.exec_driver_sql(driver_sql(conn, sql), tuple(params) if params else None)
        return
    try:
        raw.execute(sql, params)
    except conn.dialect.loaded_dbapi.Error as e:
        raise driver_error(conn, sql, params, e) from e


def run_many(conn: Connection, sql: str, rows: Sequence[Sequence[Any]]) -> None:
    """``executemany`` of one statement over ``rows`` (none: nothing runs)."""
    if not rows:
        return
    if pgbatch.keeps_writes(conn):
        pgbatch.send(conn, driver_sql(conn, sql), list(rows), many=True)
        return
    raw = direct_connection(conn)
    if raw is None:
        conn.exec_driver_sql(driver_sql(conn, sql), list(rows))
        return
    try:
        raw.executemany(sql, rows)
    except conn.dialect.loaded_dbapi.Error as e:
        raise driver_error(conn, sql, list(rows), e) from e


def flush(conn: Connection) -> None:
    """Run the writes PostgreSQL keeps for the next round trip now, raising
    their error here (a caller about to roll back to a savepoint). Nothing
    to do on SQLite, whose statements run where they are written."""
    if pgbatch.pending(conn):
        pgbatch.flush(conn)


def reads_ahead(conn: Connection) -> bool:
    """Whether ``prefetch`` sends anything on this connection (PostgreSQL)."""
    return pgbatch.keeps_writes(conn)


def prefetch(
    conn: Connection, sql: str, params: Sequence[Any] = (), *, reads: Sequence[str] | None = None
) -> None:
    """A read this transaction will make before it writes one of the tables
    it ``reads`` (not given: before it writes anything): on PostgreSQL it
    goes to the server with the next round trip, and the ``rows`` of the
    same text and parameters get its answer (``memstore.db.pgbatch``).
    Nothing on SQLite."""
    if pgbatch.keeps_writes(conn):
        values = tuple(params) if params else None
        pgbatch.prefetch(conn, driver_sql(conn, sql), values, reads=reads)


def rows(
    conn: Connection, sql: str, params: Sequence[Any] = (), *, replan: bool = False
) -> list[Any]:
    """Every row of the statement, as the driver's tuples (``driver_rows``,
    which takes the driver's connection when it may). ``replan``: the
    statement's plan depends on its values, so PostgreSQL plans it for them
    every time instead of preparing it (``memstore.db.pgwire``)."""
    values = tuple(params) if params else None
    return driver_rows(conn, driver_sql(conn, sql), values, replan=replan)


def first(conn: Connection, sql: str, params: Sequence[Any] = ()) -> Any:
    """The statement's first row (a tuple), or None."""
    got = rows(conn, sql, params)
    return got[0] if got else None


def scalar(conn: Connection, sql: str, params: Sequence[Any] = ()) -> Any:
    """The first column of the first row, or None without a row."""
    row = first(conn, sql, params)
    return None if row is None else row[0]


__all__ = ["first", "flush", "prefetch", "reads_ahead", "rows", "run", "run_many", "scalar"]
