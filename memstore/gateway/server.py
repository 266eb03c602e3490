"""Running the gateway: bind, serve, and stop cleanly on SIGTERM / SIGINT.

uvicorn stops accepting connections on a signal, lets the requests in flight
finish (bounded by ``drain_s``), then runs the app's shutdown, which closes
the store (pipeline timers, background indexer, database).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from memstore.config import Settings
from memstore.errors import ConfigError
from memstore.gateway.config import GatewayConfig


def bind(host: str, port: int) -> socket.socket:
    """Bind before serving, so port 0 works and the real address is known."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def listen_url(sock: socket.socket) -> str:
    """The URL clients reach a bound socket at."""
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in str(host) else str(host)
    return f"http://{shown}:{port}"


def freeze_startup_objects() -> None:
    """Exempt what exists once the gateway serves from the garbage collector's
    full passes.

    Everything a serving process imported and opened (FastAPI, pydantic,
    SQLAlchemy, the store and its caches) lives until it exits, yet each full
    collection walks all of it: ~100 ms with every request thread stopped,
    several times a minute under load, which set the gateway's p99 latency
    (50 capturing clients: p99 166 ms against p50 41). Frozen after one
    collection (so no garbage is frozen), a full pass walks only what was
    created since. Only for the process ``memstore serve`` runs: a library
    never changes its host's collector."""
    gc.collect()
    gc.freeze()


def make_server(
    db: str | Path | None,
    config: GatewayConfig,
    settings: Settings | None = None,
    *,
    drain_s: int = 10,
    on_ready: Callable[[], None] | None = None,
    freeze_gc: bool = False,
) -> Any:
    """A ``uvicorn.Server`` for the app (not started); ``freeze_gc``: the
    process is the gateway's own (``freeze_startup_objects`` once serving)."""
    import uvicorn

    from memstore.gateway.app import create_app

    class Server(uvicorn.Server):
        """uvicorn re-raises SIGTERM after its graceful shutdown, so the process
        would die of the signal; here a signal only asks for shutdown and
        ``run`` returns normally (exit status 0, the CLI says it stopped)."""

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            if threading.current_thread() is not threading.main_thread():
                yield
                return
            sigs = (signal.SIGINT, signal.SIGTERM)
            previous = {sig: signal.signal(sig, self.handle_exit) for sig in sigs}
            try:
                yield
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)

        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            if self.started and freeze_gc:
                freeze_startup_objects()
            if self.started and on_ready is not None:
                on_ready()

    app = create_app(db, config, settings)
    uv_config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=config.access_log,
        timeout_graceful_shutdown=drain_s,
        lifespan="on",
        server_header=False,
    )
    if config.access_log:
        # uvicorn sets its loggers to log_level; the access lines are INFO, so
        # without this --access-log would print nothing. The lines hold the
        # method, path and status (routes carry no message text in paths).
        logging.getLogger("uvicorn.access").setLevel(logging.INFO)
    return Server(uv_config)


def serve(
    db: str | Path | None,
    config: GatewayConfig,
    settings: Settings | None = None,
    *,
    on_ready: Callable[[str], None] | None = None,
) -> None:
    """Serve until a signal arrives; ``on_ready`` gets the URL once listening."""
    sock = bind(config.host, config.port)
    url = listen_url(sock)
    server = make_server(
        db,
        config,
        settings,
        on_ready=(lambda: on_ready(url)) if on_ready else None,
        freeze_gc=True,
    )
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()


__all__ = ["bind", "freeze_startup_objects", "listen_url", "make_server", "serve"]
