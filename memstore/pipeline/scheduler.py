"""Durable timers on APScheduler 3.x, through its public API only.

Timers are APScheduler date jobs in a ``SQLAlchemyJobStore`` on the store's
own database (table ``apscheduler_jobs``), with stable ids, so they survive
a restart: ``misfire_grace_time=None`` makes an overdue timer fire when the
scheduler starts again, ``coalesce=True`` makes several missed runs one.
APScheduler holds the timers; the queue (``queue``) holds the work.

Job ids (user and session ids are percent-quoted so ``:`` cannot collide):

- ``l1-idle:<user>:<session>`` — extract a session idle for ``l1_idle_s``
- ``l2:<user>`` — the user's scene run (delay / min / max interval)
- ``drain`` — run queued work (retries that wait, work queued elsewhere)
- ``retention`` — erase what is older than ``retention_days`` (memstore/forgetting/retention.py),
  then arm itself again; armed by reconcile while the setting is above 0

**How a stored job reaches the service, without a global.** A job is
stored as a textual reference (``memstore.pipeline.scheduler:idle_timer``)
and plain string arguments (user and session ids), so any process can write
it and the pickle holds no object. Each ``Timers`` builds its own scheduler
with its own executor, ``TargetExecutor``, handed the ``PipelineService``
that owns it; the executor calls the job's function with that service as
the keyword argument ``target``. The executor is a ``BaseExecutor``
subclass given to the scheduler through the public ``executors=`` option,
implementing the class's abstract ``_do_submit_job`` and reporting back
through ``_run_job_success`` — the extension contract APScheduler documents
for custom executors ("Extending APScheduler"), and the only underscore
names of APScheduler's used in ``memstore.pipeline``
(``tests/pipeline/test_pipeline_apscheduler.py`` checks that).
So two stores open in one process have two schedulers, each firing into
its own service; nothing is registered process-wide.

**One running scheduler per file.** APScheduler 3 cannot share a job store
between *running* schedulers, so every process starts its scheduler
**paused** (it may add, replace and remove jobs in the shared table) and
only the holder of the file's lease (``lease``) resumes it; the holder
wakes it on every renewal to see jobs other processes wrote. When the
holder dies its lease expires and another process takes over.

**Closing.** APScheduler 3.11's loop processes jobs once more after
``shutdown`` (STOPPED is not PAUSED): a closing paused process would fire
due jobs into a stopped executor and delete them from the shared table.
``shutdown`` therefore first detaches the job store (public
``remove_jobstore``), so that last pass sees no jobs.

**The loop never dies.** After firing a job APScheduler deletes its row; if
the row is already gone (another process removed or replaced it) or the
delete hits "database is locked", the exception would end the scheduler's
thread for good. The job store's ``remove_job`` (a public job-store method)
therefore treats a missing row as removed and a failed delete as a row to
be fired again (every timer callback is idempotent: it re-reads the state).

**No lock of the database's.** The job store uses the database's engine
but none of its locks: its writes wait in SQLite's busy handler like any
other process's. Its transactions are DEFERRED, so reading the table (the
loop's poll, ``get``) never takes the write lock.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Protocol, TypeVar

from apscheduler.executors.base import BaseExecutor
from apscheduler.job import Job
from apscheduler.jobstores.base import ConflictingIdError, JobLookupError
from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
from apscheduler.schedulers.background import BackgroundScheduler
from sqlalchemy import Connection, text
from sqlalchemy.exc import OperationalError, SQLAlchemyError

from memstore.db.engine import Database
from memstore.errors import PipelineError
from memstore.logtext import loggable
from memstore.pipeline.queue import q
from memstore.pipeline.threads import DaemonPool
from memstore.timeutil import UTC

_T = TypeVar("_T")

log = logging.getLogger(__name__)

# The job store's alias names its logger ("apscheduler.jobstores.memstore"),
# which only our job stores use. The executor keeps APScheduler's default
# alias (stored with each job), so the scheduler adds no pool of its own.
JOBSTORE = "memstore"
EXECUTOR = "default"
DRAIN_JOB_ID = "drain"
RETENTION_JOB_ID = "retention"
JOB_TABLE = "apscheduler_jobs"

# What a stored job calls (resolved by APScheduler in whichever process runs it).
IDLE_TIMER = "memstore.pipeline.scheduler:idle_timer"
L2_TIMER = "memstore.pipeline.scheduler:l2_timer"
DRAIN_TIMER = "memstore.pipeline.scheduler:drain_timer"
RETENTION_TIMER = "memstore.pipeline.scheduler:retention_timer"


def idle_job_id(user_id: str, session_id: str) -> str:
    return f"l1-idle:{q(user_id)}:{q(session_id)}"


def l2_job_id(user_id: str) -> str:
    return f"l2:{q(user_id)}"


# -- the jobs --------------------------------------------------------------------


class JobTarget(Protocol):
    """What timer jobs call: the ``PipelineService`` owning the scheduler."""

    def on_idle_timer(self, user_id: str, session_id: str) -> None: ...
    def on_l2_timer(self, user_id: str) -> None: ...
    def on_drain_timer(self) -> None: ...
    def on_retention_timer(self) -> None: ...
    @property
    def stopping(self) -> bool: ...


def _target(target: JobTarget | None) -> JobTarget:
    # ``target`` defaults to None only so that APScheduler's argument check
    # (made when a job is added, with the stored arguments alone) passes.
    if target is None:
        raise PipelineError("a timer job runs only through its scheduler's TargetExecutor")
    return target


def idle_timer(user_id: str, session_id: str, *, target: JobTarget | None = None) -> None:
    _target(target).on_idle_timer(user_id, session_id)


def l2_timer(user_id: str, *, target: JobTarget | None = None) -> None:
    _target(target).on_l2_timer(user_id)


def drain_timer(*, target: JobTarget | None = None) -> None:
    _target(target).on_drain_timer()


def retention_timer(*, target: JobTarget | None = None) -> None:
    _target(target).on_retention_timer()


def run_job(job: Job, target: JobTarget) -> None:
    """Call a timer job's function for ``target``. Never raises an Exception
    into APScheduler (it would log a traceback): a failure is logged here,
    and reconcile re-arms from the durable state; while the service stops it
    is expected and stays quiet."""
    try:
        job.func(*job.args, **job.kwargs, target=target)
    except Exception as e:
        if target.stopping:
            log.debug("timer %s interrupted by close: %s: %s", job.id, type(e).__name__, e)
        else:
            log.warning("timer %s failed (reconcile retries): %s", job.id, loggable(e))


class TargetExecutor(BaseExecutor):  # type: ignore[misc]
    """Runs due jobs for one target on daemon threads (``threads``): a stuck
    job never keeps the process from exiting; ``wait_idle`` waits for running
    jobs at most ``close_timeout_s``."""

    def __init__(self, target: JobTarget, max_workers: int, close_timeout_s: float) -> None:
        super().__init__()
        self.target = target
        self.close_timeout_s = close_timeout_s
        self.workers = DaemonPool(max_workers, "memstore-timer-job")

    def _do_submit_job(self, job: Job, run_times: Sequence[datetime]) -> None:
        # Coalesced (``coalesce=True``): one call however many runs were missed.
        self.workers.submit(self._run, job)

    def _run(self, job: Job) -> None:
        try:
            run_job(job, self.target)
        finally:
            # Counts the instance as finished (max_instances); no events: no
            # one listens to them.
            self._run_job_success(job.id, [])

    def shutdown(self, wait: bool = True) -> None:
        self.workers.shutdown(wait, timeout=self.close_timeout_s)

    def wait_idle(self) -> bool:
        """Wait (bounded) for running jobs; call with no APScheduler lock held."""
        return bool(self.workers.shutdown(True, timeout=self.close_timeout_s))


# -- APScheduler's logging ----------------------------------------------------------


class _QuietLogger:
    """The scheduler's ``logger`` option: its calls go to our logger at
    DEBUG. Skipped runs ("maximum number of running instances"), "database
    is locked" while polling the job table and timers removed under it are
    all routine here (reconcile repairs timers). Real errors stay visible as
    warnings."""

    name = "memstore.pipeline.apscheduler"

    def __init__(self) -> None:
        self.logger = logging.getLogger(self.name)

    def debug(self, msg: str, *args: Any, **kw: Any) -> None:
        self.logger.debug(msg, *args, **kw)

    info = warning = debug

    def error(self, msg: str, *args: Any, **kw: Any) -> None:
        self.logger.warning(msg, *args, **kw)

    def exception(self, msg: str, *args: Any, **kw: Any) -> None:
        self.logger.warning(msg, *args, exc_info=True, **kw)

    critical = error


_QUIET = _QuietLogger()


def _to_debug(record: logging.LogRecord) -> bool:
    if record.levelno < logging.ERROR:
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
    return True


# The job store logs through "apscheduler.jobstores.<alias>" (e.g. a job
# it cannot restore, which it then deletes): routine, demoted to DEBUG.
logging.getLogger(f"apscheduler.jobstores.{JOBSTORE}").addFilter(_to_debug)


# -- timers ----------------------------------------------------------------------


_REARM_TRIES = 5


class TimerJobStore(SQLAlchemyJobStore):  # type: ignore[misc]
    """APScheduler's SQLAlchemy job store on the database's engine (the
    ``Database`` owns and disposes it), with a ``remove_job`` that cannot end
    the scheduler's loop (see the module docstring) and an ``update_job`` that
    survives another process deleting the row."""

    def update_job(self, job: Job) -> None:
        # ``add_job(replace_existing=True)`` is an insert, then on conflict an
        # update. With several processes on one job table (serve --workers N)
        # the row can vanish in between: another process fired the timer and
        # deleted it. Arming means "this row exists with this state", so a
        # missing row is inserted again; a bounded loop covers it reappearing.
        for _ in range(_REARM_TRIES):
            try:
                super().update_job(job)
                return
            except JobLookupError:
                try:
                    super().add_job(job)
                    return
                except ConflictingIdError:
                    continue
        super().update_job(job)

    def remove_job(self, job_id: str) -> None:
        try:
            super().remove_job(job_id)
        except JobLookupError:
            pass  # already gone: removed is what the caller wanted
        except SQLAlchemyError as e:
            # Left in place, a fired job fires again: callbacks are idempotent.
            log.debug("could not delete timer %s (it may fire again): %s", job_id, e)

    # Reading jobs can write: a row APScheduler cannot restore (a job of an
    # older memstore) is deleted in the same transaction as the read. That
    # transaction starts deferred, so when another connection wrote the job
    # table in between, SQLite refuses the upgrade at once ("database is
    # locked", no busy wait). A fresh transaction sees the new snapshot.
    def get_due_jobs(self, now: datetime) -> list[Job]:
        return _retry_stale(lambda: super(TimerJobStore, self).get_due_jobs(now))

    def get_all_jobs(self) -> list[Job]:
        return _retry_stale(lambda: super(TimerJobStore, self).get_all_jobs())

    def lookup_job(self, job_id: str) -> Job | None:
        return _retry_stale(lambda: super(TimerJobStore, self).lookup_job(job_id))

    def shutdown(self) -> None:
        pass


def _retry_stale(read: Callable[[], _T], attempts: int = 5) -> _T:
    for attempt in range(attempts):
        try:
            return read()
        except OperationalError as e:
            if "locked" not in str(e) or attempt == attempts - 1:
                raise
            time.sleep(0.01 * (attempt + 1))
    raise AssertionError("unreachable")


class Timers:
    """APScheduler behind the four timer operations of the upstream backend
    (set, set-if-earlier, remove, expired) plus pause/resume for the lease."""

    def __init__(
        self,
        db: Database,
        target: JobTarget,
        *,
        executor_threads: int = 2,
        close_timeout_s: float = 10.0,
    ) -> None:
        self.db = db
        self.target = target
        self.executor_threads = executor_threads
        self.close_timeout_s = close_timeout_s
        self.store: TimerJobStore | None = None
        self.sched: BackgroundScheduler | None = None
        self.executor: TargetExecutor | None = None
        self.lock = threading.RLock()
        self.paused = True
        self.closed = False

    def scheduler(self) -> BackgroundScheduler:
        """This process's APScheduler (created paused on first use)."""
        with self.lock:
            if self.closed:
                raise PipelineError("timers are shut down")
            if self.sched is None:
                executor = TargetExecutor(self.target, self.executor_threads, self.close_timeout_s)
                store = TimerJobStore(engine=self.db.engine, tablename=JOB_TABLE)
                sched = BackgroundScheduler(
                    jobstores={JOBSTORE: store},
                    executors={EXECUTOR: executor},
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
                self.sched, self.store, self.executor = sched, store, executor
            return self.sched

    @property
    def running(self) -> bool:
        """True when this process's scheduler executes jobs (it holds the lease)."""
        return self.sched is not None and not self.paused

    def resume(self) -> None:
        with self.lock:
            self.scheduler().resume()
            self.paused = False

    def pause(self) -> None:
        with self.lock:
            if self.sched is not None:
                self.sched.pause()
            self.paused = True

    def wakeup(self) -> None:
        """Re-read the job table (jobs other processes wrote); called on every
        lease renewal."""
        with self.lock:
            sched = self.sched
            if sched is None or self.paused or self.closed:
                return
        sched.wakeup()

    def shutdown(self, wait: bool = True) -> None:
        # Wait for running jobs outside every lock. Ours: a job may need it to
        # arm a timer (drain -> arm L2). APScheduler's: its shutdown(wait=True)
        # waits while holding the job-store lock, and a running job calling
        # get_job() waits for that lock forever (a close hung for good, seen
        # in tests/provider/test_hermes_contract.py).
        with self.lock:
            sched, self.sched = self.sched, None
            executor, self.executor = self.executor, None
            self.closed = True
            self.paused = True
        if sched is not None:
            # Detached first: the loop's pass after shutdown then fires nothing.
            sched.remove_jobstore(JOBSTORE, shutdown=False)
            sched.shutdown(wait=False)
        if wait and executor is not None:
            executor.wait_idle()

    # -- operations -------------------------------------------------------------

    def set(self, job_id: str, func: str, args: Sequence[str], run_at: datetime) -> None:
        """Arm ``job_id`` to call ``func`` (a textual reference) with ``args``."""
        if self.closed:
            # A job finishing while the store closes: its timer stays undone
            # and the reconciler re-arms it from durable state on next open.
            log.debug("timers closed; %s not armed", job_id)
            return
        self.scheduler().add_job(
            func,
            trigger="date",
            run_date=run_at,
            args=list(args),
            id=job_id,
            name=job_id,
            replace_existing=True,
            jobstore=JOBSTORE,
            executor=EXECUTOR,
        )

    def set_if_earlier(self, job_id: str, func: str, args: Sequence[str], run_at: datetime) -> bool:
        """Arm unless the timer is already due at or before ``run_at``."""
        return self.due_by(job_id, func, args, run_at)[1]

    def due_by(
        self, job_id: str, func: str, args: Sequence[str], run_at: datetime
    ) -> tuple[datetime, bool]:
        """``set_if_earlier`` that also says when the timer is due now."""
        current = self.get(job_id)
        if current is not None and current <= run_at:
            return current, False
        self.set(job_id, func, args, run_at)
        return run_at, True

    def remove(self, job_id: str) -> None:
        if not self.closed:
            self.scheduler().remove_job(job_id, jobstore=JOBSTORE)

    def get(self, job_id: str) -> datetime | None:
        if self.closed:
            return None
        job = self.scheduler().get_job(job_id, jobstore=JOBSTORE)
        if job is None or job.next_run_time is None:
            return None
        when: datetime = job.next_run_time
        return when

    def jobs(self, prefix: str = "") -> list[tuple[str, datetime | None]]:
        out: list[tuple[str, datetime | None]] = []
        for job in self.scheduler().get_jobs(jobstore=JOBSTORE):
            if str(job.id).startswith(prefix):
                out.append((str(job.id), job.next_run_time))
        return out

    def run_due(self, now: datetime) -> list[str]:
        """The due-job path without the scheduler thread: remove each due
        one-shot job and run it in this thread, as the executor would.
        Deterministic (tests drive it with a controlled clock)."""
        self.scheduler()
        assert self.store is not None
        fired: list[str] = []
        for job in self.store.get_due_jobs(now):
            self.remove(str(job.id))
            fired.append(str(job.id))
            run_job(job, self.target)
        return fired


def purge_user_jobs(conn: Connection, user_id: str) -> int:
    """Delete a user's timers inside the caller's transaction (a plain DELETE
    on APScheduler's table by job id: the running scheduler re-reads it every
    wakeup)."""
    prefix = f"l1-idle:{q(user_id)}:"
    res = conn.execute(
        text(f"DELETE FROM {JOB_TABLE} WHERE substr(id, 1, :n) = :p OR id = :l2"),
        {"n": len(prefix), "p": prefix, "l2": l2_job_id(user_id)},
    )
    return int(res.rowcount or 0)


__all__ = [
    "DRAIN_JOB_ID",
    "DRAIN_TIMER",
    "IDLE_TIMER",
    "L2_TIMER",
    "RETENTION_JOB_ID",
    "RETENTION_TIMER",
    "JobTarget",
    "TargetExecutor",
    "Timers",
    "drain_timer",
    "idle_job_id",
    "idle_timer",
    "l2_job_id",
    "l2_timer",
    "purge_user_jobs",
    "run_job",
]
