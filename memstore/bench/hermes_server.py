"""Hermes' real api_server (``hermes gateway run``) in a child process, for tests and benchmarks.

``ApiServer`` prepares a Hermes home (a model section pointing at an
OpenAI-compatible endpoint on loopback; memstore installed the documented
way, ``memstore hermes install``, or not at all), starts the gateway with
only its api_server platform on a free loopback port, and stops it with
SIGTERM. ``EchoModel`` is the smallest model server Hermes accepts (plain and
streamed chat completions), for the benchmark; the tests use their own fake.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from memstore.errors import ConfigError
from memstore.hermes_provider.home import edit_config, section

READY_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 30.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def hermes_command() -> list[str]:
    """``hermes`` from this Python's environment (the one memstore is installed in)."""
    exe = Path(sys.executable).with_name("hermes")
    found = str(exe) if exe.exists() else shutil.which("hermes")
    if not found:
        raise ConfigError('the api_server needs hermes-agent: pip install "memstore-agent[hermes]"')
    return [found, "gateway", "run"]


def prepare_home(
    home: Path,
    model_url: str,
    *,
    memstore: bool,
    memstore_config: Mapping[str, Any] | None = None,
    max_concurrent_runs: int = 64,
) -> None:
    """A Hermes home whose model is ``model_url``, with memstore installed or not.

    The api_server answers 429 beyond ``max_concurrent_runs`` runs in flight
    (Hermes' default is 10)."""
    from memstore.hermes_provider.install import install

    home.mkdir(parents=True, exist_ok=True)
    if memstore:
        install(home)

    def settings(data: Any) -> None:
        model = section(data, "model")
        model.update(default="fake", provider="custom", base_url=model_url, api_key="x")
        model["context_length"] = 128000  # known: Hermes does not probe the endpoint for it
        api = section(section(data, "gateway"), "api_server")
        api["max_concurrent_runs"] = max_concurrent_runs
        if memstore:
            section(section(data, "memory"), "memstore").update(dict(memstore_config or {}))

    edit_config(home, settings)


@dataclass
class Reply:
    status: int
    body: dict[str, Any]
    seconds: float
    headers: dict[str, str]

    @property
    def text(self) -> str:
        choices = self.body.get("choices") or [{}]
        return str((choices[0].get("message") or {}).get("content") or "")


class ApiServer:
    """``hermes gateway run`` with the api_server on 127.0.0.1; see the module docstring."""

    def __init__(self, home: Path, *, log_path: Path | None = None) -> None:
        self.home = home
        self.port = free_port()
        self.key = "k-" + secrets.token_hex(12)  # Hermes wants at least 16 characters
        self.log_path = log_path or home / "gateway.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.returncode: int | None = None
        self.stop_seconds: float | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, *, wait: bool = True) -> ApiServer:
        env = {
            k: v for k, v in os.environ.items() if not k.startswith(("API_SERVER_", "MEMSTORE_"))
        }
        env.update(
            HERMES_HOME=str(self.home),
            API_SERVER_ENABLED="1",
            API_SERVER_KEY=self.key,
            API_SERVER_HOST="127.0.0.1",
            API_SERVER_PORT=str(self.port),
            PYTHONUNBUFFERED="1",
        )
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                hermes_command(), env=env, stdout=log, stderr=subprocess.STDOUT, cwd=self.home
            )
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                raise RuntimeError(f"hermes gateway exited early:\n{self.log()[-3000:]}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except (OSError, urllib.error.URLError):
                time.sleep(0.2)
        raise TimeoutError(
            f"hermes gateway not ready after {timeout_s:.0f} s:\n{self.log()[-3000:]}"
        )

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM, then SIGKILL after ``timeout_s``; returns the exit status."""
        proc, self.proc = self.proc, None
        if proc is None:
            return self.returncode if self.returncode is not None else 0
        started = time.monotonic()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        self.stop_seconds = time.monotonic() - started
        self.returncode = proc.returncode
        return proc.returncode

    def __enter__(self) -> ApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    # -- requests ------------------------------------------------------------------

    def chat(
        self,
        text: str,
        *,
        session_id: str | None = None,
        session_key: str | None = None,
        timeout_s: float = 180.0,
    ) -> Reply:
        headers = {"Authorization": f"Bearer {self.key}", "Content-Type": "application/json"}
        if session_id:
            headers["X-Hermes-Session-Id"] = session_id
        if session_key:
            headers["X-Hermes-Session-Key"] = session_key
        body = {"model": "hermes", "messages": [{"role": "user", "content": text}]}
        req = urllib.request.Request(
            self.url + "/v1/chat/completions", data=json.dumps(body).encode(), headers=headers
        )
        started = time.perf_counter()
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as r:
                status, raw, got = r.status, r.read(), dict(r.headers)
        except urllib.error.HTTPError as exc:
            status, raw, got = exc.code, exc.read(), dict(exc.headers)
        seconds = time.perf_counter() - started
        try:
            parsed = json.loads(raw or b"{}")
        except ValueError:
            parsed = {"raw": raw.decode("utf-8", "replace")}
        return Reply(status, parsed if isinstance(parsed, dict) else {"raw": parsed}, seconds, got)

    # -- what the process holds --------------------------------------------------------

    def threads(self) -> int:
        return len(os.listdir(f"/proc/{self._pid()}/task"))

    def fds(self) -> int:
        return len(os.listdir(f"/proc/{self._pid()}/fd"))

    def _pid(self) -> int:
        if self.proc is None:
            raise RuntimeError("the gateway is not running")
        return self.proc.pid

    # -- the two databases -------------------------------------------------------------

    def hermes_user_messages(self, session_id: str | None = None) -> list[tuple[str, str]]:
        """(session, text) of every user message in Hermes' own ``state.db``."""
        sql = "SELECT session_id, content FROM messages WHERE role = 'user'"
        return _rows(self.home / "state.db", sql, session_id)

    def memstore_user_messages(self, session_id: str | None = None) -> list[tuple[str, str]]:
        sql = "SELECT session_id, text FROM l0_messages WHERE role = 'user'"
        return _rows(self.home / "memstore.db", sql, session_id)

    def memstore_users(self) -> dict[str, str]:
        """session id → memstore user of its captured messages."""
        rows = _rows(self.home / "memstore.db", "SELECT session_id, user_id FROM l0_messages", None)
        return dict(rows)


def _rows(db: Path, sql: str, session_id: str | None) -> list[tuple[str, str]]:
    if not db.exists():
        return []
    # Plain tables only, read-only: the stdlib module needs no sqlite-vec for these.
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        if session_id is not None:
            return [
                (str(a), str(b))
                for a, b in conn.execute(sql + " AND session_id = ?", (session_id,))
            ]
        return [(str(a), str(b)) for a, b in conn.execute(sql)]
    except sqlite3.OperationalError:
        return []  # the table does not exist yet
    finally:
        conn.close()


# -- the smallest model Hermes accepts ---------------------------------------------------------

ChatReply = Callable[[dict[str, Any]], str]


def _last_user_text(request: dict[str, Any]) -> str:
    for m in reversed(request.get("messages") or []):
        if m.get("role") == "user":
            c = m.get("content")
            return c if isinstance(c, str) else json.dumps(c)
    return ""


class EchoModel:
    """An OpenAI-compatible chat endpoint on loopback that answers at once.

    Keeps every request (the benchmark looks there for other callers' facts,
    e.g. in the ``<memory-context>`` Hermes adds to the user message)."""

    def __init__(self, reply: ChatReply | None = None) -> None:
        self.reply = reply or (lambda _r: "Noted.")
        # (the last user message, the whole request as text) per chat request
        self.seen: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    def start(self) -> EchoModel:
        model = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # stdlib's signature
                return

            def do_POST(self) -> None:  # stdlib's naming
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    request = json.loads(self.rfile.read(length) or b"{}")
                except ValueError:
                    request = {}
                if not self.path.endswith("/chat/completions"):
                    self._send(404, b'{"error": {"message": "not found"}}', "application/json")
                    return
                with model._lock:
                    model.seen.append((_last_user_text(request), json.dumps(request)))
                text = model.reply(request)
                if request.get("stream"):
                    self._send(200, _sse(text), "text/event-stream")
                else:
                    self._send(200, json.dumps(_completion(text)).encode(), "application/json")

            def _send(self, status: int, body: bytes, kind: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._server = _QuietServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    @property
    def base_url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Hermes' HTTP client drops idle keep-alive connections: not an error.
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


def _completion(text: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-echo",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": "fake",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


def _sse(text: str) -> bytes:
    def chunk(delta: dict[str, Any], finish: str | None) -> str:
        body = {
            "id": "chatcmpl-echo",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": "fake",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        return f"data: {json.dumps(body)}\n\n"

    parts = [
        chunk({"role": "assistant", "content": text}, None),
        chunk({}, "stop"),
        "data: [DONE]\n\n",
    ]
    return "".join(parts).encode()


__all__ = ["ApiServer", "EchoModel", "Reply", "free_port", "hermes_command", "prepare_home"]
