"""Durable work queue and TTL locks: the upstream's task queue and lock map.

All functions run in the caller's transaction. Claims run in
``Database.queue_write()``: on SQLite that is the write transaction (``BEGIN
IMMEDIATE``, one writer at a time), so two workers — threads or processes —
can never claim the same item or take the same lock. On PostgreSQL it is a
transaction *without* the event log's lock, and several workers claim at
once; two rules keep that exact:

- the candidate rows are read ``FOR UPDATE SKIP LOCKED``: a row another
  claim is looking at is skipped, never waited for, and a row claimed and
  committed meanwhile is re-checked by the server and dropped;
- a lock is taken by one conditional upsert (``acquire_lock``): it succeeds
  only if the row is still what we read (absent, or held by the same owner),
  so of two claimers racing for one session exactly one gets it.

``enqueue`` reads the open item ``FOR UPDATE``: a capture never folds its
work into an item a claim takes at that moment (it queues a new one).
Rows are always locked in the order queue row, then lock row (claim,
complete, fail, release, purge), so claims and completions cannot deadlock.
SQLite ignores ``FOR UPDATE``; the same statements run there.

Order of work: priority (L1 = 1 < L2 = 2 < L3 = 3, which is also the order
a user's derivation must run in), then FIFO by creation time within a
priority. An item is only claimable once its ``run_after`` has passed (that
is how retries wait) and while its lock is free: the lock of an L1 item is
per (user, session), so two workers never extract the same session at once;
L2 and L3 of a user share one lock because the persona reads the scenes.

Locks expire (``expires_at``), so a worker that died frees its session after
the TTL; a live worker renews its lock while it runs. A dead owner on this
host (``owners.is_dead``) is taken over at once, without waiting for the TTL. Leases (one scheduler
per database file) are locks with a reserved key.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote

from sqlalchemy import Connection, delete, or_, select, update

from memstore.db import backend, rawexec
from memstore.db.engine import Database
from memstore.db.schema import pipeline_locks, pipeline_queue
from memstore.db.sqlfn import in_list
from memstore.errors import InvalidInputError, LockedError
from memstore.pipeline import owners
from memstore.timeutil import timedelta, to_iso

STAGE_PRIORITY: dict[str, int] = {"l1": 1, "l2": 2, "l3": 3}


def q(part: str) -> str:
    """Quote an id for use inside a ``:``-separated key, so that user ``a``'s
    prefix ``l1:a:`` can never match user ``a:b``'s keys."""
    return quote(part, safe="")


def lock_key(stage: str, user_id: str, session_id: str = "") -> str:
    if stage == "l1":
        return f"l1:{q(user_id)}:{q(session_id)}"
    return f"user:{q(user_id)}"


# (stage, user, session): one unclaimed queue item at most per key.
WorkKey = tuple[str, str, str]


@dataclass(frozen=True)
class WorkItem:
    id: int
    user_id: str
    session_id: str
    stage: str
    priority: int
    created_at: str
    run_after: str
    attempts: int
    claimed_by: str | None
    claimed_until: str | None
    last_error: str | None

    @property
    def lock_key(self) -> str:
        return lock_key(self.stage, self.user_id, self.session_id)

    @property
    def work(self) -> WorkKey:
        """What the item does (ids are reused once a row is deleted; this is not)."""
        return (self.stage, self.user_id, self.session_id)


def _item(r: Any) -> WorkItem:
    return WorkItem(**r._mapping)


# -- queue ---------------------------------------------------------------------


_UNCLAIMED = (
    "SELECT id, run_after FROM pipeline_queue WHERE user_id = ? AND session_id = ? "
    "AND stage = ? AND claimed_by IS NULL"
)
_NEW_ITEM = (
    "INSERT INTO pipeline_queue (user_id, session_id, stage, priority, created_at, run_after, "
    "attempts) VALUES (?, ?, ?, ?, ?, ?, 0) RETURNING id"
)


def read_open_ahead(conn: Connection, user_id: str, stage: str, *, session_id: str = "") -> None:
    """``enqueue`` of this key will follow in this transaction (likely, not
    surely): on PostgreSQL its read of the open item goes to the server with
    the next round trip instead of one of its own. The read locks the item
    it finds until the transaction ends, as ``enqueue``'s own does."""
    lock = backend.of(conn).claim_lock()
    rawexec.prefetch(
        conn, _UNCLAIMED + lock, (user_id, session_id, stage), reads=("pipeline_queue",)
    )


def enqueue(
    conn: Connection,
    user_id: str,
    stage: str,
    *,
    now: datetime,
    session_id: str = "",
    run_after: datetime | None = None,
) -> int:
    """Queue work; an unclaimed item for the same (user, session, stage) is
    reused (its ``run_after`` moves earlier if this one is earlier)."""
    if stage not in STAGE_PRIORITY:
        raise InvalidInputError(f"unknown pipeline stage {stage!r}")
    due = to_iso(run_after or now)
    c = pipeline_queue.c
    # Driver-level: every capture past the warm-up threshold asks this, and
    # building the Core select cost more than running it (BENCHMARKS.md,
    # "Capture and search"). The backend's row lock keeps two claimers apart.
    lock = backend.of(conn).claim_lock()
    existing = rawexec.first(conn, _UNCLAIMED + lock, (user_id, session_id, stage))
    if existing is not None:
        item, after = int(existing[0]), existing[1]
        if due < after:
            conn.execute(update(pipeline_queue).where(c.id == item).values(run_after=due))
        return item
    row = (user_id, session_id, stage, STAGE_PRIORITY[stage], to_iso(now), due)
    return int(rawexec.scalar(conn, _NEW_ITEM, row))


def pending(conn: Connection, user_id: str | None = None) -> list[WorkItem]:
    """Every queued item (claimed or not), in run order."""
    c = pipeline_queue.c
    query = select(pipeline_queue).order_by(c.priority, c.created_at, c.id)
    if user_id is not None:
        query = query.where(c.user_id == user_id)
    return [_item(r) for r in conn.execute(query)]


_QUEUE_COLUMNS = ", ".join(f.name for f in dataclasses.fields(WorkItem))
_CLAIMERS = (
    "SELECT DISTINCT claimed_by FROM pipeline_queue "
    "WHERE claimed_by IS NOT NULL AND claimed_until >= ?"
)
_CLAIM = "UPDATE pipeline_queue SET claimed_by = ?, claimed_until = ? WHERE id = ?"


def claim(
    conn: Connection,
    owner: str,
    *,
    now: datetime,
    ttl_s: float,
    user_id: str | None = None,
    session_id: str | None = None,
    stages: tuple[str, ...] | None = None,
    accept: Callable[[WorkItem], bool] | None = None,
) -> WorkItem | None:
    """Take the first ready item whose lock is free, and its lock. Must run in
    ``Database.queue_write()``; the caller ends with ``complete``, ``fail`` or
    ``release``. ``accept`` leaves out items it says no to (a bounded run
    takes only the work it set out to do)."""
    now_s = to_iso(now)
    # Driver-level statements (memstore.db.rawexec): a claim runs under the
    # write lock, and building a Core statement per row tried cost more than
    # running it; with captures contending for the interpreter a claim held
    # the lock 5 ms at the median (92 ms at most, 8 capturing threads).
    # A claimed item is free again once its claim expired or its owner is
    # gone (``owners``: known only in Python, so found first, then named).
    dead = [str(o) for (o,) in rawexec.rows(conn, _CLAIMERS, (now_s,)) if owners.is_dead(str(o))]
    free = "claimed_by IS NULL OR claimed_until IS NULL OR claimed_until < ?"
    where = ["run_after <= ?"]
    params: list[Any] = [now_s, now_s]  # run_after, then the free clause's expiry
    if dead:
        marks, values = in_list(dead)
        free += f" OR claimed_by IN ({marks})"
        params += values
    where.append(f"({free})")
    for column, value in (("user_id", user_id), ("session_id", session_id)):
        if value is not None:
            where.append(f"{column} = ?")
            params.append(value)
    if stages is not None:
        if not stages:
            return None  # no stage: nothing to claim
        marks, values = in_list(list(stages))
        where.append(f"stage IN ({marks})")
        params += values
    skip = backend.of(conn).claim_skip_locked()
    tried: list[int] = []
    while True:
        # One row at a time: every other claimer skips a row locked here, so
        # locking a batch would hide all of it from them while this claim
        # runs (measured: a second worker process found the queue "empty" and
        # quit after 3 of 33 runs). Rows tried here whose session was busy
        # stay locked until this short transaction ends; no one could take
        # them meanwhile either.
        clauses, bound = list(where), list(params)
        if tried:
            marks, done = in_list(tried)
            clauses.append(f"id NOT IN ({marks})")
            bound += done
        sql = (
            f"SELECT {_QUEUE_COLUMNS} FROM pipeline_queue WHERE {' AND '.join(clauses)} "
            f"ORDER BY priority, created_at, id LIMIT 1{skip}"
        )
        r = rawexec.first(conn, sql, bound)
        if r is None:
            return None
        item = WorkItem(*r)
        tried.append(item.id)
        if accept is not None and not accept(item):
            continue
        if not acquire_lock(conn, item.lock_key, owner, now=now, ttl_s=ttl_s):
            continue
        until = to_iso(now + timedelta(seconds=ttl_s))
        rawexec.run(conn, _CLAIM, (owner, until, item.id))
        return WorkItem(**{**item.__dict__, "claimed_by": owner, "claimed_until": until})


def claim_in(
    db: Database,
    owner: str,
    *,
    now: Callable[[], datetime],
    ttl_s: float,
    user_id: str | None = None,
    session_id: str | None = None,
    stages: tuple[str, ...] | None = None,
    accept: Callable[[WorkItem], bool] | None = None,
    attempts: int = 3,
) -> WorkItem | None:
    """``claim`` in its own ``queue_write`` transaction. A claim the server
    aborted to break a lock cycle (PostgreSQL) or that found the database
    busy is simply tried again, a few times."""
    for attempt in range(attempts):
        try:
            with db.queue_write() as conn:
                return claim(
                    conn,
                    owner,
                    now=now(),
                    ttl_s=ttl_s,
                    user_id=user_id,
                    session_id=session_id,
                    stages=stages,
                    accept=accept,
                )
        except LockedError:
            if attempt == attempts - 1:
                raise
            time.sleep(0.05 * (attempt + 1))
    return None


def complete(conn: Connection, item: WorkItem, owner: str) -> None:
    conn.execute(delete(pipeline_queue).where(pipeline_queue.c.id == item.id))
    release_lock(conn, item.lock_key, owner)


def release(conn: Connection, item: WorkItem, owner: str) -> None:
    """Give an item back unrun (no attempt counted)."""
    _unclaim(conn, item, {"claimed_by": None, "claimed_until": None})
    release_lock(conn, item.lock_key, owner)


def retry_delay(attempts: int, *, base_s: float, steady: int, cap_s: float) -> float:
    """How long a job waits after its ``attempts``-th failure: ``base_s`` for
    the first ``steady`` failures, then doubling, never more than ``cap_s``.
    The job is never dropped: an outage longer than any fixed schedule must
    not leave work waiting for a human once the endpoint is back, and the cap
    bounds how long after the recovery it runs."""
    if attempts < max(steady, 1):
        return min(base_s, cap_s)
    doublings = min(attempts - max(steady, 1) + 1, 62)
    return float(min(cap_s, base_s * (2**doublings)))


def fail(
    conn: Connection,
    item: WorkItem,
    owner: str,
    *,
    error: str,
    now: datetime,
    delay_s: float,
) -> datetime:
    """Record a failed attempt; the item runs again ``delay_s`` from now
    (``retry_delay``). Returns when."""
    attempts = item.attempts + 1
    retry_at = now + timedelta(seconds=delay_s)
    _unclaim(
        conn,
        item,
        {
            "claimed_by": None,
            "claimed_until": None,
            "attempts": attempts,
            "run_after": to_iso(retry_at),
            "last_error": error[:2000],
        },
    )
    release_lock(conn, item.lock_key, owner)
    return retry_at


def hasten_retries(conn: Connection, *, now: datetime) -> int:
    """Make every waiting retry due now; returns how many. Called when a
    retried item succeeded: the endpoint that failed is back, so work that
    failed with it need not sit out its back-off (up to an hour)."""
    c = pipeline_queue.c
    res = conn.execute(
        update(pipeline_queue)
        .where(c.attempts > 0, c.claimed_by.is_(None), c.run_after > to_iso(now))
        .values(run_after=to_iso(now))
    )
    return int(res.rowcount or 0)


def _unclaim(conn: Connection, item: WorkItem, values: dict[str, Any]) -> None:
    c = pipeline_queue.c
    # Unclaiming re-enters the partial unique index: if a capture queued a
    # fresh item for the same key meanwhile, fold this one into it.
    other = conn.execute(
        select(c.id).where(
            c.user_id == item.user_id,
            c.session_id == item.session_id,
            c.stage == item.stage,
            c.claimed_by.is_(None),
            c.id != item.id,
        )
    ).first()
    if other is not None:
        conn.execute(delete(pipeline_queue).where(c.id == item.id))
        if "attempts" in values:
            conn.execute(
                update(pipeline_queue)
                .where(c.id == other.id)
                .values(attempts=values["attempts"], last_error=values.get("last_error"))
            )
        return
    conn.execute(update(pipeline_queue).where(c.id == item.id).values(**values))


def drop(conn: Connection, user_id: str, stage: str, session_id: str = "") -> int:
    """Remove unclaimed items of one key (work another path already did)."""
    c = pipeline_queue.c
    res = conn.execute(
        delete(pipeline_queue).where(
            c.user_id == user_id,
            c.session_id == session_id,
            c.stage == stage,
            c.claimed_by.is_(None),
        )
    )
    return int(res.rowcount or 0)


def next_run_after(conn: Connection) -> str | None:
    """When the earliest unclaimed item becomes ready (ISO text), if any."""
    # ix_pipeline_queue_next (migration 0021_capture) answers this from the
    # first entry of a partial index instead of sorting every unclaimed item;
    # the timer thread asks it after captures that open a session.
    got = rawexec.scalar(
        conn,
        "SELECT run_after FROM pipeline_queue WHERE claimed_by IS NULL ORDER BY run_after LIMIT 1",
    )
    return str(got) if got is not None else None


# -- locks ---------------------------------------------------------------------


_LOCK_HOLDER = "SELECT owner, expires_at FROM pipeline_locks WHERE key = ?"
_TAKE_LOCK = (
    "INSERT INTO pipeline_locks (key, owner, expires_at, acquired_at) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (key) DO UPDATE SET owner = excluded.owner, "
    "expires_at = excluded.expires_at, acquired_at = excluded.acquired_at "
    "WHERE {guard} RETURNING owner"
)


def acquire_lock(conn: Connection, key: str, owner: str, *, now: datetime, ttl_s: float) -> bool:
    """Take ``key`` for ``ttl_s`` seconds. Re-entrant for the same owner; an
    expired lock, or one whose owner is dead, is taken over.

    Atomic without a table lock: the upsert only overwrites the row if its
    owner is still the one read here (and inserts only where none was), so a
    claimer that raced us and won makes ours a no-op, which RETURNING shows."""
    now_s = to_iso(now)
    until = to_iso(now + timedelta(seconds=ttl_s))
    row = rawexec.first(conn, _LOCK_HOLDER, (key,))
    if row is not None and row[0] != owner and row[1] > now_s and not owners.is_dead(str(row[0])):
        return False
    # Overwrite only the holder read here; where none was read, only insert.
    guard = "pipeline_locks.owner = ?" if row is not None else "1 = 0"
    values = (key, owner, until, now_s, *((row[0],) if row is not None else ()))
    taken = rawexec.first(conn, _TAKE_LOCK.format(guard=guard), values)
    return taken is not None


def renew_lock(conn: Connection, key: str, owner: str, *, now: datetime, ttl_s: float) -> bool:
    """Extend a lock we still hold; False when it expired and someone took it."""
    lk = pipeline_locks.c
    res = conn.execute(
        update(pipeline_locks)
        .where(lk.key == key, lk.owner == owner)
        .values(expires_at=to_iso(now + timedelta(seconds=ttl_s)))
    )
    return bool(res.rowcount)


def release_lock(conn: Connection, key: str, owner: str) -> None:
    lk = pipeline_locks.c
    conn.execute(delete(pipeline_locks).where(lk.key == key, lk.owner == owner))


def lock_holder(conn: Connection, key: str, *, now: datetime) -> str | None:
    lk = pipeline_locks.c
    row = conn.execute(select(lk.owner, lk.expires_at).where(lk.key == key)).first()
    if row is None or row.expires_at <= to_iso(now) or owners.is_dead(row.owner):
        return None
    return str(row.owner)


# -- purge ---------------------------------------------------------------------


def purge_user(conn: Connection, user_id: str) -> int:
    """Remove a user's queued work and locks; returns items removed."""
    res = conn.execute(delete(pipeline_queue).where(pipeline_queue.c.user_id == user_id))
    lk = pipeline_locks.c
    conn.execute(
        delete(pipeline_locks).where(
            or_(
                lk.key.startswith(f"l1:{q(user_id)}:", autoescape=True),
                lk.key == lock_key("l2", user_id),
            )
        )
    )
    return int(res.rowcount or 0)


__all__ = [
    "STAGE_PRIORITY",
    "WorkItem",
    "WorkKey",
    "acquire_lock",
    "claim",
    "claim_in",
    "complete",
    "drop",
    "enqueue",
    "fail",
    "hasten_retries",
    "lock_holder",
    "lock_key",
    "next_run_after",
    "pending",
    "purge_user",
    "q",
    "read_open_ahead",
    "release",
    "release_lock",
    "renew_lock",
    "retry_delay",
]
