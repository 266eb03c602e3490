"""``memstore serve --workers N``: N gateway processes on one listening socket.

Why processes: a gateway request runs Python (recall scoring, JSON, the
pipeline's bookkeeping) under the GIL, so one process uses one core. N
processes share the socket the parent bound (the kernel hands each accepted
connection to one of them) and each opens its own ``Store`` on the same
**PostgreSQL** database. That is safe because everything shared lives in the
database: event positions come from one advisory lock, work is claimed with
``FOR UPDATE SKIP LOCKED`` (no item is derived twice), and one process holds
the scheduler lease (timers fire once; another takes over when it dies).

SQLite is refused for N > 1 (``ConfigError``): one file has one writer at a
time, so extra processes add no write throughput, only contention on the
file's lock, and each would hold its own copy of the in-memory vector
partitions. One process with its thread pool is the right shape there.

The parent only supervises: it starts the workers, reports ready once all
listen, restarts a worker that dies while serving, and on SIGTERM / SIGINT
passes SIGTERM on — each worker then drains its requests and closes its
store as a single ``memstore serve`` does — and waits for them.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import queue as stdqueue
import signal
import socket
import threading
import time
from collections.abc import Callable
from multiprocessing.process import BaseProcess
from types import FrameType
from typing import Any

from memstore.config import Settings
from memstore.db.target import Target
from memstore.errors import ConfigError
from memstore.gateway.config import GatewayConfig
from memstore.gateway.server import bind, listen_url, make_server

log = logging.getLogger("memstore.gateway")

# How long a stopping worker may take beyond its request drain (closing the
# store: pipeline work in progress gets ``close_timeout_s``) before it is killed.
STOP_GRACE_S = 30.0


def check_workers(target: Target, workers: int) -> None:
    """Refuse a worker count the database cannot share (see the module docstring)."""
    if workers < 1:
        raise ConfigError(f"--workers must be at least 1, not {workers}")
    if workers > 1 and not target.is_postgres:
        raise ConfigError(
            f"--workers {workers} needs PostgreSQL (MEMSTORE_DB or --db "
            "postgresql+psycopg://user@host:port/db): a SQLite file has one writer at a time, "
            "so more gateway processes add contention, not throughput; serve one process "
            "(its thread pool handles concurrent requests)"
        )


def _worker(
    sock: socket.socket,
    db: str,
    config: GatewayConfig,
    settings: Settings | None,
    drain_s: int,
    ready: Any,
) -> None:
    # Out of the terminal's process group: Ctrl-C reaches the parent only,
    # which passes one SIGTERM on (a second signal would skip the drain).
    os.setpgrp()
    server = make_server(
        db,
        config,
        settings,
        drain_s=drain_s,
        on_ready=lambda: ready.put(os.getpid()),
        freeze_gc=True,
    )
    server.run(sockets=[sock])
    if not server.started:
        raise SystemExit(3)  # startup failed (logged by uvicorn): not a clean stop


class Supervisor:
    """Starts, restarts and stops the worker processes (the parent's side)."""

    def __init__(
        self,
        sock: socket.socket,
        db: str,
        config: GatewayConfig,
        settings: Settings | None,
        workers: int,
        drain_s: int,
    ) -> None:
        self.ctx = mp.get_context("spawn")
        self.ready = self.ctx.Queue()
        self.args = (sock, db, config, settings, drain_s, self.ready)
        self.workers = workers
        self.drain_s = drain_s
        self.procs: list[BaseProcess] = []
        self.stop = threading.Event()

    def _spawn(self) -> BaseProcess:
        p = self.ctx.Process(target=_worker, args=self.args, name="memstore-gateway", daemon=False)
        p.start()
        return p

    def start(self, timeout_s: float = 120.0) -> None:
        """Start every worker and wait until each listens."""
        self.procs = [self._spawn() for _ in range(self.workers)]
        deadline = time.monotonic() + timeout_s
        up = 0
        while up < self.workers:
            dead = [p for p in self.procs if p.exitcode is not None]
            if dead or self.stop.is_set() or time.monotonic() > deadline:
                self.shutdown()
                why = (
                    f"a worker exited with status {dead[0].exitcode} before it listened"
                    if dead
                    else "stopped"
                    if self.stop.is_set()
                    else f"workers not listening after {timeout_s:.0f} s"
                )
                raise ConfigError(f"gateway did not start: {why} (see the log above)")
            try:
                self.ready.get(timeout=0.2)
                up += 1
            except stdqueue.Empty:
                pass

    def supervise(self) -> None:
        """Until ``stop``: replace a worker that died (its requests in flight
        are lost to their clients; the store's state is in the database)."""
        while not self.stop.wait(0.5):
            for i, p in enumerate(self.procs):
                if p.exitcode is not None and not self.stop.is_set():
                    log.warning("gateway worker %s exited (%s); starting one", p.pid, p.exitcode)
                    self.procs[i] = self._spawn()

    def shutdown(self) -> None:
        for p in self.procs:
            if p.pid is not None and p.exitcode is None:
                os.kill(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.drain_s + STOP_GRACE_S
        for p in self.procs:
            p.join(max(0.0, deadline - time.monotonic()))
            if p.exitcode is None:
                log.warning("gateway worker %s did not stop in time; killing it", p.pid)
                p.kill()
                p.join()


def serve_workers(
    target: Target,
    config: GatewayConfig,
    settings: Settings | None = None,
    *,
    workers: int,
    drain_s: int = 10,
    on_ready: Callable[[str], None] | None = None,
) -> None:
    """Serve with ``workers`` processes until SIGTERM / SIGINT."""
    check_workers(target, workers)
    sock = bind(config.host, config.port)
    url = listen_url(sock)
    db = target.url if target.url is not None else str(target.path)
    sup = Supervisor(sock, db, config, settings, workers, drain_s)

    def on_signal(_sig: int, _frame: FrameType | None) -> None:
        sup.stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        sup.start()
        if on_ready is not None:
            on_ready(url)
        sup.supervise()
        sup.shutdown()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        sock.close()


__all__ = ["STOP_GRACE_S", "Supervisor", "check_workers", "serve_workers"]
