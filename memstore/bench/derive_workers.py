"""Derivation throughput with 1, 2, … worker processes on one store.

The parent captures ``users × sessions`` sessions of ``rounds`` turns (all
pending), then starts N worker processes that each run the pipeline
(``Store.run_pipeline``: claim, derive, complete, until nothing is left) on
the same store, and times from the start signal to the last worker's end.
Each run gets a fresh store: a temporary SQLite file, or a fresh database on
the PostgreSQL server ``--db`` names (created and dropped; the URL's user
needs CREATEDB).

Two models: ``rules`` (the offline rule deriver: no model call, so the
figure is the store's own cost: claims, reads, appends) and ``fake`` (the
repository's scripted OpenAI-compatible model with ``latency_ms`` per call —
the shape of real use, where a worker mostly waits for its model and more
workers overlap those waits; needs a source checkout).

Every run also checks the result: no (user, session, generation, cursor)
extracted twice and no message left unextracted (``exact``).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from memstore.bench.scale_db import fresh_pg
from memstore.config import Settings
from memstore.derive.events import L1Extracted, PersonaUpdated, ScenesUpdated
from memstore.store import Store

SAYINGS = ["I live in Berlin.", "I am vegetarian.", "I like running.", "My name is Alice."]


def _settings(llm_url: str) -> Settings:
    base = Settings().replace(embedder="hashing", scheduler=False, background_indexer=False)
    if not llm_url:
        return base  # empty base_url and model: the rule deriver
    return base.replace(
        llm_base_url=llm_url, llm_model="fake-model", llm_api_key="x", llm_timeout_s=60.0
    )


def _worker(target: str, llm_url: str, ready: Any, start: Any, out: Any) -> None:
    with Store.open(target, settings=_settings(llm_url)) as store:
        ready.set()
        start.wait(300)
        outcomes = store.run_pipeline(wait=True)
        out.put((time.time(), sum(1 for o in outcomes if o.ok)))


@contextmanager
def _fresh_target(db_url: str | None, work: Path) -> Iterator[str]:
    if db_url is None:
        yield str(work / f"derive-{uuid.uuid4().hex[:8]}.db")
        return
    with fresh_pg(db_url) as url:
        yield url


def _one_run(
    target: str, llm_url: str, workers: int, users: int, sessions: int, rounds: int
) -> dict[str, Any]:
    with Store.open(target, settings=_settings(llm_url)) as store:
        for u in range(users):
            for s in range(sessions):
                for r in range(rounds):
                    # Distinct per turn: a message's id is its text's hash by default.
                    text = f"{SAYINGS[(u + s + r) % len(SAYINGS)]} (turn {r})"
                    store.capture_turn(f"u{u}", f"s{s}", text, "noted")
        with store.internals.db.read() as conn:
            user_messages = {
                (str(r[0]), str(r[1]), str(r[2]))
                for r in conn.exec_driver_sql(
                    "SELECT user_id, session_id, message_id FROM l0_messages WHERE role = 'user'"
                )
            }
    ctx = mp.get_context("spawn")
    start, out = ctx.Event(), ctx.Queue()
    procs = []
    for _ in range(workers):
        ready = ctx.Event()
        p = ctx.Process(target=_worker, args=(target, llm_url, ready, start, out))
        p.start()
        if not ready.wait(300):
            raise RuntimeError("a worker did not open the store")
        procs.append(p)
    load_before = os.getloadavg()
    t0 = time.time()
    start.set()
    ends = [out.get(timeout=3600) for _ in procs]
    for p in procs:
        p.join(60)
    wall = max(t for t, _ in ends) - t0
    load_after = os.getloadavg()
    with Store.open(target, settings=_settings(llm_url)) as store:
        l1 = [e for e in store.read_events(types=[L1Extracted.TYPE])]
        l23 = len(store.read_events(types=[ScenesUpdated.TYPE, PersonaUpdated.TYPE]))
    keys = [
        (e.user_id, e.payload.session_id, e.payload.generation, e.payload.cursor_position)
        for e in l1
        if isinstance(e.payload, L1Extracted)
    ]
    extracted = [
        (e.user_id, e.payload.session_id, m)
        for e in l1
        if isinstance(e.payload, L1Extracted)
        for m in e.payload.message_ids
    ]
    exact = (
        len(keys) == len(set(keys))
        and len(extracted) == len(set(extracted))
        and user_messages <= set(extracted)
    )
    jobs = len(l1) + l23
    return {
        "workers": workers,
        "sessions": users * sessions,
        "messages": 2 * users * sessions * rounds,
        "wall_s": wall,
        "runs": sum(n for _, n in ends),
        "runs_per_worker": [n for _, n in ends],
        "derive_events": jobs,
        "events_per_s": jobs / wall if wall > 0 else 0.0,
        "sessions_per_s": users * sessions / wall if wall > 0 else 0.0,
        "exact": exact,
        "loadavg": {"before": load_before, "after": load_after},
    }


@contextmanager
def _model(kind: str, latency_ms: float) -> Iterator[str]:
    if kind == "rules":
        yield ""
        return
    from memstore.bench.fakeopenai import FakeOpenAI
    from memstore.bench.scripted_llm import ScriptedLLM

    script = ScriptedLLM()

    def answer(request: dict[str, Any]) -> str:
        time.sleep(latency_ms / 1000)
        return str(script(request))

    with FakeOpenAI(chat=answer) as fake:
        yield str(fake.base_url)


def run_derive_workers(
    *,
    db_url: str | None,
    workers: list[int],
    model: str = "fake",
    latency_ms: float = 100.0,
    users: int = 4,
    sessions: int = 6,
    rounds: int = 4,
    workdir: Path | None = None,
    log: Callable[[str], None] = lambda _m: None,
) -> dict[str, Any]:
    """One run per worker count on SQLite, and on PostgreSQL when ``db_url``."""
    backends: list[tuple[str, str | None]] = [("sqlite", None)]
    if db_url is not None:
        backends.append(("postgresql", db_url))
    res: dict[str, Any] = {
        "model": model,
        "latency_ms": latency_ms if model == "fake" else 0.0,
        "users": users,
        "sessions_per_user": sessions,
        "rounds": rounds,
        "runs": [],
    }
    with tempfile.TemporaryDirectory(dir=workdir) as tmp, _model(model, latency_ms) as llm:
        for backend, url in backends:
            for n in workers:
                with _fresh_target(url, Path(tmp)) as target:
                    log(f"{backend}: {n} worker process(es) …")
                    run = _one_run(target, llm, n, users, sessions, rounds)
                    res["runs"].append({"backend": backend, **run})
                    log(f"  {run['wall_s']:.1f} s, {run['events_per_s']:.1f} derive events/s")
    return res


def format_derive_workers(res: dict[str, Any]) -> str:
    model = (
        f"scripted model, {res['latency_ms']:.0f} ms per call"
        if res["model"] == "fake"
        else "rule deriver (no model call)"
    )
    lines = [
        f"Derivation throughput: {res['users']} users × {res['sessions_per_user']} sessions × "
        f"{res['rounds']} turns, all pending; {model}",
        "",
        "| backend | worker processes | wall s | derive events/s | sessions/s | runs per "
        "worker | exact | load avg before → after |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in res["runs"]:
        la = r["loadavg"]
        lines.append(
            f"| {r['backend']} | {r['workers']} | {r['wall_s']:.1f} | {r['events_per_s']:.1f} | "
            f"{r['sessions_per_s']:.2f} | {'/'.join(str(n) for n in r['runs_per_worker'])} | "
            f"{'yes' if r['exact'] else 'NO'} | {la['before'][0]:.1f} → {la['after'][0]:.1f} |"
        )
    return "\n".join(lines)


__all__ = ["format_derive_workers", "run_derive_workers"]
