"""A rebuild next to the writes it cannot avoid, on captured conversation text

A rebuild replays the log into the projections. Whatever the code that
derives the rows, the L0 projection's writes stay: each message's
``l0_messages`` row, its FTS5 row (two indexed text columns), its repeated
terms, the user's totals, the two indexes created again at the end, and the
commit. This probe measures, in one process and in CPU seconds:

1. ``Store.rebuild()`` of a log of ``--messages`` messages captured one turn
   per ``capture_turn`` call (memstore.bench.eventlog's fill: conversation-like
   text, ~245 B a message, 100 users);
2. the reference: reading and JSON-decoding every event of that log with the
   bare driver;
3. the floor: the same L0 rows written through the same statements, inside
   the same bulk-load set-up a rebuild uses, with every column derived
   beforehand (outside the timing) and no event decoded. The tables it
   leaves are compared with the rebuild's.

The ratio of (2) to (3) bounds what any derivation code can reach against
the reference: a rebuild is slower than its writes.

    memstore bench rebuild-floor --messages 20000
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from memstore.bench.eventlog import bench_settings, captured_log, read_decode_log
from memstore.bench.snapshot import snapshot
from memstore.db import rawexec
from memstore.derive.messages import keywords
from memstore.derive.messages.columns import message_columns
from memstore.derive.messages.keywords import KeywordRows, fts_key, indexed_text
from memstore.derive.messages.projection import L0Projection
from memstore.projections.base import bulk_load
from memstore.store import Store

_COLUMNS = (
    "id, user_id, agent_id, session_id, message_id, role, text, occurred_at, position, "
    "speaker, low_info"
)
_ROWS = f"SELECT {_COLUMNS} FROM l0_messages ORDER BY id"
_INSERT = f"INSERT INTO l0_messages ({_COLUMNS}) VALUES ({', '.join('?' * 11)})"


def _floor(store: Store) -> dict[str, float]:
    """CPU seconds of each write of the L0 rows a rebuild leaves, derived beforehand."""
    db = store.internals.db
    with db.read() as conn:
        rows = [tuple(r) for r in rawexec.rows(conn, _ROWS)]
        slots = [tuple(r) for r in rawexec.rows(conn, "SELECT user_id, slot FROM l0_user_slots")]
    slot_of = {str(u): int(s) for u, s in slots}
    kw = KeywordRows()
    for r in rows:
        columns = message_columns(indexed_text(r[9], r[6]))
        kw.add_derived(str(r[1]), fts_key(slot_of[str(r[1])], int(r[0])), columns)
    l0 = L0Projection()
    took: dict[str, float] = {}
    clock = time.process_time
    with db.write() as conn:
        l0.clear(conn)
        rawexec.run_many(conn, "INSERT INTO l0_user_slots (user_id, slot) VALUES (?, ?)", slots)
        t0 = clock()
        with bulk_load(conn, l0.replay_deferred_indexes, l0.replay_fts_tables):
            t1 = clock()
            rawexec.run_many(conn, _INSERT, rows)
            t2 = clock()
            # KeywordRows.write, the rebuild's own, once for the FTS5 rows and
            # once for the rest, so each is timed.
            fts = KeywordRows()
            fts.fts = kw.fts
            fts.write(conn)
            t3 = clock()
            kw.fts = []
            kw.write(conn)
            keywords.set_through(conn, int(rows[-1][0]) if rows else 0)
            t4 = clock()
        t5 = clock()
    t6 = clock()
    took["bulk-load set-up"] = t1 - t0
    took["l0_messages rows"] = t2 - t1
    took["FTS5 rows"] = t3 - t2
    took["repeats, totals, cursor"] = t4 - t3
    took["indexes created again"] = t5 - t4
    took["commit"] = t6 - t5
    return took


def measure(path: Path, messages: int, users: int) -> dict[str, Any]:
    fresh = not path.exists()
    with Store.open(path, settings=bench_settings()) as store:
        if fresh:
            captured_log(store, messages, users)
        c0 = time.process_time()
        events = store.rebuild()
        rebuild = time.process_time() - c0
        rebuilt = snapshot(store)
        raw = read_decode_log(store.path, time.process_time)
        floor = _floor(store)
        same = snapshot(store) == rebuilt
    return {
        "events": events,
        "rebuild_cpu_s": rebuild,
        "read_decode_cpu_s": raw,
        "floor_cpu_s": floor,
        "floor_same_tables": same,
    }


def report(res: dict[str, Any]) -> str:
    n, raw = res["events"], res["read_decode_cpu_s"]
    floor = sum(res["floor_cpu_s"].values())
    lines = [
        f"{n} events; CPU seconds, events per CPU second, and reading + decoding the log "
        "divided by each",
        f"{'read + decode the log (reference)':<36}{raw:>8.3f} s {n / raw:>10,.0f}/s",
        f"{'rebuild':<36}{res['rebuild_cpu_s']:>8.3f} s {n / res['rebuild_cpu_s']:>10,.0f}/s"
        f"   ratio {raw / res['rebuild_cpu_s']:.3f}",
        f"{'L0 writes alone (the floor)':<36}{floor:>8.3f} s {n / floor:>10,.0f}/s"
        f"   ratio {raw / floor:.3f}",
    ]
    for name, secs in res["floor_cpu_s"].items():
        lines.append(f"  {name:<34}{secs:>8.3f} s")
    same = "yes" if res["floor_same_tables"] else "NO"
    lines.append(f"the floor's tables equal the rebuild's: {same}")
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=20_000)
    ap.add_argument("--users", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=1, help="rebuild + floor this many times")
    ap.add_argument("--path", type=Path, default=None, help="keep the store here (reused)")
    args = ap.parse_args(argv)
    if args.messages < 2 or args.users < 1 or args.rounds < 1:
        ap.error("--messages must be at least 2 (one turn), --users and --rounds at least 1")
    with tempfile.TemporaryDirectory(prefix="memstore-floor-") as tmp:
        path = args.path or Path(tmp) / "captured.db"
        for i in range(args.rounds):
            res = measure(path, args.messages, args.users)
            print(f"round {i + 1}: " + report(res), flush=True)
