"""PostgreSQL (preview): the same ``Database`` interface on a server.

Writes are serialised, exactly as on SQLite. Every write transaction first
takes one transaction-scoped advisory lock (``pg_advisory_xact_lock``) and
holds it until COMMIT or ROLLBACK. We chose that over a sequence because the
event log's contract is *ordered, gap-free positions in commit order*: a
reader that has applied position N must never later find an N-1 committed
behind it. A sequence hands out numbers at INSERT time, and transactions
commit in any order (and roll back, leaving gaps), so readers would need a
commit-order rule on top (e.g. only read below the oldest in-flight xid,
``pg_snapshot_xmin``) and every projection a way to skip holes. Under the
lock the log assigns ``max(position) + 1`` (memstore.events.log), the
position is visible only once committed, and nothing commits in between.
Many processes and machines share the lock through the server. The cost is
one writer at a time, the same as SQLite's ``BEGIN IMMEDIATE`` — the write
paths are short transactions by design, and LLM calls never run inside one.

Under READ COMMITTED each statement sees everything committed before it, so
once the lock is held a writer reads the latest state (read-then-write is
safe, like SQLite's IMMEDIATE). Reads run in REPEATABLE READ: one snapshot
for the whole read, like SQLite's deferred read transaction.

``lock_timeout`` plays SQLite's ``busy_timeout``: a writer that waited that
long for the lock gets ``LockedError``.

One kind of write skips the lock: claiming queued work (``queue_write``)
appends no event, so it runs beside the writers, and workers in several
processes claim at once with ``FOR UPDATE SKIP LOCKED``
(memstore.pipeline.queue says how that stays exact).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, create_engine, event, exc
from sqlalchemy.engine import make_url

from memstore.db import pgbatch, rawexec
from memstore.db.backend import POSTGRES
from memstore.db.backend.postgres import vacuum
from memstore.db.engine import Database
from memstore.db.target import safe_url
from memstore.errors import ConfigError, LockedError, StorageError

# Key of the one advisory lock that serialises memstore's writers on a
# database (advisory locks are per database, so two memstore databases on one
# server do not contend). The number is arbitrary but fixed: ASCII "memstore".
WRITE_LOCK_KEY = 0x6D656D73746F7265


# Connections back in the pool for less than this are not pinged before
# reuse (HikariCP's "alive bypass window" is 500 ms too).
PING_AFTER_IDLE_S = 0.5
_RETURNED_AT = "memstore.returned_at"


def _on_checkin(_dbapi_conn: Any, record: Any) -> None:
    record.info[_RETURNED_AT] = time.monotonic()


def translate(err: exc.DBAPIError | Exception, what: str = "database") -> StorageError:
    """Map a psycopg error to a memstore error (callers ``raise ... from err``)."""
    orig = getattr(err, "orig", err)
    state = getattr(orig, "sqlstate", None)
    if state in ("55P03", "40P01"):  # lock_not_available (lock_timeout), deadlock
        return LockedError(f"{what} is locked by another writer (waited lock_timeout): {orig}")
    return StorageError(f"{what}: {orig}")


class PostgresDatabase(Database):
    """Owns the engine for one PostgreSQL database; safe to share between threads."""

    backend = POSTGRES

    def __init__(
        self, url: str, *, busy_timeout_ms: int = 5000, durability: str = "normal"
    ) -> None:
        try:
            import psycopg  # noqa: F401  (only to give a clear error)
        except ImportError as e:
            raise ConfigError(
                "PostgreSQL needs the psycopg driver: pip install 'memstore-agent[postgres]'"
            ) from e
        if durability not in ("normal", "full"):
            raise ConfigError(f"durability must be one of normal, full, not {durability!r}")
        self.url = url
        self.location = safe_url(url)
        # Not a file: a key for per-database registries (the scheduler's timers
        # carry it to whichever process fires them). Absolute, so resolving it
        # does not depend on the working directory of the process.
        self.path = Path("/", self.location.replace("://", "/", 1))
        super().__init__()
        self.busy_timeout_ms = busy_timeout_ms
        # "normal" on SQLite survives a process crash but maybe not a power
        # cut; PostgreSQL's commits are durable either way (synchronous_commit
        # stays at the server's setting, on by default).
        self.synchronous = "on"
        try:
            parsed = make_url(url)
        except exc.ArgumentError as e:
            raise ConfigError(f"not a database URL: {self.location}: {e}") from e
        self.engine = create_engine(
            parsed,
            # Statement parameters are user text: never in an error message or a log.
            hide_parameters=True,
            pool_size=8,
            max_overflow=16,
            # Pinged at checkout only after sitting idle (``_on_checkout``).
            pool_pre_ping=False,
            connect_args={"connect_timeout": max(1, busy_timeout_ms // 1000)},
        )
        event.listen(self.engine, "connect", self._on_connect)
        event.listen(self.engine.pool, "checkout", self._on_checkout)
        event.listen(self.engine.pool, "checkin", _on_checkin)
        pgbatch.install(self.engine)
        try:
            with self.engine.connect() as conn:
                conn.exec_driver_sql("SELECT 1")
        except exc.DBAPIError as e:
            raise translate(e, f"cannot open {self.location}") from e

    def _on_connect(self, dbapi_conn: Any, _record: Any) -> None:
        # Autocommit off (psycopg's default); SET outside a transaction would
        # otherwise open one, so commit it right away.
        with dbapi_conn.cursor() as cur:
            cur.execute(f"SET lock_timeout = {int(self.busy_timeout_ms)}")
            cur.execute("SET TIME ZONE 'UTC'")
            # Which process a session belongs to, in pg_stat_activity (several
            # gateway or worker processes share one database).
            cur.execute(
                "SELECT set_config('application_name', %s, false)", (f"memstore:{os.getpid()}",)
            )
        dbapi_conn.commit()
        # The hot statements are prepared by memstore.db.pgwire. psycopg's own
        # preparing sends DEALLOCATE ALL after any ROLLBACK or DDL once it has
        # prepared something, which would drop those too.
        dbapi_conn.prepare_threshold = None

    def _on_checkout(self, dbapi_conn: Any, record: Any, _proxy: Any) -> None:
        # A connection can have died in the pool (the server restarted, an
        # idle timeout): one that is about to be used is pinged first, and
        # replaced if the ping fails (the pool tries another). One that came
        # back less than PING_AFTER_IDLE_S ago worked then; pinging it too
        # cost a round trip (0.1-0.3 ms) on every transaction of a busy
        # writer. A fresh connection has no return time: it just connected.
        back = record.info.get(_RETURNED_AT)
        if back is None or time.monotonic() - back < PING_AFTER_IDLE_S:
            return
        try:
            self.engine.dialect.do_ping(dbapi_conn)
        except Exception as e:  # any failure: the pool drops it and connects anew
            raise exc.DisconnectionError(f"connection failed its ping: {e}") from e

    def translate_error(self, err: Exception, what: str = "database") -> StorageError:
        return translate(err, what)

    @contextmanager
    def _write_transaction(self) -> Iterator[Connection]:
        # Serialised by the advisory lock (see the module docstring).
        with self.engine.connect() as conn, conn.begin():
            # Sent with the transaction's first read (memstore.db.pgbatch):
            # the server takes the lock before it runs that read.
            rawexec.run(conn, "SELECT pg_advisory_xact_lock(?)", (WRITE_LOCK_KEY,))
            yield conn
            # The kept writes and the COMMIT in one round trip.
            pgbatch.flush(conn, commit=True)

    @contextmanager
    def _read_transaction(self) -> Iterator[Connection]:
        # REPEATABLE READ: one snapshot, like SQLite's deferred read.
        with self.engine.connect() as raw:
            conn = raw.execution_options(isolation_level="REPEATABLE READ")
            with conn.begin():
                yield conn

    @contextmanager
    def queue_write(self) -> Iterator[Connection]:
        """A READ COMMITTED transaction without the log's advisory lock (nor
        this process's write lock): claims of several workers, in threads or
        processes, run at once. Safe because a claim appends no event: it
        locks the queue rows it looks at with ``FOR UPDATE SKIP LOCKED`` and
        takes the session lock with one conditional upsert
        (memstore.pipeline.queue), both settled by the server's row locks."""
        try:
            with self.engine.connect() as conn, conn.begin():
                yield conn
                pgbatch.flush(conn, commit=True)
        except exc.IntegrityError:
            raise
        except exc.DBAPIError as e:
            raise translate(e) from e

    def vacuum(self, tables: list[str] | None = None, *, full: bool = False) -> None:
        """``VACUUM`` (or ``VACUUM FULL``) the given tables, or all of them
        (``memstore.db.backend.postgres.vacuum`` says what each leaves behind)."""
        vacuum(self, tables, full=full)

    def vec_version(self) -> str:
        with self.read() as conn:
            v = conn.exec_driver_sql(
                "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
            ).scalar()
        return f"pgvector {v}" if v else "pgvector not installed"

    def server_version(self) -> str:
        with self.read() as conn:
            return str(conn.exec_driver_sql("SHOW server_version").scalar())
