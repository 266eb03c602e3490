"""A database and its two kinds of transaction; the one SQLite file: engine, pragmas.

Every write runs in ``BEGIN IMMEDIATE``: with deferred BEGIN two processes that
read then write deadlock into "database is locked" (measured: 2711 of 4000
transactions failed); with IMMEDIATE the second writer waits on busy_timeout.
Inside one process a lock serialises writers as well, so threads queue in
Python instead of spinning in SQLite's busy handler.
"""

from __future__ import annotations

import os
import sys
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, exc
from sqlalchemy.pool import QueuePool

from memstore.db.backend import SQLITE
from memstore.db.backend.base import Backend
from memstore.db.checkpoint import Checkpointer
from memstore.db.driver import load_vec, sqlite_module
from memstore.db.sqlfn import STATEMENT_CACHE
from memstore.db.target import looks_like_url, safe_url
from memstore.db.writerturn import WriterTurns
from memstore.errors import ConfigError, InvalidInputError, LockedError, StorageError

# Settings.durability -> PRAGMA synchronous. In WAL mode NORMAL syncs only at
# checkpoints: a commit survives the process dying, not the machine losing
# power. FULL syncs the WAL at every commit.
SYNCHRONOUS = {"normal": "NORMAL", "full": "FULL"}


# Reads through a memory map of the file (PRAGMA mmap_size) instead of read()
# into each connection's 2 MB page cache. Searches jump between users, so a
# query's pages are rarely in that cache: a 100 x 1k-message store is 69 MB,
# and each pooled connection would cache its own copy. Mapped pages are the OS
# page cache itself, shared by every connection and process on the file, with
# no copy per page. Measured (BENCHMARKS.md, "Keyword search per user", 100 x
# 1k store, stores interleaved query by query): keyword search CPU p50
# 0.93-0.96x of the same code without the map; a 64 MB cache_size per
# connection measured the same (0.93-1.00x) at up to 64 MB of private memory
# per pooled connection, so cache_size stays at its default. What it does not
# change: writes still go through write() (SQLite maps read-only), pages still
# in the WAL are read from the WAL, and SQLite caps the size at its compile-
# time SQLITE_MAX_MMAP_SIZE: 2 GB in its default build on Linux, macOS and
# Windows (sqlean's: 1 TB), 0 = off where SQLite compiles the map out (iOS,
# OpenBSD), where the pragma does nothing. Caveats taken: the mapped pages
# count in the process's RSS (shared and reclaimable, up to the file's size);
# an I/O error on a mapped page (a failing disk, a network file system, a file
# truncated by another program) raises SIGBUS instead of an error, which is
# why SQLite ships it off and why memstore stores belong on a local disk
# anyway (WAL needs shared memory, which network file systems do not give).
# Windows cannot shrink a file another connection has mapped; SQLite then
# leaves the file at its size (os_win.c ignores ERROR_USER_MAPPED_FILE), so a
# VACUUM frees space inside the file only. A 32-bit process keeps its address
# space.
MMAP_BYTES = 1 << 30 if sys.maxsize > 2**32 else 0

# Connections a forked child inherited from its parent: never used and
# never closed there (closing would unlock and checkpoint the parent's file
# from the wrong process), only kept from the garbage collector.
_INHERITED: list[Connection] = []

# Read connections kept checked out between read transactions
# (``SqliteDatabase._reader``): as many as the pool keeps idle. A moment with
# more concurrent reads gets the others from the pool, which takes them back.
IDLE_READERS = 8


def translate(err: exc.DBAPIError | Exception, what: str = "database") -> StorageError:
    """Map a driver error to a memstore error (callers ``raise ... from err``)."""
    text = str(getattr(err, "orig", err))
    if "locked" in text or "busy" in text:
        return LockedError(f"{what} is locked by another writer (waited busy_timeout): {text}")
    return StorageError(f"{what}: {text}")


class Database(ABC):
    """One database, safe to share between threads: its engine, the two kinds
    of transaction, and the backend that holds its engine-specific SQL.

    ``SqliteDatabase`` (below) is a SQLite file; ``memstore.db.postgres.
    PostgresDatabase`` a PostgreSQL server. Both serialise writers: one lock
    per process, and the engine's own lock across processes.
    """

    backend: Backend
    engine: Engine
    path: Path
    location: str
    busy_timeout_ms: int
    # Errors of statements run on the DB-API connection itself (the hot read
    # and capture paths skip SQLAlchemy's statement layer): translated like
    # SQLAlchemy's wrappers, so callers still see only memstore errors.
    driver_errors: tuple[type[Exception], ...] = ()

    def __init__(self) -> None:
        self._write_lock = threading.RLock()

    @property
    def dialect(self) -> str:
        """The SQLAlchemy dialect name of the engine (the backend's name)."""
        return self.backend.name

    def _after_write(self) -> None:
        """After each committed write transaction (SQLite counts them for its
        checkpoints, memstore.db.checkpoint); nothing by default."""
        return None

    @contextmanager
    def _writer_turn(self) -> Iterator[None]:
        """Held around a writer, inside this process's write lock: the turn
        among the writers of other processes (SQLite, memstore.db.writerturn);
        the engine's own lock queue otherwise."""
        yield

    @abstractmethod
    def translate_error(self, err: Exception, what: str = "database") -> StorageError:
        """A driver error as a memstore error (callers ``raise ... from err``)."""

    @abstractmethod
    def _write_transaction(self) -> AbstractContextManager[Connection]: ...

    @abstractmethod
    def _read_transaction(self) -> AbstractContextManager[Connection]: ...

    @abstractmethod
    def vec_version(self) -> str:
        """The vector extension and its version."""

    @contextmanager
    def write(self) -> Iterator[Connection]:
        """A serialised write transaction; commits on success, rolls back on error.

        One lock per process queues this process's writers; the engine's
        ``_write_transaction`` serialises processes. An integrity error passes
        through untranslated (callers tell a duplicate from a storage fault)."""
        with self._write_lock, self._writer_turn():
            try:
                with self._write_transaction() as conn:
                    yield conn
                self._after_write()
            except exc.IntegrityError:
                raise
            except exc.DBAPIError as e:
                raise self.translate_error(e) from e
            except self.driver_errors as e:
                raise self.translate_error(e) from e

    @contextmanager
    def queue_write(self) -> Iterator[Connection]:
        """A transaction that writes only the work queue and its locks, never
        the event log. SQLite has one writer at a time, so it is the write
        transaction; PostgreSQL runs it without the log's lock, so workers
        claim work at once (``FOR UPDATE SKIP LOCKED``, memstore.pipeline.queue)."""
        with self.write() as conn:
            yield conn

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """A snapshot read transaction (see ``_read_transaction``)."""
        try:
            with self._read_transaction() as conn:
                yield conn
        except exc.DBAPIError as e:
            raise self.translate_error(e) from e
        except self.driver_errors as e:
            raise self.translate_error(e) from e

    @contextmanager
    def exclusive_connection(self) -> Iterator[Connection]:
        """A connection outside any transaction, while this process's other
        writers wait (statements that cannot run in a transaction: VACUUM,
        checkpoints)."""
        with self._write_lock, self._writer_turn(), self.engine.connect() as conn:
            yield conn

    def close(self) -> None:
        self.engine.dispose()


class SqliteDatabase(Database):
    """Owns the engine for one SQLite file."""

    backend = SQLITE
    # memstore.db.checkpoint: WAL checkpoints off the capture path.
    _checkpointer: Checkpointer | None = None
    # The connection write transactions run on (``_held_writer``).
    _held: Connection | None = None
    _held_pid = 0
    # Read connections between read transactions (``_reader``), this process's.
    _idle: list[Connection]
    _idle_pid = 0
    _closing = False

    def __init__(
        self, path: str | Path, *, busy_timeout_ms: int = 5000, durability: str = "normal"
    ) -> None:
        super().__init__()
        self._idle = []
        self._idle_lock = threading.Lock()
        if durability not in SYNCHRONOUS:
            raise ConfigError(
                f"durability must be one of {', '.join(SYNCHRONOUS)}, not {durability!r}"
            )
        self.synchronous = SYNCHRONOUS[durability]
        if str(path) in (":memory:", "") or str(path).startswith("file::memory:"):
            # Every pooled connection would see its own empty database, and the
            # background threads another one: refuse instead of losing data.
            raise InvalidInputError(
                "in-memory databases are not supported; use a file (a temporary one is fine)"
            )
        if looks_like_url(path):
            # Never a file or folder named after a URL (Path("x://h/db") is "x:/h/db").
            raise InvalidInputError(
                f"{safe_url(str(path))} is a URL, not a SQLite file: open it with "
                "Store.open(url) (PostgreSQL) or give a file path"
            )
        self.path = Path(path)
        # What messages call this database (a PostgreSQL URL without password there).
        self.location = str(self.path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StorageError(f"cannot create directory for {self.path}: {e}") from e
        self.busy_timeout_ms = busy_timeout_ms
        self.module = sqlite_module()
        self.driver_errors = (self.module.Error,)
        self._checkpointer = Checkpointer(self.path, self.module, busy_timeout_ms)
        self._turns = WriterTurns(self.path)
        self._turn_depth = self._turn_pid = 0
        self.engine: Engine = create_engine(
            f"sqlite:///{self.path}",
            module=self.module,
            # Statement parameters are user text: never in an error message or a log.
            hide_parameters=True,
            poolclass=QueuePool,
            pool_size=8,
            max_overflow=16,
            # The connection returned last is handed out next: its page cache
            # holds what this process just wrote and read. First-in-first-out
            # cycled a capture loop through every pooled connection, each
            # re-reading the pages the others had changed (measured on idle
            # capture).
            pool_use_lifo=True,
            connect_args={
                "check_same_thread": False,
                "timeout": busy_timeout_ms / 1000,
                "cached_statements": STATEMENT_CACHE,
            },
        )
        event.listen(self.engine, "connect", self._on_connect)
        event.listen(self.engine, "begin", self._on_begin)
        try:
            with self.engine.connect() as conn:
                conn.exec_driver_sql("SELECT 1")
        except exc.DBAPIError as e:
            raise translate(e, f"cannot open {self.path}") from e

    def _on_connect(self, dbapi_conn: Any, _record: Any) -> None:
        # Driver-level autocommit: we issue BEGIN ourselves in _on_begin so the
        # transaction mode (DEFERRED / IMMEDIATE) is ours to choose.
        dbapi_conn.isolation_level = None
        load_vec(dbapi_conn)
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_ms)}")
        cur.execute("PRAGMA journal_mode = WAL")
        cur.execute(f"PRAGMA synchronous = {self.synchronous}")
        cur.execute("PRAGMA foreign_keys = ON")
        cur.execute(f"PRAGMA mmap_size = {MMAP_BYTES}")
        # No checkpoint inside a commit: memstore.db.checkpoint runs them.
        cur.execute("PRAGMA wal_autocheckpoint = 0")
        cur.close()

    def translate_error(self, err: Exception, what: str = "database") -> StorageError:
        return translate(err, what)

    @staticmethod
    def _on_begin(conn: Connection) -> None:
        mode = conn.get_execution_options().get("sqlite_begin", "DEFERRED")
        # On the driver connection: through SQLAlchemy's statement path the
        # BEGIN cost about 25 us more, on every read and every capture.
        raw = conn.connection.driver_connection
        assert raw is not None
        raw.execute(f"BEGIN {mode}")

    @contextmanager
    def _writer_turn(self) -> Iterator[None]:
        # Taken once per outermost writer: a write inside a write of this
        # thread (the write lock is re-entrant) is inside the turn already.
        pid = os.getpid()
        if self._turn_depth and self._turn_pid == pid:
            self._turn_depth += 1
            try:
                yield
            finally:
                self._turn_depth -= 1
            return
        wait_s = self.busy_timeout_ms / 1000
        if not self._turns.acquire(wait_s):
            raise LockedError(
                f"{self.location} is locked by another writer (waited busy_timeout): "
                f"a write transaction of another process (or of another store on this "
                f"file) held it over {wait_s:g} s"
            )
        self._turn_depth, self._turn_pid = 1, pid
        try:
            yield
        finally:
            self._turn_depth = self._turn_pid = 0
            self._turns.release()

    def _after_write(self) -> None:
        if self._checkpointer is not None:
            self._checkpointer.wrote()

    @contextmanager
    def _write_transaction(self) -> Iterator[Connection]:
        # BEGIN IMMEDIATE: the write lock at BEGIN, so a second process waits
        # on busy_timeout instead of deadlocking on a read-then-write upgrade.
        held = self._held_writer()
        if held is None:  # a write inside a write of this thread
            with self.engine.connect() as conn:
                conn = conn.execution_options(sqlite_begin="IMMEDIATE")
                with conn.begin():
                    yield conn
            return
        with held.begin():
            yield held

    def _held_writer(self) -> Connection | None:
        """The connection this process's write transactions run on (with the
        write lock held), or None when it is in a transaction already.

        Kept out of the pool: a checkout, its events and the reset on check-in
        cost 100-160 us of CPU per transaction against 25-50 us for BEGIN on
        a held connection (BENCHMARKS.md, "Idle capture"), and writes keep
        finding their own pages in its cache. What other connections or
        processes wrote meanwhile is no risk to that cache: SQLite checks the
        WAL index at every BEGIN and drops pages that changed. After a fork
        the child opens its own (the inherited one is the parent's)."""
        pid = os.getpid()
        held = self._held
        if held is not None and self._held_pid != pid:
            _INHERITED.append(held)
            held = None
        if held is not None and (held.closed or held.invalidated):
            held = None
        if held is None:
            held = self.engine.connect().execution_options(sqlite_begin="IMMEDIATE")
            self._held, self._held_pid = held, pid
        elif held.in_transaction():
            return None
        return held

    @contextmanager
    def _read_transaction(self) -> Iterator[Connection]:
        # A deferred BEGIN: the snapshot is taken at the first read.
        conn = self._reader()
        try:
            with conn.begin():
                yield conn
        except BaseException:
            conn.close()  # back to the pool, which resets it
            raise
        self._idle_again(conn)

    def _reader(self) -> Connection:
        """A connection for a read transaction, kept from an earlier one when
        there is one.

        Read connections stay checked out of the pool between transactions,
        as the writer's does (``_held_writer``): a checkout, its events and
        the reset on check-in were about a quarter of a keyword search's CPU.
        Kept only after a transaction that committed, so each holds no
        snapshot and no lock (checkpoints and VACUUM never wait for it), and
        after a fork the child leaves the parent's alone."""
        pid = os.getpid()
        with self._idle_lock:
            if self._idle_pid != pid:
                _INHERITED.extend(self._idle)
                self._idle, self._idle_pid = [], pid
            while self._idle:
                conn = self._idle.pop()
                if not (conn.closed or conn.invalidated):
                    return conn
        return self.engine.connect()

    def _idle_again(self, conn: Connection) -> None:
        with self._idle_lock:
            if (
                not self._closing
                and self._idle_pid == os.getpid()
                and len(self._idle) < IDLE_READERS
                and not conn.invalidated
            ):
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        if self._checkpointer is not None:
            self._checkpointer.stop()
        with self._write_lock:
            held, self._held = self._held, None
            if held is not None and self._held_pid == os.getpid():
                held.close()
            self._turns.close()
        with self._idle_lock:
            self._closing = True
            idle, self._idle = self._idle, []
            ours = self._idle_pid == os.getpid()
        for conn in idle if ours else ():
            conn.close()
        self.engine.dispose()

    def sqlite_version(self) -> str:
        with self.read() as conn:
            return str(conn.exec_driver_sql("select sqlite_version()").scalar())

    def vec_version(self) -> str:
        with self.read() as conn:
            return str(conn.exec_driver_sql("select vec_version()").scalar())
