"""``memstore bench hermes --api-server``: memstore behind Hermes' real api_server.

Starts ``hermes gateway run`` twice on loopback against the same instant
model (``EchoModel``): once without a memory provider (the reference) and
once with memstore installed by ``memstore hermes install``. Each run sends N
chat requests over M sessions, C at a time; session j belongs to caller
j mod K (its own ``X-Hermes-Session-Key``), so a caller's later sessions
recall its earlier ones, and every message of a caller carries a word no
other caller uses in otherwise alike sentences. Reported:

- HTTP latency p50/p95 (client side) with and without memstore, and
  memstore's share of the mean request time, (mean with - mean without) /
  mean with: the two runs differ only in the provider;
- capture completeness: user messages memstore captured against those
  Hermes acknowledged in its own ``state.db`` (and duplicates);
- cross-caller leaks: model requests for one caller whose text holds another
  caller's word (in ``<memory-context>`` or anywhere else). Target: 0.
"""

from __future__ import annotations

import re
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from memstore.bench.hermes_server import ApiServer, EchoModel, prepare_home
from memstore.bench.metrics import percentile

Log = Callable[[str], None]

CAPTURE_WAIT_S = 120.0
TAG = re.compile(r"\[caller(\d+)/\d+\]")
MAX_SESSIONS = 64
_WORDS = ("zorblax", "quintaro", "velmish", "drubnok", "sapphil", "mirtavo", "kelquon", "yombrel")


def caller_word(m: int) -> str:
    """A word only caller ``m`` says (no common word contains another's)."""
    return f"{_WORDS[m % len(_WORDS)]}{m}q"


def _message(m: int, i: int) -> str:
    # A statement the offline extractor turns into a memory, and a question
    # that recalls it: alike for every caller but for the one word.
    return f"I live in {caller_word(m).title()}. This is note {i}. Where do I live? [caller{m}/{i}]"


def _run(
    home: Path,
    model: EchoModel,
    *,
    memstore: bool,
    n_requests: int,
    sessions: int,
    callers: int,
    concurrency: int,
    log: Log,
) -> dict[str, Any]:
    prepare_home(
        home,
        model.base_url,
        memstore=memstore,
        memstore_config={"embedder": "hashing"},
        max_concurrent_runs=max(concurrency * 2, 10),
    )
    server = ApiServer(home)
    started = time.perf_counter()
    try:
        server.start()
        ready_s = time.perf_counter() - started

        def send(i: int) -> tuple[int, float]:
            j = i % sessions
            m = j % callers
            reply = server.chat(_message(m, i), session_id=f"bench-s{j}", session_key=f"caller{m}")
            return reply.status, reply.seconds

        with ThreadPoolExecutor(concurrency) as pool:
            first = list(pool.map(send, range(sessions)))  # each session once: the server warms
            log(f"  {'memstore' if memstore else 'no memory'}: warm ({ready_s:.1f} s to ready)")
            timed = list(pool.map(send, range(sessions, sessions + n_requests)))
        capture = _capture(server, callers) if memstore else None
        threads = server.threads()
    finally:
        server.stop()
    seconds = [s * 1000 for _status, s in timed]
    return {
        "memstore": memstore,
        "ready_s": round(ready_s, 2),
        "first_request_ms": round(max(s for _status, s in first) * 1000, 1),
        "ok": sum(status == 200 for status, _ in first + timed),
        "requests": len(first) + len(timed),
        "latency_ms": {
            "p50": round(percentile(seconds, 50), 1),
            "p95": round(percentile(seconds, 95), 1),
            "mean": round(sum(seconds) / len(seconds), 1),
            "n": len(seconds),
        },
        "capture": capture,
        "server_threads_after": threads,
        "stop_s": round(server.stop_seconds or 0.0, 2),
        "exit_code": server.returncode,
    }


def _capture(server: ApiServer, callers: int) -> dict[str, Any]:
    def hermes() -> Counter[tuple[str, str]]:
        return Counter(server.hermes_user_messages())

    def ours() -> Counter[tuple[str, str]]:
        return Counter(server.memstore_user_messages())

    deadline = time.monotonic() + CAPTURE_WAIT_S
    waited = time.monotonic()
    while time.monotonic() < deadline and ours() != hermes():
        time.sleep(0.25)
    acknowledged, captured = hermes(), ours()
    users = server.memstore_users()
    return {
        "acknowledged": sum(acknowledged.values()),
        "captured": sum((captured & acknowledged).values()),
        "missing": sum((acknowledged - captured).values()),
        "duplicates": sum((captured - acknowledged).values()),
        "wait_s": round(time.monotonic() - waited, 2),
        "users": len({users[s] for s in users if s.startswith("bench-s")}),
        "callers": callers,
    }


def _leaks(seen: list[tuple[str, str]], callers: int) -> dict[str, int]:
    leaks = checked = with_context = 0
    for last_user, whole in seen:
        tag = TAG.search(last_user)
        if tag is None:
            continue
        m = int(tag.group(1))
        checked += 1
        with_context += "<memory-context>" in last_user
        lowered = whole.lower()
        leaks += any(caller_word(o) in lowered for o in range(callers) if o != m)
    return {"model_requests_checked": checked, "with_memory_context": with_context, "leaks": leaks}


def run_api_server_bench(
    *,
    n_requests: int = 60,
    sessions: int = 6,
    callers: int = 3,
    concurrency: int = 10,
    workdir: Path | None = None,
    log: Log = print,
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="memstore-bench-api-", dir=workdir) as tmp:
        runs = {}
        for memstore in (False, True):
            model = EchoModel().start()
            try:
                runs["memstore" if memstore else "reference"] = _run(
                    Path(tmp) / ("with" if memstore else "without"),
                    model,
                    memstore=memstore,
                    n_requests=n_requests,
                    sessions=sessions,
                    callers=min(callers, sessions),
                    concurrency=concurrency,
                    log=log,
                )
                if memstore:
                    runs["memstore"]["cross_caller"] = _leaks(model.seen, min(callers, sessions))
            finally:
                model.stop()
    ref, ours = runs["reference"]["latency_ms"], runs["memstore"]["latency_ms"]
    share = (ours["mean"] - ref["mean"]) / ours["mean"] if ours["mean"] else 0.0
    return {
        "name": "hermes-api-server",
        "requests": n_requests,
        "sessions": sessions,
        "callers": min(callers, sessions),
        "concurrency": concurrency,
        "runs": runs,
        "memstore_share_of_request_time": round(share, 3),
    }


def format_api_server_bench(res: dict[str, Any]) -> str:
    ref, ours = res["runs"]["reference"], res["runs"]["memstore"]
    cap, leak = ours["capture"], ours["cross_caller"]
    lines = [
        f"Hermes api_server: {res['requests']} requests over {res['sessions']} sessions "
        f"of {res['callers']} callers, {res['concurrency']} at a time",
        f"{'':>12} {'p50 ms':>8} {'p95 ms':>8} {'mean ms':>8} {'ok':>7} {'ready s':>8} "
        f"{'stop s':>7}",
    ]
    for label, r in (("no memory", ref), ("memstore", ours)):
        lat = r["latency_ms"]
        lines.append(
            f"{label:>12} {lat['p50']:>8.1f} {lat['p95']:>8.1f} {lat['mean']:>8.1f} "
            f"{r['ok']:>3}/{r['requests']:<3} {r['ready_s']:>8.1f} {r['stop_s']:>7.1f}"
        )
    lines += [
        f"memstore's share of the mean request time: {res['memstore_share_of_request_time']:.1%}",
        f"capture: {cap['captured']}/{cap['acknowledged']} user messages Hermes stored "
        f"(missing {cap['missing']}, duplicates {cap['duplicates']}); "
        f"{cap['users']} memstore users for {cap['callers']} callers",
        f"cross-caller leaks: {leak['leaks']} in {leak['model_requests_checked']} model requests "
        f"({leak['with_memory_context']} carried <memory-context>; target 0)",
    ]
    return "\n".join(lines)


__all__ = ["caller_word", "format_api_server_bench", "run_api_server_bench"]
