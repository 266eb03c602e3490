"""Keyword search at scale: per-user BM25 next to a per-user FTS5 table.

A store of ``users`` × ``per_user`` messages is built once through the event
log (200 capture events per transaction, no embedder: keyword search never
reads vectors) and reused from ``--store``. ``text="chat"`` (the default):
conversation-like text (memstore.bench.chattext, ~240 B a message, thousands
of distinct words), captured one turn (user message and reply) per capture
event as hosts do, sessions of 20 messages, users round-robin; queries use
the same vocabulary. ``text="template"``: the template pool of ``bench
scale``, 20 messages per capture event, template queries.
Before timing, the FTS5 segments the build left are merged as the background
indexer of a default store merges them (memstore.text.fts_tidy). Then, for
the same queries and the same target users, interleaved so they share the
machine's noise:

- ``keyword``: ``Store.search_conversations(strategy="keyword")``, everything
  a caller pays (read transaction, per-user BM25, content-free handling,
  reading the returned rows); also as CPU time of the thread, which a
  shared machine's load inflates less than wall time;
- ``ranking``: the per-user ranking alone from SQL (memstore.search.bm25;
  a user with at least ``postings.MIN_DOCS`` messages is ranked from
  in-memory postings inside ``keyword``, loaded before the timing);
- ``ref_fts5_per_user``: the reference, what a host would otherwise use: a
  standalone FTS5 table holding only the target user's messages (same
  columns and tokenizer as the store's, filled from the same derivation,
  memstore.derive.messages.columns), in a side file ``<store>.ref-fts5.db`` built once,
  queried with the same MATCH expression and ranked by ``bm25()``, top 10;
- ``ref_fts5_store_table``: FTS5 MATCH over the user's rowid range of the
  store's multi-user table, ranked by ``bm25()`` (whole-table statistics).

Agreement: per query, the per-user top 10 against the per-user table's
``bm25()`` top 10. Both rank with the user's own statistics, so the lists
must be identical, scores too (to float rounding).
"""

from __future__ import annotations

import random
import sqlite3
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from memstore.bench.capture_search import queries, stats, text_pool
from memstore.bench.chattext import COMMON, ChatText
from memstore.bench.scale import capture_calls
from memstore.config import Settings
from memstore.derive.messages.capture import capture_event, prepare_messages
from memstore.derive.messages.columns import labelled_text, message_columns
from memstore.derive.messages.projection import user_fts_range
from memstore.search import bm25, postings
from memstore.store import Store
from memstore.text import build_match, fts_tidy

_PER_TRANSACTION = 200
_TOP = 10
_SESSION = 20
# The store's l0_fts columns and tokenizer, for the per-user reference table.
_REF_TABLE = "fts5(text, cjk, stem, tokenize = 'unicode61 remove_diacritics 2')"
TEXTS = ("chat", "template")


def _settings() -> Settings:
    return Settings().replace(embedder="none", background_indexer=False, scheduler=False)


def chat_calls(users: int, per_user: int, seed: int = 3) -> list[tuple[str, str, list[Any]]]:
    """(user, session, messages) capture calls of one turn each: users
    round-robin by session of ``_SESSION`` messages, as they would arrive."""
    gen = ChatText(seed)
    start = datetime(2024, 1, 1, tzinfo=UTC)
    calls: list[tuple[str, str, list[Any]]] = []
    n = 0
    for session in range(-(-per_user // _SESSION)):
        for u in range(users):
            for t in range(0, min(_SESSION, per_user - session * _SESSION), 2):
                msgs = [
                    {
                        "role": role,
                        "content": text,
                        "timestamp": start + timedelta(seconds=n + j),
                        "id": f"m{session}-{t + j}",
                    }
                    for j, (role, text) in enumerate(
                        zip(("user", "assistant"), gen.turn(), strict=True)
                    )
                ]
                n += 2
                calls.append((f"u{u:04d}", f"s{session}", msgs))
    return calls


def chat_queries(count: int, seed: int = 11) -> list[str]:
    """Distinct queries over the chat text's vocabulary (mostly its frequent
    words, as a question about the history would use), some with function
    words."""
    vocab = ChatText(3).vocabulary
    rng = random.Random(seed)
    out: list[str] = []
    while len(out) < count:
        words = [vocab[min(int(rng.paretovariate(0.6)) - 1, len(vocab) - 1)] for _ in range(3)]
        words = words[: rng.choice((1, 2, 2, 3, 3))]
        if rng.random() < 0.4:
            words.insert(0, rng.choice(COMMON[:60]))
        q = " ".join(words)
        if q not in out:
            out.append(q)
    return out


def build_store(
    path: Path, users: int, per_user: int, log: Callable[[str], None], text: str = "chat"
) -> float:
    """Fill ``path`` with ``users`` × ``per_user`` messages; seconds taken."""
    size = users * per_user
    if text == "chat":
        calls = chat_calls(users, per_user)
    else:
        calls = capture_calls(size, users, text_pool(min(size, 20_000)))
    t0 = time.perf_counter()
    with Store.open(path, settings=_settings()) as store:
        done = 0
        for i in range(0, len(calls), _PER_TRANSACTION):
            events = [
                capture_event(
                    user,
                    session,
                    None,
                    prepare_messages(
                        session, msgs, now=store.internals.kernel.clock(), max_bytes=1 << 20
                    ),
                )
                for user, session, msgs in calls[i : i + _PER_TRANSACTION]
            ]
            store.internals.kernel.append(events)
            before, done = done, done + sum(len(m) for _, _, m in calls[i : i + _PER_TRANSACTION])
            if done // 20_000 != before // 20_000:
                log(f"  {done:,} messages")
    return time.perf_counter() - t0


def ref_tables(store: Store, path: Path, users: Sequence[str]) -> sqlite3.Connection:
    """A side file with one standalone FTS5 table per user in ``users`` (the
    reference), holding that user's messages only; built once, reused."""
    ref = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    have = {r[0] for r in ref.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    todo = [u for u in users if _ref_name(u) not in have]
    if todo:
        with store.internals.db.read() as conn:
            raw = conn.connection.driver_connection
            assert raw is not None
            ref.execute("BEGIN")
            for user in todo:
                name = _ref_name(user)
                ref.execute(f"CREATE VIRTUAL TABLE {name} USING {_REF_TABLE}")
                rows = raw.execute(
                    "SELECT id, speaker, text FROM l0_messages WHERE user_id = ? ORDER BY id",
                    (user,),
                ).fetchall()
                for mid, speaker, body in rows:
                    indexed = labelled_text(speaker, body) if speaker else body
                    _, latin, cjk, stem, _, _ = message_columns(indexed)
                    ref.execute(
                        f"INSERT INTO {name}(rowid, text, cjk, stem) VALUES (?, ?, ?, ?)",
                        (mid, latin, cjk, stem),
                    )
                ref.execute(f"INSERT INTO {name}({name}) VALUES ('optimize')")
            ref.execute("COMMIT")
    return ref


def _ref_name(user: str) -> str:
    return "ref_" + "".join(c if c.isalnum() else "_" for c in user)


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:  # not Linux
        return "n/a"


def run_keyword_bench(
    *,
    users: int,
    per_user: int,
    n_queries: int,
    store_path: Path,
    log: Callable[[str], None],
    text: str = "chat",
) -> dict[str, Any]:
    if text not in TEXTS:
        raise ValueError(f"text must be one of {TEXTS}, got {text!r}")
    built = None
    if not store_path.exists():
        log(f"building {users} users x {per_user} messages ({text} text) in {store_path}")
        built = build_store(store_path, users, per_user, log, text)
    qs = chat_queries(n_queries) if text == "chat" else queries(n_queries)
    rng = random.Random(5)
    targets = [f"u{rng.randrange(users):04d}" for _ in qs]
    times: dict[str, list[float]] = {
        "keyword": [],
        "keyword_cpu": [],
        "ranking": [],
        "ref_fts5_per_user": [],
        "ref_fts5_store_table": [],
    }
    identical = exact = 0
    overlap = 0.0
    load_before = loadavg()
    with Store.open(store_path, settings=_settings()) as store:
        # What the background indexer does after captures in a default store
        # (this bench's store has no embedder, so no indexer): merge the FTS5
        # segments the build left. Nothing to do on a reused, tidied store.
        tidy_steps = fts_tidy.tidy(store.internals.db)
        ref = ref_tables(
            store, store_path.with_name(store_path.name + ".ref-fts5.db"), sorted(set(targets))
        )
        if per_user >= postings.MIN_DOCS:
            # Large users are ranked from in-memory postings, which load in a
            # thread on their first search (SQL answers meanwhile): load them.
            # One load runs at a time, so each user's is awaited in turn.
            for user in sorted(set(targets)):
                store.search_conversations(user, "warm-up", strategy="keyword")
                store.internals.search_engine.hot_postings.wait()
        for q, user in zip(qs, targets, strict=True):
            t0, c0 = time.perf_counter(), time.thread_time()
            store.search_conversations(user, q, limit=_TOP, strategy="keyword")
            times["keyword"].append((time.perf_counter() - t0) * 1000)
            # CPU time of the same call: on a shared machine the wall time
            # also counts the time other processes held the core.
            times["keyword_cpu"].append((time.thread_time() - c0) * 1000)
            match = build_match(q)
            t0 = time.perf_counter()
            mine_ref: list[Any] = []
            if match is not None:
                name = _ref_name(user)
                mine_ref = ref.execute(
                    f"SELECT rowid, bm25({name}, 1.0, 1.0, 1.0) AS s FROM {name} "
                    f"WHERE {name} MATCH ? ORDER BY s, rowid LIMIT ?",
                    (match, _TOP),
                ).fetchall()
            times["ref_fts5_per_user"].append((time.perf_counter() - t0) * 1000)
            with store.internals.db.read() as conn:
                raw = conn.connection.driver_connection
                assert raw is not None
                span = user_fts_range(conn, user)
                t0 = time.perf_counter()
                mine = bm25.keyword_messages(conn, q, user, _TOP)
                times["ranking"].append((time.perf_counter() - t0) * 1000)
                t0 = time.perf_counter()
                if span is not None and match is not None:
                    raw.execute(
                        "SELECT rowid - ?, bm25(l0_fts, 1.0, 1.0, 1.0) AS s FROM l0_fts "
                        "WHERE l0_fts MATCH ? AND rowid BETWEEN ? AND ? ORDER BY s, rowid LIMIT ?",
                        (span[0], match, span[0], span[1], _TOP),
                    ).fetchall()
                times["ref_fts5_store_table"].append((time.perf_counter() - t0) * 1000)
            identical += [i for i, _ in mine] == [int(i) for i, _ in mine_ref]
            exact += all(
                abs(s - float(r)) <= 1e-9 * max(1.0, abs(s))
                for (_, s), (_, r) in zip(mine, mine_ref, strict=False)
            ) and len(mine) == len(mine_ref)
            want = {int(i) for i, _ in mine_ref}
            got = {i for i, _ in mine}
            overlap += len(want & got) / len(want) if want else float(not got)
        ref.close()
    return {
        "users": users,
        "per_user": per_user,
        "text": text,
        "messages": users * per_user,
        "queries": len(qs),
        "build_s": built,
        "fts_tidy_steps": tidy_steps,
        "loadavg_before": load_before,
        "loadavg_after": loadavg(),
        **{name: stats(ms) for name, ms in times.items()},
        "keyword_over_ref_p95": times_ratio(times["keyword"], times["ref_fts5_per_user"]),
        "same_top10_as_per_user_bm25": identical,
        "same_scores_as_per_user_bm25": exact,
        "mean_overlap_at_10": overlap / max(len(qs), 1),
    }


def times_ratio(a: Sequence[float], b: Sequence[float]) -> float:
    """p95 of ``a`` over p95 of ``b``."""
    return float(stats(a)["p95_ms"] / stats(b)["p95_ms"])


def format_keyword_bench(res: dict[str, Any]) -> str:
    def row(name: str, label: str) -> str:
        s = res[name]
        return f"  {label:<46} p50 {s['p50_ms']:8.3f} ms   p95 {s['p95_ms']:8.3f} ms"

    n = res["queries"]
    return "\n".join(
        [
            f"keyword search, {res['users']} users x {res['per_user']:,} messages "
            f"({res['messages']:,}, {res['text']} text), {n} queries",
            row("keyword", "search_conversations(strategy='keyword')"),
            row("keyword_cpu", "  same calls, CPU time of the thread"),
            row("ranking", "  per-user BM25 from SQL (no copy)"),
            row("ref_fts5_per_user", "  ref: per-user FTS5 table + bm25()"),
            row("ref_fts5_store_table", "  store's FTS5 table + bm25(), user's rowids"),
            f"  keyword / per-user FTS5 at p95: {res['keyword_over_ref_p95']:.2f}x",
            f"  top {_TOP} identical to the per-user table's bm25(): "
            f"{res['same_top10_as_per_user_bm25']}/{n} "
            f"(scores too: {res['same_scores_as_per_user_bm25']}/{n}), "
            f"mean overlap {res['mean_overlap_at_10']:.3f}",
            f"  FTS5 merge steps before timing: {res['fts_tidy_steps']}; load average before "
            f"{res['loadavg_before']}, after {res['loadavg_after']}",
        ]
    )
