"""PostgreSQL: a batch of statements sent through libpq's pipeline directly.

psycopg's cursors cost 40-70 µs of CPU per statement on this machine, in
pipeline mode too (its result sets, prepare bookkeeping and pipeline queue are
Python), against ~7 µs to hand the same statement to libpq here, with
psycopg's own ``Transformer`` dumping the parameters and loading the rows (so
values are typed exactly as psycopg types them). A capture runs ~25 small
statements: that overhead was most of its CPU.

Every statement is prepared on the connection the first time it runs with
those parameter types (kept per connection, at most ``PREPARED`` of them;
past that a statement is sent unprepared). A read whose best plan depends on
its values is sent unprepared (``replan_last``): after five runs of a
prepared statement PostgreSQL may keep a generic plan, which for the keyword
search evaluated the query's ``plainto_tsquery`` calls on every candidate row
(14 ms against 4.5 planned for the values). ``run`` sends BEGIN first when no
transaction is open (with the connection's isolation level, as psycopg
would), then the statements, the COMMIT if asked, and one sync; it waits for
every result and raises the first error, as psycopg's pipeline does. Where
``usable`` says no (autocommit, a pipeline already open, no ``poll``) the
caller sends the batch through psycopg instead.
"""

from __future__ import annotations

import select
import weakref
from collections.abc import Sequence
from typing import Any

# Statements prepared per connection: every text memstore runs, with room for
# the few parameter-type variants (an int grows from int2 to int8).
PREPARED = 512

Statement = tuple[str, Any]  # driver SQL with %s placeholders, parameters (or None)


class _Prepared:
    """The statements prepared on one connection: name by (text, types)."""

    def __init__(self) -> None:
        self.names: dict[tuple[str, tuple[int, ...]], bytes] = {}
        self.made = 0


_prepared: weakref.WeakKeyDictionary[Any, _Prepared] = weakref.WeakKeyDictionary()
_dollars: dict[str, bytes] = {}


def usable(raw: Any) -> bool:
    """Whether ``run`` can take a batch on this psycopg connection now."""
    from psycopg import pq

    return (
        hasattr(select, "poll")
        and not raw.autocommit
        and raw.pgconn.pipeline_status == pq.PipelineStatus.OFF
    )


def run(
    raw: Any,
    statements: Sequence[Statement],
    reads: int,
    *,
    commit: bool = False,
    replan_last: bool = False,
) -> list[list[Any]]:
    """Send ``statements`` in one round trip; the rows of the last ``reads``
    of them are returned, in order. With ``replan_last`` the last statement
    is never prepared, so the server plans it for its values every time.
    The caller checked ``usable``."""
    from psycopg import errors, pq
    from psycopg.adapt import PyFormat, Transformer

    pg = raw.pgconn
    if not statements and pg.transaction_status == pq.TransactionStatus.IDLE:
        return []  # no transaction to commit, nothing to send
    tx = Transformer(raw)
    # Every value dumped before anything is sent: a value the driver cannot
    # send (text with a lone surrogate) raises here, the connection untouched.
    dumped: list[tuple[str, Any, tuple[int, ...], Any]] = []
    for sql, params in statements:
        values = params or ()
        out = tx.dump_sequence(values, [PyFormat.AUTO] * len(values))
        dumped.append((sql, out, tuple(tx.types or ()), list(tx.formats or ())))
    state = _prepared.get(raw)
    if state is None:
        state = _prepared[raw] = _Prepared()
    # Per command sent: the statement's index, or the name a prepare makes
    # (BEGIN and COMMIT: -1).
    sent: list[int | bytes] = []
    with raw.lock:
        pg.enter_pipeline_mode()
        try:
            if pg.transaction_status == pq.TransactionStatus.IDLE:
                pg.send_query_params(_begin(raw), None)
                sent.append(-1)
            for i, (sql, values, types, formats) in enumerate(dumped):
                once = replan_last and i == len(dumped) - 1
                name = None if once else state.names.get((sql, types))
                if name is None and not once and len(state.names) < PREPARED:
                    state.made += 1
                    name = state.names[(sql, types)] = b"memstore_%d" % state.made
                    pg.send_prepare(name, _numbered(sql), param_types=types)
                    sent.append(name)
                if name is None:
                    pg.send_query_params(
                        _numbered(sql), values, param_types=types, param_formats=formats
                    )
                else:
                    pg.send_query_prepared(name, values, param_formats=formats)
                sent.append(i)
            if commit:
                pg.send_query_params(b"COMMIT", None)
                sent.append(-1)
            pg.pipeline_sync()
            results = _exchange(pg)
            pg.exit_pipeline_mode()
        except BaseException:
            # Half way through a pipeline the connection's state is unknown:
            # close it, so the pool replaces it.
            raw.close()
            raise
    error: Exception | None = None
    rows: list[list[Any]] = []
    first_read = len(statements) - reads
    for command, res in zip(sent, results, strict=True):
        if isinstance(command, bytes) and res.status != pq.ExecStatus.COMMAND_OK:
            # Never made: prepared again the next time.
            state.names = {k: v for k, v in state.names.items() if v != command}
        if res.status == pq.ExecStatus.FATAL_ERROR:
            error = error or errors.error_from_result(res, encoding=raw.info.encoding)
        elif isinstance(command, int) and command >= first_read and error is None:
            tx.set_pgresult(res)
            rows.append(list(tx.load_rows(0, res.ntuples, tuple)))
    if error is not None:
        if getattr(error, "sqlstate", None) == "26000":
            # A prepared statement is gone (a DEALLOCATE on this connection
            # that was not ours): prepare everything again from the next batch.
            _prepared.pop(raw, None)
        raise error
    return rows


def _begin(raw: Any) -> bytes:
    from psycopg import IsolationLevel

    parts = [b"BEGIN"]
    if raw.isolation_level is not None:
        level = IsolationLevel(raw.isolation_level).name
        parts += [b"ISOLATION LEVEL", level.replace("_", " ").encode()]
    if raw.read_only is not None:
        parts.append(b"READ ONLY" if raw.read_only else b"READ WRITE")
    if raw.deferrable is not None:
        parts.append(b"DEFERRABLE" if raw.deferrable else b"NOT DEFERRABLE")
    return b" ".join(parts)


def _numbered(sql: str) -> bytes:
    """``%s`` placeholders as ``$1, $2 ...`` (memstore's driver SQL holds no
    other ``%``: memstore.db.sqlfn.driver_sql)."""
    got = _dollars.get(sql)
    if got is None:
        pieces = sql.split("%s")
        out = pieces[0]
        for i, piece in enumerate(pieces[1:], start=1):
            out += f"${i}{piece}"
        got = out.encode()
        if len(_dollars) < 4 * PREPARED:
            _dollars[sql] = got
    return got


def _exchange(pg: Any) -> list[Any]:
    """Flush what was sent and collect one result per command, up to the sync."""
    from psycopg import pq

    poller = select.poll()
    poller.register(pg.socket, select.POLLIN | select.POLLOUT)
    # Sending and reading at once: a server that cannot send its results
    # stops reading, and a large batch would then never finish sending.
    while pg.flush():
        if any(ev & select.POLLIN for _, ev in poller.poll()):
            pg.consume_input()
    poller.modify(pg.socket, select.POLLIN)
    out: list[Any] = []
    while True:
        while pg.is_busy():
            poller.poll()
            pg.consume_input()
        res = pg.get_result()
        if res is None:  # the end of one command's results
            continue
        if res.status == pq.ExecStatus.PIPELINE_SYNC:
            return out
        out.append(res)


__all__ = ["PREPARED", "run", "usable"]
