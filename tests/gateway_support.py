"""A real gateway on a free loopback port, in a thread, for the gateway tests."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from memstore import Settings
from memstore.gateway.config import GatewayConfig
from memstore.gateway.server import bind, make_server


class Running:
    def __init__(self, url: str, server: Any, config: GatewayConfig) -> None:
        self.url = url
        self.server = server
        self.config = config

    def client(self, token: str | None = None, **kw: Any) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30.0, **kw)

    @property
    def store(self) -> Any:
        return self.server.config.app.app.state.store


@contextmanager
def running_gateway(db: Path, settings: Settings | None = None, **config: Any) -> Iterator[Running]:
    cfg = GatewayConfig(port=0, **config)
    sock = bind("127.0.0.1", 0)
    port = sock.getsockname()[1]
    server: Any = make_server(
        db, cfg, settings or Settings().replace(embedder="hashing", scheduler=False), drain_s=5.0
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("gateway did not start")
        time.sleep(0.02)
    try:
        yield Running(f"http://127.0.0.1:{port}", server, cfg)
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()
        assert not thread.is_alive(), "gateway did not stop"
