"""Waiting for queue work another worker holds, without polling its own process.

``run_pipeline`` and ``end_session`` wait for items another worker holds
(the store's scheduler, another thread's drain, another process). Each of
this process's workers calls ``released`` once the transaction that
completed, failed or gave back an item has committed, and the waiters look
at the queue again at once; they used to read it every 20 ms for up to 30 s.
A holder in another process cannot reach them: for it they poll, every
``OTHER_PROCESS_POLL_S``. A holder here is looked at again every
``LOCAL_RECHECK_S`` as well, for the claim that expires or whose service
closes without a release.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from memstore.pipeline import owners

OTHER_PROCESS_POLL_S = 0.1
LOCAL_RECHECK_S = 1.0

_changed = threading.Condition()
_releases = 0


def released() -> None:
    """A worker of this process let go of a queue item (after its commit)."""
    global _releases
    with _changed:
        _releases += 1
        _changed.notify_all()


def mark() -> int:
    """Take before reading the queue; ``wait`` then returns at once for a
    release that happened after it, even one before the wait began."""
    with _changed:
        return _releases


def wait(since: int, holders: Iterable[str | None], timeout_s: float) -> None:
    """Until a worker of this process released an item after ``since`` (a
    ``mark``), or the poll interval for these holders, at most ``timeout_s``."""
    held_by = list(holders)
    local = bool(held_by) and all(h is not None and owners.is_local(h) for h in held_by)
    step = LOCAL_RECHECK_S if local else OTHER_PROCESS_POLL_S
    with _changed:
        _changed.wait_for(lambda: _releases != since, max(0.0, min(timeout_s, step)))


__all__ = ["LOCAL_RECHECK_S", "OTHER_PROCESS_POLL_S", "mark", "released", "wait"]
