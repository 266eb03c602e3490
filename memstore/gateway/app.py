"""The ASGI application: one store per process, the guard, the routes, and
errors as JSON ``{"error": message}``."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from memstore.config import Settings
from memstore.errors import (
    EmbeddingError,
    InvalidInputError,
    LockedError,
    MemstoreError,
    NotFoundError,
)
from memstore.gateway.config import GatewayConfig, is_loopback
from memstore.gateway.deps import NotServing
from memstore.gateway.guard import Guard
from memstore.gateway.offload import turn_pool
from memstore.logtext import loggable
from memstore.porting.seed import SeedValidationError
from memstore.redact import redact
from memstore.store import Store

log = logging.getLogger("memstore.gateway")


def create_app(
    db: str | Path | None, config: GatewayConfig, settings: Settings | None = None
) -> Guard:
    """The app for ``db``; the store opens at startup and closes at shutdown
    (after uvicorn has drained the requests in flight)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.store = Store.open(db, settings=settings)
        try:
            # Before the first request, not under it (Store.load_embedder).
            app.state.store.load_embedder()
        except EmbeddingError as exc:  # serve anyway: embeddings fail as they would later
            log.warning("the embedder did not load at start-up: %s", loggable(exc))
        app.state.started = time.monotonic()
        try:
            async with AsyncExitStack() as stack:
                # Shut down (its calls finished) before the store closes.
                await stack.enter_async_context(turn_pool())
                for host in app.state.hosts:  # e.g. /mcp's session manager
                    await stack.enter_async_context(host())
                yield
        finally:
            store, app.state.store = app.state.store, None
            store.close()

    from memstore import __version__
    from memstore.gateway import upstream, upstream_delete, v1

    api = FastAPI(
        title="memstore gateway",
        version=__version__,
        description="Long-term memory for LLM agents over HTTP: the upstream-compatible "
        "routes (/health, /recall, /capture, /search/*, /session/end, /seed, "
        "/v2/conversation/delete, /v2/atomic/delete) and "
        "memstore's own API under /v1.",
        lifespan=lifespan,
        openapi_url="/v1/openapi.json",
        docs_url=None,
        redoc_url=None,
    )
    api.state.config = config
    api.state.store = None
    api.state.hosts = []
    api.include_router(upstream.router)
    api.include_router(upstream_delete.router)
    api.include_router(v1.router)
    _install_error_handlers(api)
    _mount_hosts(api, config)
    return Guard(api, config)


def _mount_hosts(api: FastAPI, config: GatewayConfig) -> None:
    """The inspector at /ui and the MCP server at /mcp, each when its extra
    is installed ("ui", "mcp"); the API works without them."""
    try:
        from memstore.inspector import mount as mount_ui
    except ImportError as exc:
        log.info("no inspector at /ui (%s missing): pip install 'memstore-agent[ui]'", exc.name)
    else:
        mount_ui(api, config.api_key, read_only=config.read_only)
    try:
        from memstore.mcpserver.http import mount as mount_mcp
    except ImportError as exc:
        log.info("no MCP server at /mcp (%s missing): pip install 'memstore-agent[mcp]'", exc.name)
    else:
        mount_mcp(
            api,
            default_user=config.default_user,
            loopback=is_loopback(config.host),
            max_body_bytes=config.max_body_bytes,
            read_only=config.read_only,
        )


def _error(status: int, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": message, **extra}, status_code=status)


def _install_error_handlers(api: FastAPI) -> None:
    @api.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = list(exc.errors())
        if any(e.get("type") == "json_invalid" for e in errors):
            ctx = next(e for e in errors if e.get("type") == "json_invalid").get("ctx") or {}
            detail = ctx.get("error", "could not parse")
            return _error(400, f"malformed JSON body: {detail}")
        parts = []
        for e in errors:
            loc = ".".join(str(p) for p in e.get("loc", ()) if p != "body")
            parts.append(f"{loc or 'body'}: {e.get('msg', 'invalid')}")
        clean = [{k: e[k] for k in ("loc", "msg", "type") if k in e} for e in errors]
        return _error(400, "invalid request: " + "; ".join(parts), detail=clean)

    @api.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        if exc.status_code == 404 and exc.detail == "Not Found":
            return _error(404, f"Not found: {request.method} {request.url.path}")
        return JSONResponse(
            {"error": str(exc.detail)}, status_code=exc.status_code, headers=exc.headers
        )

    @api.exception_handler(SeedValidationError)
    async def seed_invalid(request: Request, exc: SeedValidationError) -> JSONResponse:
        return _error(400, str(exc), validation_errors=[p.to_dict() for p in exc.problems])

    @api.exception_handler(MemstoreError)
    async def memstore_error(request: Request, exc: MemstoreError) -> JSONResponse:
        if isinstance(exc, InvalidInputError):
            return _error(400, str(exc))
        if isinstance(exc, NotFoundError):
            return _error(404, str(exc))
        if isinstance(exc, LockedError | NotServing):
            return _error(503, str(exc))
        log.warning("%s %s failed: %s", request.method, request.url.path, loggable(exc))
        return _error(500, _unplaced(request, redact(str(exc))))


def _unplaced(request: Request, message: str) -> str:
    """A message without the server's database location (a client has no use for it)."""
    store = getattr(request.app.state, "store", None)
    where = getattr(store, "location", None)
    return message.replace(str(where), "the database") if where else message


__all__ = ["create_app"]
