"""The gate every request passes before a route: the Host allow-list, CORS,
preflight, Bearer auth and the body size limit, as one ASGI middleware.

The Host check is what keeps a web page out when the gateway listens on
loopback: with DNS rebinding, a page from ``attacker.example`` makes the
browser send its requests to 127.0.0.1 with ``Host: attacker.example``. It
applies with and without an API key.

It sits outside the web framework so that a refused request never reaches
routing or body parsing, and so that its answers (401, 413, 204) look the
same on every route.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from starlette.exceptions import HTTPException

from memstore.gateway.config import GatewayConfig

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

OPEN_PATHS = frozenset({"/health"})
# The inspector's pages: a browser cannot send the Bearer header, so the
# inspector checks the key itself (a session cookie from its login form) and
# guards its forms with CSRF tokens instead of the JSON-only rule.
UI_PREFIX = "/ui"


def is_ui(path: str) -> bool:
    return path == UI_PREFIX or path.startswith(UI_PREFIX + "/")


ALLOW_METHODS = b"GET, POST, DELETE, OPTIONS"
ALLOW_HEADERS = b"Content-Type, Authorization"


def token_matches(given: str, expected: str) -> bool:
    """Constant-time comparison (no early exit on the first differing byte)."""
    return hmac.compare_digest(given.encode("utf-8"), expected.encode("utf-8"))


def host_name(header: str) -> str:
    """The name in a Host header, lowercase, without the port or IPv6 brackets."""
    value = header.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


class Guard:
    def __init__(self, app: ASGIApp, config: GatewayConfig) -> None:
        self.app = app
        self.config = config
        self.origins = frozenset(config.cors_origins)
        self.hosts = config.host_names()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v for k, v in scope.get("headers", [])}
        refused = self._host_problem(headers.get("host"))
        if refused:
            await _respond(send, 421, {"error": refused})
            return
        cors = self._cors_headers(headers.get("origin"))
        send = _with_headers(send, cors)
        if scope["method"] == "OPTIONS":
            await _respond(send, 204, None)
            return
        path = scope.get("path", "")
        ui = is_ui(path)
        if self.config.api_key and path not in OPEN_PATHS and not ui:
            problem = self._auth_problem(headers.get("authorization"))
            if problem:
                await _respond(
                    send, 401, {"error": f"Unauthorized: {problem}"},
                    [(b"www-authenticate", b'Bearer realm="memstore"')],
                )  # fmt: skip
                return
        length = headers.get("content-length")
        limit = self.config.max_body_bytes
        if length is not None:
            try:
                too_big = int(length) > limit
            except ValueError:
                await _respond(send, 400, {"error": "invalid Content-Length header"})
                return
            if too_big:
                await _respond(send, 413, _too_large(limit))
                return
        has_body = (length not in (None, b"0")) or b"chunked" in headers.get(
            "transfer-encoding", b""
        )
        if has_body and not ui and not _is_json(headers.get("content-type")):
            # A browser can send text/plain or a form to localhost without a
            # CORS preflight; refusing them keeps other websites out.
            await _respond(
                send, 415, {"error": "send the body as JSON (Content-Type: application/json)"}
            )
            return
        await self.app(scope, _limited(receive, limit), send)

    def _host_problem(self, header: bytes | None) -> str | None:
        if self.hosts is None or header is None:
            # No Host header at all is HTTP/1.0 from a local tool, never a browser.
            return None
        raw = header.decode("latin-1").strip()
        name = host_name(raw)
        if name in self.hosts:
            return None
        return (
            f"Host {raw!r} is not one this gateway answers to; if it is the gateway's "
            f"own name, start it with --allowed-host {name or raw}"
        )

    def _auth_problem(self, header: bytes | None) -> str | None:
        expected = self.config.api_key or ""
        scheme, _, token = (header.decode("latin-1") if header else "").strip().partition(" ")
        # The scheme is case-insensitive (RFC 9110 section 11.1).
        if scheme.lower() != "bearer" or not token.strip():
            return "missing Bearer token"
        if not token_matches(token.strip(), expected):
            return "invalid token"
        return None

    def _cors_headers(self, origin: bytes | None) -> list[tuple[bytes, bytes]]:
        if not self.origins:
            return []
        if "*" in self.origins:
            allow = b"*"
        elif origin is not None and origin.decode("latin-1") in self.origins:
            allow = origin
        else:
            return [(b"vary", b"Origin")]
        return [
            (b"access-control-allow-origin", allow),
            (b"access-control-allow-methods", ALLOW_METHODS),
            (b"access-control-allow-headers", ALLOW_HEADERS),
            (b"access-control-max-age", b"600"),
            (b"vary", b"Origin"),
        ]


def _is_json(content_type: bytes | None) -> bool:
    if not content_type:
        return False
    mime = content_type.decode("latin-1").split(";")[0].strip().lower()
    return mime == "application/json" or mime.endswith("+json")


def _too_large(limit: int) -> dict[str, str]:
    return {"error": f"request body larger than {limit} bytes"}


def _limited(receive: Receive, limit: int) -> Receive:
    """A body without Content-Length (chunked) is counted as it arrives."""
    seen = 0

    async def wrapped() -> Message:
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > limit:
                # The framework re-raises HTTPException from body reading; the
                # app's handler turns it into the usual JSON error.
                raise HTTPException(413, _too_large(limit)["error"])
        return message

    return wrapped


def _with_headers(send: Send, extra: list[tuple[bytes, bytes]]) -> Send:
    if not extra:
        return send

    async def wrapped(message: Message) -> None:
        if message["type"] == "http.response.start":
            message["headers"] = [*message.get("headers", []), *extra]
        await send(message)

    return wrapped


async def _respond(
    send: Send,
    status: int,
    body: dict[str, Any] | None,
    headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    data = b"" if body is None else json.dumps(body).encode("utf-8")
    out = list(headers or [])
    if body is not None:
        out.append((b"content-type", b"application/json"))
    out.append((b"content-length", str(len(data)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": out})
    await send({"type": "http.response.body", "body": data})


__all__ = ["UI_PREFIX", "Guard", "host_name", "is_ui", "token_matches"]
