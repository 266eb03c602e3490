"""PostgreSQL: a transaction's writes go to the server with its next read.

Every statement on PostgreSQL is a round trip to the server (0.1-0.3 ms on
this machine, against a few µs for SQLite in the caller's process), and a
capture ran about twenty of them one after the other: the lock, its reads,
and a dozen inserts whose results nothing waits for. Here the writes that
``memstore.db.rawexec`` runs (``run``, ``run_many``) are kept on the
connection and sent together (through libpq's pipeline,
``memstore.db.pgwire``) with the next statement that needs an answer: a
read, a statement through SQLAlchemy, or the COMMIT. The server runs them in
the order they were written, so a read still sees every write before it. A
capture is two round trips (one more when it queues new extraction work,
for the new item's id).

A read the code knows it will make can go ahead with those writes
(``prefetch``): its answer is kept until the code asks for it, and dropped
as soon as the transaction writes a table it read (or runs a statement that
is not a plain INSERT, UPDATE or DELETE), so an answer handed out is the one
the read would have given where it is asked (in READ COMMITTED a read sees
what was committed when it ran: a few statements earlier is as good, as
long as this transaction changed nothing it read in between).

What changes for a caller: a write's error (a unique key, a value the
server refuses) is raised by the statement it travelled with, not by the
write itself. The transaction is then aborted, exactly as before, so
nothing is half stored. A caller that must see its own write's error where
it wrote it (to roll back to a savepoint and carry on) calls ``flush``.

Writes are kept only while nobody listens to the engine's cursor events
(statement counters, the query-plan tests): a listener sees each statement
where it runs, as on SQLite (``memstore.db.sqlfn.direct_connection``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, Engine, event, exc

from memstore.db import pgwire
from memstore.errors import InvalidInputError

_KEY = "memstore.pg_writes"
_AHEAD = "memstore.pg_reads_ahead"  # reads to send with the next round trip
_ANSWERS = "memstore.pg_answers"  # their rows, until asked for or a write

Write = tuple[str, Any, bool]  # driver SQL, parameters, executemany
# A read sent ahead: driver SQL, parameters, the tables it reads (None: any).
Ahead = tuple[str, Any, "frozenset[str] | None"]

# The table a plain write changes; any other statement may change anything.
_WRITES = re.compile(r"\s*(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+([A-Za-z_]\w*)", re.I)
_SELECT = re.compile(r"\s*SELECT\b", re.I)
# A setting that changes how statements run, not what a read returns (the
# search path, the role and the transaction's snapshot do change that).
_SETTING = re.compile(
    r"\s*(?:SET(?:\s+LOCAL|\s+SESSION)?|RESET)\s+"
    r"(?!(?:search_path|role|authorization|session_authorization|transaction|all|local|session)\b)\w",
    re.I,
)


def keeps_writes(conn: Connection) -> bool:
    """Whether ``send`` keeps writes on this connection (PostgreSQL, nobody
    listening to its statements)."""
    if conn.dialect.name != "postgresql":
        return False
    # ``install`` put one listener there (SQLAlchemy keeps a wrapper of it,
    # not the function): any other is someone watching statements.
    dispatch = conn.engine.dispatch
    return len(dispatch.before_cursor_execute) == 1 and not dispatch.after_cursor_execute


def send(conn: Connection, sql: str, params: Any, *, many: bool = False) -> None:
    """Keep one write (driver SQL, ``%s`` placeholders) for the next round trip."""
    _outdate(conn, sql)
    queued: list[Write] | None = conn.info.get(_KEY)
    if queued is None:
        queued = conn.info[_KEY] = []
    queued.append((sql, params, many))


def flush(
    conn: Connection,
    read: str | None = None,
    params: Any = None,
    *,
    commit: bool = False,
    replan: bool = False,
) -> list[Any]:
    """Send the kept writes, then ``read`` (its rows are returned) and the
    COMMIT if asked, in one round trip. Errors are raised as SQLAlchemy's
    wrappers, as ``exec_driver_sql`` raises them. ``replan``: ``read`` is
    never prepared (``memstore.db.pgwire``)."""
    info = conn.info
    if read is not None:
        answers: dict[tuple[str, Any], tuple[list[Any], Any]] | None = info.get(_ANSWERS)
        if answers is not None and (read, params) in answers:
            return answers.pop((read, params))[0]
    queued: list[Write] = info.pop(_KEY, None) or []
    ahead: list[Ahead] = info.pop(_AHEAD, None) or []
    if read is not None and ahead:
        # The read itself may be one sent ahead: sent once, as the read.
        ahead = [a for a in ahead if a[0] != read or a[1] != params]
    raw = conn.connection.driver_connection
    if not queued and not ahead and not commit:
        if read is None:
            return []
        return _run_read(conn, raw, read, params, replan)
    reads = [(sql, p) for sql, p, _ in ahead]
    if read is not None:
        reads.append((read, params))
    try:
        if pgwire.usable(raw):
            statements: list[pgwire.Statement] = []
            for sql, p, many in queued:
                if many:
                    statements.extend((sql, one) for one in p)
                else:
                    statements.append((sql, p))
            got = pgwire.run(
                raw,
                [*statements, *reads],
                len(reads),
                commit=commit,
                replan_last=replan and read is not None,
            )
        else:
            got = _pipelined(raw, queued, reads, commit)
    except UnicodeEncodeError as e:  # a lone surrogate: the driver cannot send it
        raise InvalidInputError(f"text is not valid Unicode: {e}") from e
    except conn.dialect.loaded_dbapi.Error as e:
        last = read or ("COMMIT" if commit else "nothing else")
        what = f"{len(queued)} statements sent together, then {last}"
        raise _wrapped(conn, what, e) from e
    if ahead and not commit:
        kept = info.setdefault(_ANSWERS, {})
        for (sql, p, tables), rows in zip(ahead, got, strict=False):
            kept[(sql, p)] = (rows, tables)
    return got[-1] if read is not None else []


def _pipelined(
    raw: Any, queued: list[Write], reads: list[tuple[str, Any]], commit: bool
) -> list[list[Any]]:
    """The statements through psycopg's own pipeline mode, where
    ``memstore.db.pgwire`` cannot send them."""
    with raw.pipeline():
        cur = raw.cursor()
        for sql, p, many in queued:
            if many:
                cur.executemany(sql, p)
            else:
                cur.execute(sql, p)
        answers = []
        for sql, p in reads:
            c = raw.cursor()
            c.execute(sql, p)
            answers.append(c)
        if commit:
            raw.commit()
    return [list(c.fetchall()) for c in answers]


def prefetch(
    conn: Connection, sql: str, params: Any = None, *, reads: Sequence[str] | None = None
) -> None:
    """Send the read ``sql`` (driver SQL) with the next round trip and keep
    its rows for the ``rows_sent`` of the same text and parameters, unless
    the transaction first writes one of the tables it ``reads`` (not given:
    any write)."""
    key = (sql, params)
    ahead: list[Ahead] = conn.info.setdefault(_AHEAD, [])
    if key in (conn.info.get(_ANSWERS) or {}) or any(a[:2] == key for a in ahead):
        return
    ahead.append((sql, params, None if reads is None else frozenset(reads)))


def _outdate(conn: Connection, sql: str | None) -> None:
    """Drop the answers (and reads ahead) that a write of ``sql`` could
    change: those of the table it writes, or all of them (``None``, or a
    statement that is not a plain write)."""
    info = conn.info
    if sql is not None and _SETTING.match(sql):
        return  # a setting of the session or transaction: no table changes
    written = _WRITES.match(sql) if sql is not None else None
    if written is None:
        info.pop(_ANSWERS, None)
        info.pop(_AHEAD, None)
        return
    table = written.group(1).lower()
    answers = info.get(_ANSWERS)
    if answers:
        for key in [k for k, (_, t) in answers.items() if t is None or table in t]:
            del answers[key]
    ahead = info.get(_AHEAD)
    if ahead:
        ahead[:] = [a for a in ahead if a[2] is not None and table not in a[2]]


def discard(conn: Connection) -> None:
    """Drop the kept writes and answers (the transaction ended)."""
    if conn.invalidated:  # its DB-API connection is gone, and what was kept with it
        return
    for key in (_KEY, _AHEAD, _ANSWERS):
        conn.info.pop(key, None)


def pending(conn: Connection) -> int:
    """How many writes are kept on this connection."""
    return len(conn.info.get(_KEY) or ())


def _run_read(conn: Connection, raw: Any, sql: str, params: Any, replan: bool) -> list[Any]:
    try:
        if pgwire.usable(raw):
            return pgwire.run(raw, [(sql, params)], 1, replan_last=replan)[0]
        cur = raw.cursor()
        cur.execute(sql, params)
        return list(cur.fetchall())
    except UnicodeEncodeError as e:
        raise InvalidInputError(f"text is not valid Unicode: {e}") from e
    except conn.dialect.loaded_dbapi.Error as e:
        raise _wrapped(conn, sql, e) from e


def _wrapped(conn: Connection, sql: str, error: Exception) -> BaseException:
    # Parameters are user text: never in the message (the engine hides them too).
    return exc.DBAPIError.instance(
        sql,
        None,
        error,
        conn.dialect.loaded_dbapi.Error,
        hide_parameters=True,
        dialect=conn.dialect,
    )


def _before_statement(conn: Connection, _cursor: Any, statement: str, *_: Any) -> None:
    # The kept writes go first. A plain SELECT changes no table (memstore
    # defines no function that writes), so answers read ahead survive it;
    # any other statement may write anything, and none survives that.
    if not _SELECT.match(statement):
        _outdate(conn, None)
    if conn.info.get(_KEY):
        flush(conn)


def _before_commit(conn: Connection) -> None:
    if conn.info.get(_KEY):
        flush(conn)
    discard(conn)


def _checkin(_dbapi_conn: Any, record: Any) -> None:
    for key in (_KEY, _AHEAD, _ANSWERS):
        record.info.pop(key, None)


def install(engine: Engine) -> None:
    """Keep the order of statements on ``engine``: kept writes go first
    whenever SQLAlchemy runs a statement (``exec_driver_sql`` included) or
    commits, and are dropped on a rollback or when the connection goes back
    to the pool."""
    event.listen(engine, "before_cursor_execute", _before_statement)
    event.listen(engine, "commit", _before_commit)
    event.listen(engine, "rollback", discard)
    event.listen(engine.pool, "checkin", _checkin)


def rows_sent(
    conn: Connection, sql: str, params: Sequence[Any] | None, *, replan: bool = False
) -> list[Any]:
    """Every row of a read (driver SQL), sent with the kept writes."""
    return flush(conn, sql, tuple(params) if params else None, replan=replan)


__all__ = [
    "discard",
    "flush",
    "install",
    "keeps_writes",
    "pending",
    "prefetch",
    "rows_sent",
    "send",
]
