"""A client shaped like the upstream's Hermes plugin client (urllib, JSON,
optional Bearer header, the same routes and fields) through a two-session
conversation, and the server as a real process stopped by SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from memstore import Settings, Store
from memstore.bench.fakeopenai import FakeOpenAI
from tests.gateway_support import running_gateway


class UpstreamStyleClient:
    """What the upstream plugin sends: POST JSON, GET /health, Bearer when keyed."""

    def __init__(self, base_url: str, api_key: str | None = None, timeout: float = 30) -> None:
        self.base = base_url.rstrip("/")
        self.key = api_key
        self.timeout = timeout

    def _headers(self, body: bool) -> dict[str, str]:
        h = {"Content-Type": "application/json"} if body else {}
        if self.key:
            h["Authorization"] = f"Bearer {self.key}"
        return h

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        req = urllib.request.Request(
            self.base + path,
            data=json.dumps(body).encode("utf-8"),
            headers=self._headers(True),
            method="POST",
        )
        with urllib.request.urlopen(req, timeout=self.timeout) as resp:
            out: dict[str, Any] = json.loads(resp.read().decode("utf-8"))
            return out

    def health(self) -> dict[str, Any]:
        req = urllib.request.Request(self.base + "/health", headers=self._headers(False))
        with urllib.request.urlopen(req, timeout=self.timeout) as resp:
            out: dict[str, Any] = json.loads(resp.read().decode("utf-8"))
            return out

    def recall(self, query: str, session_key: str, user_id: str = "") -> dict[str, Any]:
        body = {"query": query, "session_key": session_key}
        if user_id:
            body["user_id"] = user_id
        return self.post("/recall", body)

    def capture(self, user: str, assistant: str, session_key: str, user_id: str = "") -> Any:
        body = {"user_content": user, "assistant_content": assistant, "session_key": session_key}
        if user_id:
            body["user_id"] = user_id
        return self.post("/capture", body)

    def search_memories(self, query: str, limit: int = 5, type_filter: str = "") -> Any:
        body: dict[str, Any] = {"query": query, "limit": limit}
        if type_filter:
            body["type"] = type_filter
        return self.post("/search/memories", body)

    def search_conversations(self, query: str, limit: int = 5, session_key: str = "") -> Any:
        body: dict[str, Any] = {"query": query, "limit": limit}
        if session_key:
            body["session_key"] = session_key
        return self.post("/search/conversations", body)

    def end_session(self, session_key: str, user_id: str = "") -> Any:
        body = {"session_key": session_key}
        if user_id:
            body["user_id"] = user_id
        return self.post("/session/end", body)


def test_two_session_conversation_through_an_upstream_style_client(tmp_path: Path) -> None:
    key = "k-" + "x" * 30
    with running_gateway(tmp_path / "c.db", api_key=key) as gw:
        client = UpstreamStyleClient(gw.url, api_key=key)
        assert client.health()["status"] in ("ok", "degraded")
        # The plugin sends user_id "default" unless Hermes gave one.
        turns = [
            ("Hi! I moved to Lisbon last May.", "Welcome to Lisbon!"),
            ("I love green tea, especially sencha.", "Sencha is great."),
            ("I work as a nurse at night.", "That is demanding."),
        ]
        for u, a in turns:
            assert client.recall(u, "session-1")["context"] == ""
            assert client.capture(u, a, "session-1")["l0_recorded"] == 2
        assert client.end_session("session-1") == {"flushed": True}

        # Session two: what session one said comes back before the turn.
        ctx = client.recall("Should I make green tea tonight?", "session-2")
        assert "tea" in ctx["context"].lower() and ctx["memory_count"] >= 1
        client.capture("Yes, make it sencha.", "Sencha it is.", "session-2")
        mem = client.search_memories("Lisbon", type_filter="persona")
        assert mem["total"] >= 1 and "Lisbon" in mem["results"]
        conv = client.search_conversations("sencha", session_key="session-2")
        assert conv["total"] == 2 and "Session: session-1" not in conv["results"]
        everywhere = client.search_conversations("sencha")
        assert "Session: session-1" in everywhere["results"]
        assert "Session: session-2" in everywhere["results"]
        assert client.end_session("session-2")["flushed"] is True

        # Without the token the same client is refused.
        with pytest.raises(urllib.error.HTTPError) as err:
            UpstreamStyleClient(gw.url).recall("tea", "session-3")
        assert err.value.code == 401


def _start(db: Path, *args: str, **env_extra: str) -> tuple[subprocess.Popen[str], str]:
    env = dict(os.environ)
    env.update(MEMSTORE_EMBEDDER="hashing", MEMSTORE_CONFIG=str(db) + ".none.toml", **env_extra)
    proc = subprocess.Popen(
        [sys.executable, "-m", "memstore", "serve", "--db", str(db), "--port", "0", *args],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    assert proc.stderr is not None
    line = proc.stderr.readline()
    if "gateway on" not in line:
        proc.kill()
        raise AssertionError(f"no ready line: {line!r}")
    url = line.split("gateway on ", 1)[1].split()[0]
    return proc, url


@pytest.mark.slow
def test_sigterm_drains_a_request_in_flight_then_closes_the_store(tmp_path: Path) -> None:
    db = tmp_path / "proc.db"
    with FakeOpenAI(chat=lambda req: '{"memories": []}') as fake:
        proc, url = _start(
            db, MEMSTORE_LLM_BASE_URL=fake.base_url, MEMSTORE_LLM_MODEL="fake-model",
            MEMSTORE_LLM_API_KEY="x", MEMSTORE_LLM_MAX_RETRIES="0",
        )  # fmt: skip
        try:
            client = UpstreamStyleClient(url)
            assert client.capture("I love green tea", "ok", "s1")["l0_recorded"] == 2
            # Session end waits for extraction; the model answers after 3 s.
            fake.delay_next(3.0)
            result: dict[str, Any] = {}

            def end() -> None:
                try:
                    result["body"] = client.end_session("s1")
                except Exception as exc:  # reported below
                    result["error"] = exc

            t = threading.Thread(target=end)
            t.start()
            deadline = time.monotonic() + 60
            while not fake.chat_requests():  # the request is now inside the server
                assert time.monotonic() < deadline, "extraction never called the model"
                time.sleep(0.05)
            proc.send_signal(signal.SIGTERM)
            t.join(timeout=60)
            rc = proc.wait(timeout=60)
            assert proc.stderr is not None
            rest = proc.stderr.read()
        finally:
            if proc.poll() is None:
                proc.kill()
    assert rc == 0, rest
    assert "stopped" in rest and "Traceback" not in rest
    assert result.get("body") == {"flushed": True}, result
    with Store.open(db, settings=Settings().replace(embedder="hashing", scheduler=False)) as s:
        assert s.search_conversations("default", "green tea", strategy="keyword")
        # The extraction that was in flight finished and moved the cursor.
        sessions = s.pipeline_status("default")[0]["sessions"]
        assert sessions[0]["messages_pending"] == 0


def test_non_loopback_without_key_refused_by_the_cli(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if "GATEWAY_API_KEY" not in k}
    proc = subprocess.run(
        [sys.executable, "-m", "memstore", "serve", "--db", str(tmp_path / "x.db"),
         "--host", "0.0.0.0", "--port", "0"],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "without an API key" in proc.stderr and "--insecure" in proc.stderr
    assert not (tmp_path / "x.db").exists()
