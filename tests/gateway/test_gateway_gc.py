"""``memstore serve`` exempts what it started with from the collector's full
passes (memstore.gateway.server.freeze_startup_objects); an app served in
someone else's process leaves the collector alone."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

SERVE = textwrap.dedent(
    """
    import gc, os, signal, sys
    from memstore.config import Settings
    from memstore.gateway.config import GatewayConfig
    from memstore.gateway.server import serve

    def ready(url):
        print("frozen", gc.get_freeze_count(), flush=True)
        os.kill(os.getpid(), signal.SIGTERM)  # a clean stop, as a supervisor sends

    settings = Settings().replace(embedder="hashing", scheduler=False)
    serve(sys.argv[1], GatewayConfig(port=0), settings, on_ready=ready)
    print("collector on", gc.isenabled(), flush=True)
    """
)

EMBEDDED = textwrap.dedent(
    """
    import gc, sys, threading, time
    from memstore.config import Settings
    from memstore.gateway.config import GatewayConfig
    from memstore.gateway.server import bind, make_server

    sock = bind("127.0.0.1", 0)
    settings = Settings().replace(embedder="hashing", scheduler=False)
    server = make_server(sys.argv[1], GatewayConfig(port=0), settings)
    t = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    t.start()
    deadline = time.monotonic() + 60
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.started
    print("frozen", gc.get_freeze_count(), flush=True)
    server.should_exit = True
    t.join(60)
    """
)


def _run(script: str, db: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-c", script, str(db)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_serve_freezes_its_startup_objects_once_serving(tmp_path: Path) -> None:
    out = _run(SERVE, tmp_path / "g.db")
    frozen = int(out.split("frozen ", 1)[1].split()[0])
    # The interpreter, the web stack and the open store: tens of thousands.
    assert frozen > 10_000, out
    assert "collector on True" in out


def test_an_app_served_in_a_host_process_leaves_the_collector_alone(tmp_path: Path) -> None:
    out = _run(EMBEDDED, tmp_path / "h.db")
    assert "frozen 0" in out, out
