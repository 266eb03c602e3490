"""Bytes per message of a store filled the way a host fills it

Every call is one ``Store.capture_turn`` (a user message and its reply of
conversation-like text from ``chattext``, ~240 B a message over thousands of
distinct words, with a turn id), users round-robin, with the defaults
otherwise (context vectors on, hashing 384-d embedder so the fill is fast;
e5 has 384 dimensions too; ``--vector-element`` picks int8 or float32
storage). Then every message is embedded
(``reindex``) and ``dbstat`` gives each table's bytes per message.

    memstore bench bytes-per-message \
        --messages 100000 --users 100 --path /tmp/storage-100k.db
    memstore bench bytes-per-message --vector-element float32 --path /tmp/f32.db

An existing ``--path`` is measured as it is (no fill): run it once per code
version, or point it at a copy of an older file after ``memstore db upgrade``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from memstore.bench.chattext import ChatText
from memstore.config import Settings
from memstore.store import Store


def fill(store: Store, messages: int, users: int) -> float:
    """``messages // 2`` calls of ``capture_turn``, one durable transaction
    each, as a host makes them: batched appends lay out FTS segments and index
    pages differently, and the figure is about what hosts leave. Returns the
    seconds it took."""
    chat = ChatText(seed=0)
    t0 = time.perf_counter()
    for turn in range(messages // 2):
        user_text, reply = chat.turn()
        store.capture_turn(
            f"u{turn % users:04d}",
            f"s{turn // users // 50}",
            user_text,
            reply,
            timestamp=1_704_067_200 + 2 * turn,
            turn_id=f"t{turn}",
        )
    return time.perf_counter() - t0


def bytes_per_table(store: Store, messages: int) -> dict[str, float]:
    """dbstat bytes per message; vec0's shadow tables summed as "vec0"."""
    out: dict[str, float] = {}
    with store.internals.db.read() as conn:
        rows = conn.exec_driver_sql("SELECT name, sum(pgsize) FROM dbstat GROUP BY name").all()
    for name, size in rows:
        key = str(name).removeprefix("sqlite_autoindex_")
        key = "vec0" if key.startswith("vec_") else key
        out[key] = out.get(key, 0.0) + int(size) / messages
    return out


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=10_000)
    ap.add_argument("--users", type=int, default=100)
    ap.add_argument("--path", type=Path, required=True)
    ap.add_argument(
        "--vector-element",
        choices=("int8", "float32"),
        default=None,
        help="how a new file's vector spaces store their vectors (default: the setting's)",
    )
    args = ap.parse_args(argv)
    settings = Settings().replace(embedder="hashing", background_indexer=False, scheduler=False)
    if args.vector_element:
        settings = settings.replace(vector_element=args.vector_element)
    existed = args.path.exists()
    with Store.open(args.path, settings=settings) as store:
        if not existed:
            secs = fill(store, args.messages, args.users)
            print(f"filled {args.messages} messages in {secs:.0f} s")
            store.reindex()
        with store.internals.db.read() as conn:
            n = int(conn.exec_driver_sql("SELECT count(*) FROM l0_messages").scalar_one())
            text_b = conn.exec_driver_sql("SELECT avg(length(CAST(text AS BLOB))) FROM l0_messages")
            avg_text = float(text_b.scalar_one() or 0)
        parts = bytes_per_table(store, n)
    total = sum(parts.values())
    print(
        f"{n} messages, text {avg_text:.0f} B/message, file {args.path.stat().st_size / 1e6:.1f} MB"
    )
    for name, b in sorted(parts.items(), key=lambda kv: -kv[1]):
        if b >= 1:
            print(f"  {name:48s} {b:8.1f}")
    print(f"  {'total':48s} {total:8.1f}")
