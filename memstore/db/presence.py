"""Who has a store open, so a schema change can run alone.

An open ``Store`` holds a *shared* hold on its database for as long as it is
open; ``memstore db upgrade`` / ``downgrade`` take an *exclusive* one, which
is refused at once while any store holds the shared one. A process that
changed the schema under a live store would make that store's next statement
fail (``no such table``), so the change waits for them to close instead.

Both holds live and die with the process or connection that took them, so
a crashed process never blocks a later migration:

- SQLite: ``flock`` on a sidecar file next to the database (``<file>-lock``,
  empty). SQLite's own locks are POSIX ``fcntl`` locks on the database file;
  ``flock`` locks are a separate kind on a separate file, so they never
  interfere. The kernel drops them when the process exits, however it exits.
  Where ``flock`` does not exist (Windows) there is no hold: the check is
  not made.
- PostgreSQL: a session-level advisory lock (shared for stores, exclusive
  for migrations) on a dedicated connection, scoped to the database; the
  server drops it when the connection ends.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import exc

from memstore.db.engine import Database
from memstore.errors import LockedError, MigrationError

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

# The advisory lock's key: any fixed number, the same in every memstore. It
# is scoped to the current database, so stores in other databases of one
# server never meet it.
ADVISORY_KEY = 0x6D656D73  # "mems"


def lock_path(db: Database) -> Path:
    return Path(f"{db.path}-lock")


class Hold:
    """One hold on a database (shared or exclusive); ``release`` ends it."""

    def __init__(self, release: Any = None) -> None:
        self._release = release

    def release(self) -> None:
        release, self._release = self._release, None
        if release is not None:
            release()


def hold_shared(db: Database, *, wait_s: float = 10.0) -> Hold:
    """What an open store holds. Waits up to ``wait_s`` while a schema change
    runs (it holds the exclusive hold), then raises ``LockedError``."""
    if db.dialect == "postgresql":
        return _pg_hold(db, shared=True, wait_s=wait_s)
    return _file_hold(db, shared=True, wait_s=wait_s)


def hold_exclusive(db: Database, *, wait_s: float = 0.0) -> Hold:
    """What a schema change holds; ``MigrationError`` while any store is open
    on ``db`` (in this process or another) after ``wait_s`` seconds."""
    if db.dialect == "postgresql":
        return _pg_hold(db, shared=False, wait_s=wait_s)
    return _file_hold(db, shared=False, wait_s=wait_s)


@contextlib.contextmanager
def exclusive(db: Database, *, wait_s: float = 0.0) -> Iterator[None]:
    hold = hold_exclusive(db, wait_s=wait_s)
    try:
        yield
    finally:
        hold.release()


def _refused(db: Database, holders: str) -> MigrationError:
    return MigrationError(
        f"{db.location} is open in {holders}: a schema change (upgrade or downgrade) runs only "
        "while no other process uses the store; close them (memstore serve, agents, other "
        "commands) and try again; nothing was changed"
    )


def _busy(db: Database, wait_s: float) -> LockedError:
    return LockedError(
        f"{db.location}: a schema change (memstore db upgrade/downgrade) is running; "
        f"it did not finish within {wait_s:g} s, try again when it has"
    )


def _file_hold(db: Database, *, shared: bool, wait_s: float) -> Hold:
    if fcntl is None:
        return Hold()
    try:
        fd = os.open(lock_path(db), os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        # A directory this process cannot write: SQLite could not keep its
        # -wal there either, so nothing of ours runs a write against it.
        return Hold()
    mode = (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, mode)
            break
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                if shared:
                    raise _busy(db, wait_s) from None
                raise _refused(db, "another store (this or another process)") from None
            time.sleep(0.05)
    # Closing the descriptor drops the flock.
    return Hold(lambda: os.close(fd))


def _pg_hold(db: Database, *, shared: bool, wait_s: float) -> Hold:
    from memstore.db.postgres import translate

    try:
        conn = db.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
    except exc.SQLAlchemyError as e:
        raise translate(e, "connect") from e
    fn = "pg_try_advisory_lock_shared" if shared else "pg_try_advisory_lock"
    deadline = time.monotonic() + wait_s
    try:
        while not conn.exec_driver_sql(f"SELECT {fn}({ADVISORY_KEY})").scalar():
            if time.monotonic() >= deadline:
                if shared:
                    raise _busy(db, wait_s)
                raise _refused(db, f"{_pg_holders(conn)} other connection(s)")
            time.sleep(0.05)
    except BaseException as e:
        conn.invalidate()
        conn.close()
        if isinstance(e, exc.SQLAlchemyError):
            raise translate(e, "schema hold") from e
        raise

    def release() -> None:
        # The lock is the session's: end the session rather than hand a
        # locked connection back to the pool.
        with contextlib.suppress(Exception):
            conn.invalidate()
            conn.close()

    return Hold(release)


def _pg_holders(conn: Any) -> int:
    return int(
        conn.exec_driver_sql(
            "SELECT count(DISTINCT pid) FROM pg_locks WHERE locktype = 'advisory' "
            "AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
            f"AND classid = 0 AND objid = {ADVISORY_KEY} AND pid <> pg_backend_pid()"
        ).scalar()
        or 0
    )


__all__ = ["ADVISORY_KEY", "Hold", "exclusive", "hold_exclusive", "hold_shared", "lock_path"]
