"""Durable timers on APScheduler 3.x, one running scheduler per database file.

Timers are APScheduler date jobs in a ``SQLAlchemyJobStore`` on the store's
own database (table ``apscheduler_jobs``), with stable ids, so they survive
a restart: ``misfire_grace_time=None`` makes an overdue timer fire when the
scheduler starts again, ``coalesce=True`` makes several missed runs one.

Job ids (user and session ids are percent-quoted so ``:`` cannot collide):

- ``l1-idle:<user>:<session>`` — extract a session idle for ``l1_idle_s``
- ``l2:<user>`` — the user's scene run (delay / min / max interval)
- ``drain`` — run queued work (retries that wait, work queued elsewhere)

Jobs are module-level functions taking ``(db_path, ...)`` strings: APScheduler
pickles them into the table. When one fires it finds the process's open
store for that path through a process-wide registry — ``register`` is
called by ``PipelineService.start`` (the service holds its ``DeriveContext``) and
``unregister`` by ``stop``; a job firing with no open store logs and does
nothing (the reconciler re-arms from the projection on the next open).

APScheduler 3 cannot share a job store between *running* schedulers, so
every process starts its scheduler **paused** (it may then add, replace and
remove jobs in the shared table) and only the holder of the database's
lease (a TTL lock, see ``queue``) resumes it. The holder wakes its
scheduler on every lease renewal so jobs written by other processes are
seen; if the holder dies the lease expires and another process takes over.

Transactions: the job store gets the engine with ``sqlite_begin=IMMEDIATE``
(our ``begin`` listener then issues ``BEGIN IMMEDIATE``), so its
read-then-write transactions never fail on a stale WAL snapshot. It does not
take ``Database.write()``'s in-process lock, so a thread that holds
``db.write()`` must never touch the job store (it would wait on itself until
busy_timeout): every job-store write here happens after the capture
transaction commits, on the service's timer thread.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from apscheduler.executors.pool import BasePoolExecutor
from apscheduler.job import Job
from apscheduler.jobstores.base import JobLookupError
from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.schedulers.base import STATE_RUNNING
from sqlalchemy import Connection, text

from memstore.db.engine import Database
from memstore.errors import PipelineError
from memstore.pipeline.queue import q
from memstore.pipeline.threads import DaemonPool
from memstore.timeutil import UTC

log = logging.getLogger(__name__)

JOBSTORE = "default"
DRAIN_JOB_ID = "drain"
JOB_TABLE = "apscheduler_jobs"


def idle_job_id(user_id: str, session_id: str) -> str:
    return f"l1-idle:{q(user_id)}:{q(session_id)}"


def l2_job_id(user_id: str) -> str:
    return f"l2:{q(user_id)}"


# -- the registry jobs use to find their store --------------------------------


class JobTarget(Protocol):
    def on_idle_timer(self, user_id: str, session_id: str) -> None: ...
    def on_l2_timer(self, user_id: str) -> None: ...
    def on_drain_timer(self) -> None: ...


_registry: dict[str, JobTarget] = {}
_registry_lock = threading.Lock()


def _key(db_path: str | Path) -> str:
    return str(Path(db_path).resolve())


def register(db_path: str | Path, target: JobTarget) -> None:
    with _registry_lock:
        _registry[_key(db_path)] = target


def unregister(db_path: str | Path, target: JobTarget) -> None:
    with _registry_lock:
        if _registry.get(_key(db_path)) is target:
            del _registry[_key(db_path)]


def lookup(db_path: str | Path) -> JobTarget | None:
    with _registry_lock:
        return _registry.get(_key(db_path))


def _fire(db_path: str, job: str, call: Callable[[JobTarget], None]) -> None:
    """Run a timer's callback. Never raises into APScheduler (it would log a
    traceback): a failure is logged here, and reconcile re-arms from the
    durable state; while the store closes it is expected and stays quiet."""
    t = lookup(db_path)
    if t is None:
        # Normal while a store closes, or in a process that no longer has it open.
        log.debug("timer %s fired for %s but no store is open there; skipped", job, db_path)
        return
    try:
        call(t)
    except Exception as e:
        if getattr(t, "stopping", False):
            log.debug("timer %s interrupted by close: %s: %s", job, type(e).__name__, e)
        else:
            log.warning("timer %s failed (reconcile retries): %s: %s", job, type(e).__name__, e)


def fire_l1_idle(db_path: str, user_id: str, session_id: str) -> None:
    _fire(
        db_path,
        idle_job_id(user_id, session_id),
        lambda t: t.on_idle_timer(user_id, session_id),
    )


def fire_l2(db_path: str, user_id: str) -> None:
    _fire(db_path, l2_job_id(user_id), lambda t: t.on_l2_timer(user_id))


def fire_drain(db_path: str) -> None:
    _fire(db_path, DRAIN_JOB_ID, lambda t: t.on_drain_timer())


class _QuietLogger:
    """APScheduler's log calls, sent to our logger at DEBUG: skipped runs
    ("maximum number of running instances"), "database is locked" while
    polling the job table and timers removed under it are all routine here
    (reconcile repairs timers). Real errors stay visible as warnings."""

    name = "memstore.pipeline.apscheduler"

    def __init__(self) -> None:
        self._log = logging.getLogger(self.name)

    def debug(self, msg: str, *args: Any, **kw: Any) -> None:
        self._log.debug(msg, *args, **kw)

    info = warning = debug

    def error(self, msg: str, *args: Any, **kw: Any) -> None:
        self._log.warning(msg, *args, **kw)

    def exception(self, msg: str, *args: Any, **kw: Any) -> None:
        self._log.warning(msg, *args, exc_info=True, **kw)

    critical = error


_QUIET = _QuietLogger()


def _to_debug(record: logging.LogRecord) -> bool:
    if record.levelno < logging.ERROR:
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
    return True


# APScheduler's job runner logs "Running job" / "executed successfully" at
# INFO through ``logging.getLogger(executor._logger.name)``: that real logger
# gets its records demoted.
_JOBS_LOG = logging.getLogger("memstore.pipeline.apscheduler.jobs")
_JOBS_LOG.addFilter(_to_debug)


class _DaemonExecutor(BasePoolExecutor):  # type: ignore[misc]
    """APScheduler's thread pool executor on daemon threads (``threads``): a
    stuck job can never keep the process from exiting; shutdown waits for
    running jobs at most ``close_timeout_s``."""

    def __init__(self, max_workers: int, close_timeout_s: float) -> None:
        super().__init__(DaemonPool(max_workers, "memstore-timer-job"))
        self._close_timeout_s = close_timeout_s

    def start(self, scheduler: Any, alias: str) -> None:
        super().start(scheduler, alias)
        self._logger = _JOBS_LOG

    def shutdown(self, wait: bool = True) -> None:
        self._pool.shutdown(wait, timeout=self._close_timeout_s)

    def wait_idle(self) -> bool:
        """Wait (bounded) for running jobs; call with no APScheduler lock held."""
        return bool(self._pool.shutdown(True, timeout=self._close_timeout_s))


# -- timers ----------------------------------------------------------------------


class _SharedEngineJobStore(SQLAlchemyJobStore):  # type: ignore[misc]
    """The job store on our engine: the ``Database`` owns and disposes it.

    Its writes take the database's in-process write lock, like every other
    writer here: otherwise a timer write queues in SQLite's busy handler behind
    a long capture batch and fails with "database is locked" after
    busy_timeout (seen in bench scale)."""

    def __init__(self, *, write_lock: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._write_lock = write_lock

    def add_job(self, job: Any) -> None:
        with self._write_lock:
            super().add_job(job)

    def update_job(self, job: Any) -> None:
        with self._write_lock:
            super().update_job(job)

    def remove_job(self, job_id: str) -> None:
        with self._write_lock:
            super().remove_job(job_id)

    def remove_all_jobs(self) -> None:
        with self._write_lock:
            super().remove_all_jobs()

    def start(self, scheduler: Any, alias: str) -> None:
        super().start(scheduler, alias)
        self._logger = _QUIET

    def shutdown(self) -> None:
        pass


class _Scheduler(BackgroundScheduler):  # type: ignore[misc]
    """APScheduler 3.11's loop runs ``_process_jobs`` once more after
    ``shutdown`` (state STOPPED is not PAUSED): a paused process closing would
    then fire due jobs into a shut-down executor and delete them from the
    shared table. Only a running scheduler may process jobs."""

    def _process_jobs(self) -> float | None:
        if self.state != STATE_RUNNING:
            return None
        try:
            wait: float | None = super()._process_jobs()
        except Exception as e:
            # E.g. JobLookupError: a due job was removed or replaced by another
            # thread or process between APScheduler's read and its delete.
            # Uncaught, it ends the scheduler's thread and no timer fires again.
            _QUIET.debug("timer loop: %s: %s; retrying", type(e).__name__, e)
            return 1.0
        return wait


class Timers:
    """APScheduler behind the four timer operations of the upstream backend
    (set, set-if-earlier, remove, expired) plus pause/resume for the lease."""

    def __init__(
        self, db: Database, *, executor_threads: int = 2, close_timeout_s: float = 10.0
    ) -> None:
        self._db = db
        self._threads = executor_threads
        self._close_timeout_s = close_timeout_s
        self._sched: BackgroundScheduler | None = None
        self._executor: _DaemonExecutor | None = None
        self._lock = threading.RLock()
        self._paused = True
        self._closed = False

    def _scheduler(self) -> BackgroundScheduler:
        with self._lock:
            if self._closed:
                raise PipelineError("timers are shut down")
            if self._sched is None:
                executor = _DaemonExecutor(self._threads, self._close_timeout_s)
                store = _SharedEngineJobStore(
                    engine=self._db.engine.execution_options(sqlite_begin="IMMEDIATE"),
                    tablename=JOB_TABLE,
                    write_lock=self._db._write_lock,
                )
                sched = _Scheduler(
                    jobstores={JOBSTORE: store},
                    executors={"default": executor},
                    job_defaults={
                        "coalesce": True,
                        "misfire_grace_time": None,
                        "max_instances": 2,
                    },
                    timezone=UTC,
                    daemon=True,
                    logger=_QUIET,
                )
                sched.start(paused=True)
                self._sched = sched
                self._executor = executor
            return self._sched

    @property
    def running(self) -> bool:
        """True when this process's scheduler executes jobs (it holds the lease)."""
        return self._sched is not None and not self._paused

    def resume(self) -> None:
        with self._lock:
            self._scheduler().resume()
            self._paused = False

    def pause(self) -> None:
        with self._lock:
            if self._sched is not None:
                self._sched.pause()
            self._paused = True

    @property
    def closed(self) -> bool:
        return self._closed

    def wakeup(self) -> None:
        """Re-read the job table (jobs other processes wrote); restart the
        scheduler if its thread died (called on every lease renewal)."""
        with self._lock:
            sched = self._sched
            if sched is None or self._paused or self._closed:
                return
            thread = getattr(sched, "_thread", None)
            if thread is None or not thread.is_alive():
                log.warning("the timer thread had died; restarting it")
                self._sched = None
                with contextlib.suppress(Exception):
                    sched.shutdown(wait=False)
                self._scheduler().resume()
                return
        sched.wakeup()

    def shutdown(self, wait: bool = True) -> None:
        # Wait for running jobs outside every lock. Ours: a job may need it to
        # arm a timer (drain -> arm L2). APScheduler's: its shutdown(wait=True)
        # waits while holding the job-store lock, and a running job calling
        # get_job() waits for that lock forever (a close hung for good, seen
        # in tests/test_hermes_contract.py).
        with self._lock:
            sched, self._sched = self._sched, None
            executor, self._executor = self._executor, None
            self._closed = True
            self._paused = True
        if sched is not None:
            sched.shutdown(wait=False)
        if wait and executor is not None:
            executor.wait_idle()

    # -- operations -------------------------------------------------------------

    def set(
        self, job_id: str, func: Callable[..., None], args: Sequence[str], run_at: datetime
    ) -> None:
        if self._closed:
            # A job finishing while the store closes: its timer stays undone
            # and the reconciler re-arms it from durable state on next open.
            log.debug("timers closed; %s not armed", job_id)
            return
        self._scheduler().add_job(
            func,
            trigger="date",
            run_date=run_at,
            args=list(args),
            id=job_id,
            name=job_id,
            replace_existing=True,
            jobstore=JOBSTORE,
        )

    def set_if_earlier(
        self, job_id: str, func: Callable[..., None], args: Sequence[str], run_at: datetime
    ) -> bool:
        """Arm unless the timer is already due at or before ``run_at``."""
        current = self.get(job_id)
        if current is not None and current <= run_at:
            return False
        self.set(job_id, func, args, run_at)
        return True

    def remove(self, job_id: str) -> bool:
        if self._closed:
            return False
        try:
            self._scheduler().remove_job(job_id, jobstore=JOBSTORE)
        except JobLookupError:
            return False
        return True

    def get(self, job_id: str) -> datetime | None:
        if self._closed:
            return None
        job = self._scheduler().get_job(job_id, jobstore=JOBSTORE)
        if job is None or job.next_run_time is None:
            return None
        when: datetime = job.next_run_time
        return when

    def jobs(self, prefix: str = "") -> list[tuple[str, datetime | None]]:
        out: list[tuple[str, datetime | None]] = []
        for job in self._scheduler().get_jobs(jobstore=JOBSTORE):
            if str(job.id).startswith(prefix):
                out.append((str(job.id), job.next_run_time))
        return out

    def due(self, now: datetime) -> list[Job]:
        store = self._scheduler()._lookup_jobstore(JOBSTORE)
        jobs: list[Job] = store.get_due_jobs(now)
        return jobs

    def run_due(self, now: datetime) -> list[str]:
        """The due-job path without the scheduler thread: remove each due
        one-shot job and call its function in this thread. Deterministic
        (tests drive it with a controlled clock)."""
        fired: list[str] = []
        for job in self.due(now):
            self.remove(str(job.id))
            fired.append(str(job.id))
            job.func(*job.args, **job.kwargs)
        return fired


def purge_user_jobs(conn: Connection, user_id: str) -> int:
    """Delete a user's timers inside the caller's transaction (a plain DELETE
    on APScheduler's table: the running scheduler re-reads it every wakeup)."""
    prefix = f"l1-idle:{q(user_id)}:"
    res = conn.execute(
        text(f"DELETE FROM {JOB_TABLE} WHERE substr(id, 1, :n) = :p OR id = :l2"),
        {"n": len(prefix), "p": prefix, "l2": l2_job_id(user_id)},
    )
    return int(res.rowcount or 0)


def job_args(db_path: Path, *rest: str) -> list[Any]:
    return [str(Path(db_path).resolve()), *rest]


__all__ = [
    "DRAIN_JOB_ID",
    "JobTarget",
    "Timers",
    "fire_drain",
    "fire_l1_idle",
    "fire_l2",
    "idle_job_id",
    "job_args",
    "l2_job_id",
    "lookup",
    "purge_user_jobs",
    "register",
    "unregister",
]
