"""A small OpenAI-compatible HTTP server for benchmarks and tests (stdlib only).

Runs on 127.0.0.1 with an ephemeral port in a daemon thread, so tests drive the
real ``openai`` client (retries, timeouts, SSE parsing, base64 embeddings)
instead of mocking it::

    with FakeOpenAI(chat=lambda req: '{"a": 1}') as fake:
        client = openai.OpenAI(base_url=fake.base_url, api_key="x")
        ...
        assert fake.chat_requests()[0]["model"] == "m"

Routes: ``POST /v1/chat/completions`` (JSON or ``stream: true`` SSE),
``POST /v1/embeddings``, ``GET /v1/models``; everything else answers 404 with
an OpenAI-style error body (Hermes probes ``POST /api/show``, for instance).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import math
import re
import socket
import struct
import threading
import time
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

ChatHandler = Callable[[dict[str, Any]], str | dict[str, Any]]

CHAT_PATH = "/v1/chat/completions"
EMBED_PATH = "/v1/embeddings"
MODELS_PATH = "/v1/models"
DEFAULT_MODEL = "fake-model"

_WORD = re.compile(r"\w+", re.UNICODE)


def _default_chat(_request: dict[str, Any]) -> str:
    return "ok"


def _count_words(text: str) -> int:
    return len(_WORD.findall(text))


def _bucket(token: str, dim: int) -> tuple[int, float]:
    digest = hashlib.blake2b(token.encode("utf-8"), digest_size=8).digest()
    value = int.from_bytes(digest, "little")
    return value % dim, (1.0 if (value >> 63) & 1 else -1.0)


def fake_embedding(text: str, dim: int = 64) -> list[float]:
    """Deterministic unit-norm vector: a signed hashed bag of lower-cased words.

    Texts sharing words get a high cosine similarity, which is what retrieval
    tests need; identical texts get identical vectors across processes because
    blake2b (unlike ``hash()``) is not salted.
    """
    if dim <= 0:
        raise ValueError("dim must be positive")
    vec = [0.0] * dim
    for word in _WORD.findall(text.lower()):
        idx, sign = _bucket(word, dim)
        vec[idx] += sign
    norm = math.sqrt(sum(x * x for x in vec))
    if norm == 0.0:
        # No words (empty or punctuation only): still return a unit vector.
        idx, sign = _bucket("\x00" + text, dim)
        vec[idx] = sign
        return vec
    return [x / norm for x in vec]


def _error_body(status: int, message: str) -> dict[str, Any]:
    kinds = {
        400: "invalid_request_error",
        401: "authentication_error",
        404: "not_found_error",
        429: "rate_limit_error",
    }
    return {
        "error": {
            "message": message,
            "type": kinds.get(status, "server_error"),
            "param": None,
            "code": str(status),
        }
    }


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # Do not join handler threads on close: a delayed handler must not hold up stop().
    block_on_close = False
    fake: FakeOpenAI

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients hanging up mid-response (timeouts) are expected; stay quiet.
        pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        self.server.fake._track(self.connection, add=True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.fake._track(self.connection, add=False)

    # -- plumbing ----------------------------------------------------------

    def _read_json(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return None

    def _send_json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode("utf-8")
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            self.close_connection = True

    def _dispatch(self, method: str) -> None:
        path = self.path.split("?", 1)[0]
        body = self._read_json() if method == "POST" else None
        fake = self.server.fake
        fake._record(path, body)
        delay = fake._take_delay(path)
        if delay and fake._stopping.wait(delay):
            self.close_connection = True
            return
        failure = fake._take_failure(path)
        if failure is not None:
            status, message, headers = failure
            self._send_json(status, _error_body(status, message), headers)
            return
        request = body if isinstance(body, dict) else {}
        if method == "POST" and path == CHAT_PATH:
            self._chat(request)
        elif method == "POST" and path == EMBED_PATH:
            self._embeddings(request)
        elif method == "GET" and path == MODELS_PATH:
            self._send_json(200, {"object": "list", "data": [_model_entry(DEFAULT_MODEL)]})
        else:
            self._send_json(404, _error_body(404, f"no route {method} {path}"))

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    # -- routes ------------------------------------------------------------

    def _chat(self, request: dict[str, Any]) -> None:
        try:
            answer = self.server.fake._chat_handler(request)
        except Exception as exc:  # a broken test handler should show up as a 500
            self._send_json(500, _error_body(500, f"chat handler raised {exc!r}"))
            return
        if isinstance(answer, str):
            content: str | None = answer
            tool_calls: list[dict[str, Any]] = []
            finish = "stop"
        else:
            content = answer.get("content")
            tool_calls = list(answer.get("tool_calls") or [])
            finish = answer.get("finish_reason") or ("tool_calls" if tool_calls else "stop")
        model = str(request.get("model") or DEFAULT_MODEL)
        prompt_words = sum(_count_words(_text_of(m.get("content"))) for m in _messages(request))
        completion_words = _count_words(content or "") + sum(
            _count_words(str(c.get("arguments", ""))) for c in tool_calls
        )
        usage = {
            "prompt_tokens": prompt_words,
            "completion_tokens": completion_words,
            "total_tokens": prompt_words + completion_words,
        }
        cid = "chatcmpl-" + uuid.uuid4().hex[:24]
        if request.get("stream"):
            self._chat_stream(cid, model, content, tool_calls, finish, usage, request)
            return
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if tool_calls:
            message["tool_calls"] = [
                {
                    "id": c.get("id") or "call_" + uuid.uuid4().hex[:12],
                    "type": "function",
                    "function": {"name": c["name"], "arguments": c.get("arguments", "{}")},
                }
                for c in tool_calls
            ]
        reply = {
            "id": cid,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": usage,
        }
        fault = self.server.fake._take_fault(CHAT_PATH)
        if fault is None:
            self._send_json(200, reply)
        else:
            self._send_faulty(fault, json.dumps(reply).encode("utf-8"))

    def _send_faulty(self, fault: tuple[str, int], data: bytes) -> None:
        """Answer 200 with a broken body (see ``FakeOpenAI.fault_next``)."""
        kind, size = fault
        self.close_connection = True
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            if kind == "truncated":  # a complete HTTP message whose JSON is cut off
                data = data[: len(data) // 2]
                self.send_header("Content-Length", str(len(data)))
            elif kind == "disconnect":  # the connection drops mid-body
                self.send_header("Content-Length", str(len(data)))
                data = data[: len(data) // 2]
            elif kind == "huge":  # a body past any cap, with its length declared
                data = b'{"choices": [{"message": {"content": "' + b"x" * size + b'"}}]}'
                self.send_header("Content-Length", str(len(data)))
            elif kind == "huge_chunked":  # the same, length not declared up front
                self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Connection", "close")
            self.end_headers()
            if kind == "huge_chunked":
                self._send_chunked_filler(size)
            else:
                self.wfile.write(data)
            self.wfile.flush()
        except OSError:
            pass

    def _send_chunked_filler(self, size: int) -> None:
        head = b'{"choices": [{"message": {"content": "'
        self.wfile.write(b"%x\r\n%s\r\n" % (len(head), head))
        piece = b"x" * 65536
        sent = 0
        while sent < size and not self.server.fake._stopping.is_set():
            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            sent += len(piece)
            self.server.fake._count_sent(len(piece))
        tail = b'"}}]}'
        self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(tail), tail))

    def _chat_stream(
        self,
        cid: str,
        model: str,
        content: str | None,
        tool_calls: list[dict[str, Any]],
        finish: str,
        usage: dict[str, int],
        request: dict[str, Any],
    ) -> None:
        created = int(time.time())

        def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
            return {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
            }

        chunks: list[dict[str, Any]] = [chunk({"role": "assistant", "content": ""})]
        if content:
            # Split mid-word too, so consumers must really concatenate deltas.
            for piece in _pieces(content, 7):
                chunks.append(chunk({"content": piece}))
        for i, call in enumerate(tool_calls):
            head = {
                "index": i,
                "id": call.get("id") or "call_" + uuid.uuid4().hex[:12],
                "type": "function",
                "function": {"name": call["name"], "arguments": ""},
            }
            chunks.append(chunk({"tool_calls": [head]}))
            for piece in _pieces(str(call.get("arguments", "{}")), 9):
                chunks.append(
                    chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
                )
        last = chunk({}, finish)
        include_usage = bool((request.get("stream_options") or {}).get("include_usage"))
        if include_usage:
            # What api.openai.com does: a trailing chunk with no choices.
            chunks.append(last)
            chunks.append({**chunk({}), "choices": [], "usage": usage})
        else:
            # What llama.cpp / vLLM do: usage rides on the finish chunk.
            chunks.append({**last, "usage": usage})
        self.close_connection = True
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            for item in chunks:
                self.wfile.write(f"data: {json.dumps(item)}\n\n".encode())
                self.wfile.flush()
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except OSError:
            pass

    def _embeddings(self, request: dict[str, Any]) -> None:
        raw = request.get("input")
        if raw is None:
            self._send_json(400, _error_body(400, "'input' is required"))
            return
        texts = _embedding_inputs(raw)
        dim = int(request.get("dimensions") or self.server.fake.embed_dim)
        b64 = request.get("encoding_format") == "base64"
        data = []
        for i, text in enumerate(texts):
            vec = fake_embedding(text, dim)
            emb: Any = (
                base64.b64encode(struct.pack(f"<{dim}f", *vec)).decode("ascii") if b64 else vec
            )
            data.append({"object": "embedding", "index": i, "embedding": emb})
        tokens = sum(_count_words(t) for t in texts)
        self._send_json(
            200,
            {
                "object": "list",
                "data": data,
                "model": str(request.get("model") or DEFAULT_MODEL),
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            },
        )


def _messages(request: dict[str, Any]) -> list[dict[str, Any]]:
    msgs = request.get("messages")
    return [m for m in msgs if isinstance(m, dict)] if isinstance(msgs, list) else []


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _embedding_inputs(raw: Any) -> list[str]:
    # input may be a string, a list of strings, a token list, or a list of token lists.
    if isinstance(raw, str):
        return [raw]
    if isinstance(raw, list):
        if raw and all(isinstance(x, int) for x in raw):
            return [" ".join(map(str, raw))]
        return [x if isinstance(x, str) else " ".join(map(str, x)) for x in raw]
    return [str(raw)]


def _model_entry(model_id: str) -> dict[str, Any]:
    return {"id": model_id, "object": "model", "created": 0, "owned_by": "fakeopenai"}


class FakeOpenAI:
    """OpenAI-compatible test server; see the module docstring."""

    def __init__(self, chat: ChatHandler | None = None, embed_dim: int = 64) -> None:
        self._chat_handler: ChatHandler = chat or _default_chat
        self.embed_dim = embed_dim
        self.requests: list[dict[str, Any]] = []
        self.base_url = ""
        self._lock = threading.Lock()
        self._failures: dict[str, list[tuple[int, str, dict[str, str]]]] = {}
        self._delays: dict[str, list[float]] = {}
        self._faults: dict[str, list[tuple[str, int]]] = {}
        self.bytes_sent = 0
        self._connections: set[socket.socket] = set()
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------

    def start(self) -> FakeOpenAI:
        if self._server is not None:
            return self
        self._stopping.clear()
        server = _Server(("127.0.0.1", 0), _Handler)
        server.fake = self
        self._server = server
        port = server.server_address[1]
        self.base_url = f"http://127.0.0.1:{port}/v1"
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        self._stopping.set()  # wakes delayed handlers
        server.shutdown()
        server.server_close()
        with self._lock:
            conns = list(self._connections)
        for conn in conns:
            # Keep-alive connections would otherwise park handler threads forever.
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- test controls -------------------------------------------------------

    def set_chat(self, handler: ChatHandler) -> None:
        self._chat_handler = handler

    def fail_next(
        self,
        status: int,
        n: int = 1,
        path: str = CHAT_PATH,
        retry_after: float | None = None,
        message: str | None = None,
    ) -> None:
        """Answer the next ``n`` requests to ``path`` with HTTP ``status``.

        ``retry_after`` (seconds) adds ``retry-after-ms``, which the openai
        client honours instead of its own backoff: handy to keep tests fast.
        ``message`` replaces the default error message.
        """
        headers = {"retry-after-ms": str(int(retry_after * 1000))} if retry_after else {}
        with self._lock:
            entry = (status, message or f"fake failure {status}", headers)
            self._failures.setdefault(path, []).extend([entry] * n)

    def fault_next(self, kind: str, n: int = 1, size: int = 0) -> None:
        """Answer the next ``n`` chat requests with HTTP 200 and a broken body.

        ``kind``: ``"truncated"`` (the JSON body cut in half, Content-Length
        matching what is sent), ``"disconnect"`` (the full length declared, half
        sent, connection closed), ``"huge"`` (a body of ``size`` bytes with its
        Content-Length) or ``"huge_chunked"`` (``size`` bytes, chunked, no
        length: a client only notices by counting). ``bytes_sent`` counts what
        ``huge_chunked`` wrote before the client hung up.
        """
        if kind not in ("truncated", "disconnect", "huge", "huge_chunked"):
            raise ValueError(f"unknown fault {kind!r}")
        with self._lock:
            self._faults.setdefault(CHAT_PATH, []).extend([(kind, size)] * n)

    def delay_next(self, seconds: float, n: int = 1, path: str = CHAT_PATH) -> None:
        with self._lock:
            self._delays.setdefault(path, []).extend([seconds] * n)

    def reset_faults(self) -> None:
        """Drop every queued failure, fault and delay (requests seen stay)."""
        with self._lock:
            self._failures.clear()
            self._faults.clear()
            self._delays.clear()

    def chat_requests(self) -> list[dict[str, Any]]:
        return self._bodies(CHAT_PATH)

    def embedding_requests(self) -> list[dict[str, Any]]:
        return self._bodies(EMBED_PATH)

    # -- used by the handler -------------------------------------------------

    def _bodies(self, path: str) -> list[dict[str, Any]]:
        with self._lock:
            return [r["json"] for r in self.requests if r["path"] == path]

    def _record(self, path: str, body: Any) -> None:
        with self._lock:
            self.requests.append({"path": path, "json": body})

    def _take_failure(self, path: str) -> tuple[int, str, dict[str, str]] | None:
        with self._lock:
            queue = self._failures.get(path)
            return queue.pop(0) if queue else None

    def _take_fault(self, path: str) -> tuple[str, int] | None:
        with self._lock:
            queue = self._faults.get(path)
            return queue.pop(0) if queue else None

    def _count_sent(self, n: int) -> None:
        with self._lock:
            self.bytes_sent += n

    def _take_delay(self, path: str) -> float:
        with self._lock:
            queue = self._delays.get(path)
            return queue.pop(0) if queue else 0.0

    def _track(self, conn: socket.socket, *, add: bool) -> None:
        with self._lock:
            if add:
                self._connections.add(conn)
            else:
                self._connections.discard(conn)


__all__ = ["FakeOpenAI", "fake_embedding"]
