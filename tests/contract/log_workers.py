"""Child processes of test_concurrent_writers: they import only the database
and the log (not the whole Store), so spawning them stays cheap."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import text

from memstore.db.connect import open_database
from memstore.derive.messages.events import SessionEnded
from memstore.event_types import register_all
from memstore.events.log import EventLog, NewEvent

APPENDS = 30


def writer(target: str, wid: int, start: Any) -> None:
    start.wait(120)
    db = open_database(target)
    log = EventLog(register_all())  # a bare log knows only the types it is given
    try:
        for i in range(APPENDS):
            # 1-3 events per append, on a private and shared streams; every
            # third append repeats the previous idempotency key (a retry).
            n = 1 + i % 3
            key = f"w{wid}-{i - 1 if i % 3 == 2 else i}"
            batch = [
                NewEvent(
                    f"shared/{j}" if j else f"w/{wid}",
                    SessionEnded(session_id=f"{wid}-{i}-{j}"),
                    user_id=f"u{wid}",
                    idempotency_key=key if j == 0 else None,
                )
                for j in range(n)
            ]
            with db.write() as conn:
                log.append(conn, batch)
    finally:
        db.close()


def reader(target: str, stop: Any, out: Any) -> None:
    """Counts the reads that saw a hole: ``count(*) < max(position)``."""
    holes = reads = 0
    db = open_database(target)
    try:
        while not stop.is_set():
            with db.read() as conn:
                n, top = conn.execute(
                    text("SELECT count(*), coalesce(max(position), 0) FROM events")
                ).one()
            reads += 1
            holes += int(n) != int(top)
            time.sleep(0.002)
    finally:
        db.close()
    out.put((holes, reads))
