"""SIGKILL experiments: a child process captures, rebuilds, erases or extracts;
the parent kills it at a random moment, reopens the file and checks what an
acknowledgement promised (see ``chaos_child`` for the child side)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import text

from memstore.bench.chaos_child import SECRET, child_settings
from memstore.db.compaction import is_pending_at
from memstore.derive.events import L1Extracted
from memstore.store import Store

Snapshot = Callable[[Store], dict[str, list[tuple[Any, ...]]]]


def spawn(mode: str, db: Path, acks: Path, *args: object) -> subprocess.Popen[bytes]:
    acks.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "memstore.bench.chaos_child", mode, str(db), str(acks)]
    return subprocess.Popen(cmd + [str(a) for a in args], stderr=subprocess.PIPE)


def read_acks(acks: Path) -> list[str]:
    if not acks.exists():
        return []
    # A line cut by the kill has no newline yet: it was never acknowledged.
    data = acks.read_text(encoding="utf-8")
    return [ln for ln in data.split("\n")[:-1] if ln != "ready"]


def wait_ready(proc: subprocess.Popen[bytes], acks: Path, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not (acks.exists() and acks.read_text(encoding="utf-8").startswith("ready\n")):
        if proc.poll() is not None:
            err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
            raise RuntimeError(f"chaos child exited early: {err[-2000:]}")
        if time.monotonic() > deadline:
            raise RuntimeError("chaos child never became ready")
        time.sleep(0.02)


def kill(proc: subprocess.Popen[bytes]) -> bool:
    """SIGKILL; True when the child was still running (the kill landed mid-work)."""
    alive = proc.poll() is None
    if alive:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    if proc.stderr is not None:
        proc.stderr.close()
    return alive


def _open(db: Path) -> Store:
    return Store.open(db, settings=child_settings())


def stored_ids(store: Store, user: str) -> list[str]:
    with store.internals.db.read() as conn:
        rows = conn.execute(
            text("SELECT message_id FROM l0_messages WHERE user_id = :u"), {"u": user}
        ).all()
    return [r[0] for r in rows]


def check_acked(db: Path, user: str, got: list[str], snapshot: Snapshot) -> tuple[int, int, int]:
    """After a kill: (acknowledged message ids not stored, ids stored twice,
    1 if the projections differ from a rebuild)."""
    with _open(db) as store:
        ids = stored_ids(store, user)
        before = snapshot(store)
        store.rebuild()
        changed = int(before != snapshot(store))
    return len(set(got) - set(ids)), len(ids) - len(set(ids)), changed


def kill_capture(trials: int, work: Path, snapshot: Snapshot, rng: random.Random) -> dict[str, Any]:
    db, acks = work / "capture.db", work / "capture.acks"
    acked = lost = dup = mismatch = 0
    for t in range(trials):
        user = f"u{t}"
        proc = spawn("capture", db, acks, user, 10**6, rng.choice([1, 5, 20]))
        wait_ready(proc, acks)
        time.sleep(rng.uniform(0.2, 1.2))
        kill(proc)
        got = read_acks(acks)
        a, b, c = check_acked(db, user, got, snapshot)
        lost, dup, mismatch = lost + a, dup + b, mismatch + c
        acked += len(got)
    return {
        "trials": trials,
        "acknowledged": acked,
        "lost": lost,
        "duplicates": dup,
        "projection_mismatches": mismatch,
    }


def kill_threads_capture(
    trials: int, work: Path, snapshot: Snapshot, rng: random.Random, threads: int = 8
) -> dict[str, Any]:
    """SIGKILL while ``threads`` threads of one process capture (their captures
    share write transactions): every acknowledged turn must be stored, once,
    and the projections must equal a rebuild."""
    db, acks = work / "threads.db", work / "threads.acks"
    acked = lost = dup = mismatch = batches = 0
    for t in range(trials):
        user = f"u{t}"
        proc = spawn("threads_capture", db, acks, user, threads)
        wait_ready(proc, acks)
        time.sleep(rng.uniform(0.5, 1.5))
        kill(proc)
        lines = read_acks(acks)
        got = [ln for ln in lines if not ln.startswith("batches ")]
        counts = [int(ln.split()[1]) for ln in lines if ln.startswith("batches ")]
        batches += max(counts, default=0)
        a, b, c = check_acked(db, user, got, snapshot)
        lost, dup, mismatch = lost + a, dup + b, mismatch + c
        acked += len(got)
    return {
        "trials": trials,
        "threads": threads,
        "acknowledged": acked,
        "shared_transactions": batches,
        "lost": lost,
        "duplicates": dup,
        "projection_mismatches": mismatch,
    }


def kill_rebuild(
    trials: int, work: Path, snapshot: Snapshot, rng: random.Random, turns: int = 1500
) -> dict[str, Any]:
    db, acks = work / "rebuild.db", work / "rebuild.acks"
    with _open(db) as store:
        for i in range(0, turns, 50):
            msgs = [
                {"role": "user", "content": f"turn {j} about tea", "id": f"m{j}"}
                for j in range(i, i + 50)
            ]
            store.capture(f"u{i % 7}", "s1", msgs)
        store.rebuild()
        events, reference = store.event_count(), snapshot(store)
    mismatch = changed = landed = 0
    for _ in range(trials):
        proc = spawn("rebuild", db, acks)
        wait_ready(proc, acks)
        time.sleep(rng.uniform(0.05, 1.5))
        landed += kill(proc)
        with _open(db) as store:
            changed += store.event_count() != events
            mismatch += snapshot(store) != reference
    return {
        "trials": trials,
        "killed_mid_work": landed,
        "events": events,
        "log_changed": changed,
        "projection_mismatches": mismatch,
    }


def file_has(db: Path, needle: str) -> bool:
    raw = needle.encode()
    return any(p.exists() and raw in p.read_bytes() for p in (db, Path(f"{db}-wal")))


def _erasure_db(db: Path, copies: int) -> None:
    for p in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
        p.unlink(missing_ok=True)
    with _open(db) as store:
        for i in range(0, copies, 50):
            msgs = [
                {"role": "user", "content": f"my code is {SECRET} ({j})", "id": f"v{j}"}
                for j in range(i, i + 50)
            ]
            store.capture("victim", "s1", msgs)
            store.capture("keeper", "s1", [{"role": "user", "content": f"keeper {i}"}])
        store.reindex()


def kill_erase(trials: int, work: Path, rng: random.Random, copies: int = 400) -> dict[str, Any]:
    db, acks = work / "erase.db", work / "erase.acks"
    # One uninterrupted erasure first, to aim the kills across its whole length.
    _erasure_db(db, copies)
    proc = spawn("erase", db, acks, "victim")
    wait_ready(proc, acks)
    t0 = time.monotonic()
    proc.wait(timeout=300)
    span = max(time.monotonic() - t0, 0.05)
    kill(proc)
    committed = pending = leaks = partial = keeper_lost = 0
    for _ in range(trials):
        _erasure_db(db, copies)
        proc = spawn("erase", db, acks, "victim")
        wait_ready(proc, acks)
        time.sleep(rng.uniform(0.0, span * 1.2))
        kill(proc)
        pending += is_pending_at(db)
        with _open(db) as store:
            erased = bool(store.read_events(types=["erasure.user"]))
            left = len(stored_ids(store, "victim"))
            keeper_lost += len(stored_ids(store, "keeper")) != copies // 50
        committed += erased
        if erased:
            leaks += file_has(db, SECRET)
        else:
            partial += left != copies  # an erasure that did not commit changes nothing
    return {
        "trials": trials,
        "erasure_committed": committed,
        "marker_pending_at_kill": pending,
        "secret_left_after_reopen": leaks,
        "half_erased": partial,
        "keeper_lost": keeper_lost,
        "erase_seconds": round(span, 3),
    }


def _extractions(store: Store, user: str) -> list[L1Extracted]:
    events = store.read_events(user_id=user, types=[L1Extracted.TYPE])
    return [e.payload for e in events if isinstance(e.payload, L1Extracted)]


def uncovered(store: Store, user: str) -> int:
    """Messages at or before a session's L1 cursor that no extraction covered."""
    covered: dict[tuple[str, int], set[str]] = {}
    for p in _extractions(store, user):
        covered.setdefault((p.session_id, p.generation), set()).update(p.message_ids)
    missing = 0
    with store.internals.db.read() as conn:
        cursors = conn.execute(
            text(
                "SELECT session_id, generation, cursor_position FROM l1_cursors WHERE user_id = :u"
            ),
            {"u": user},
        ).all()
        for session, gen, cursor in cursors:
            rows = conn.execute(
                text(
                    "SELECT message_id FROM l0_messages WHERE user_id = :u AND session_id = :s"
                    " AND position <= :c"
                ),
                {"u": user, "s": session, "c": cursor},
            ).all()
            missing += sum(r[0] not in covered.get((session, gen), set()) for r in rows)
    return int(missing)


def drain_l1(store: Store, user: str) -> int:
    """Extract everything pending; returns messages still not covered after it."""
    from memstore.derive import api

    with store.internals.db.read() as conn:
        sessions = [
            r[0]
            for r in conn.execute(
                text("SELECT DISTINCT session_id FROM l0_messages WHERE user_id = :u"), {"u": user}
            ).all()
        ]
        total = conn.execute(
            text("SELECT count(*) FROM l0_messages WHERE user_id = :u"), {"u": user}
        ).scalar_one()
    for s in sessions:
        api.run_l1(store.internals.derivation, user, s)
    covered = {m for p in _extractions(store, user) for m in p.message_ids}
    return int(total) - len(covered & set(stored_ids(store, user)))


def kill_extract(trials: int, work: Path, rng: random.Random) -> dict[str, Any]:
    db, acks = work / "extract.db", work / "extract.acks"
    acked = lost = skipped = left = 0
    for t in range(trials):
        user = f"x{t}"
        proc = spawn("extract", db, acks, user, 10**6)
        wait_ready(proc, acks)
        time.sleep(rng.uniform(0.3, 2.0))
        kill(proc)
        got = read_acks(acks)
        acked += len(got)
        with Store.open(db, settings=child_settings()) as store:
            lost += len(set(got) - set(stored_ids(store, user)))
            skipped += uncovered(store, user)
            left += drain_l1(store, user)
    return {
        "trials": trials,
        "acknowledged": acked,
        "lost": lost,
        "cursor_past_unextracted": skipped,
        "unextracted_after_recovery": left,
    }
