"""``/mcp`` on the gateway: the MCP server over streamable HTTP.

Behind the gateway's guard (the Bearer key, the body limit). Stateless: each
POST is answered on its own, so the user is read from that request — the
``X-Memstore-User`` header, else the gateway's default user, as the routes
that take no user id do — and one connection can never carry a call over to
another user's data.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager

from fastapi import FastAPI
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from mcp.server.transport_security import TransportSecuritySettings
from starlette.routing import Route

from memstore.errors import StorageError
from memstore.mcpserver.tools import USER_HEADER, build_server
from memstore.store import Store
from memstore.validate import check_id

PATH = "/mcp"


def mount(
    api: FastAPI,
    *,
    default_user: str,
    loopback: bool,
    max_body_bytes: int,
    read_only: bool = False,
) -> None:
    """Serve MCP at /mcp of ``api`` (whose ``state.store`` is the open store);
    ``api.state.hosts`` gets the session manager to run in the app's lifespan."""

    def store_for() -> Store:
        store: Store | None = api.state.store
        if store is None:
            raise StorageError("the store is not open (the server is starting or shutting down)")
        return store

    def user_for(headers: Mapping[str, str] | None) -> str:
        named = headers.get(USER_HEADER) if headers is not None else None
        return check_id(USER_HEADER, named) if named is not None else default_user

    server = build_server(store_for, user_for, read_only=read_only)
    # On a loopback address the SDK checks Host and Origin against DNS
    # rebinding; elsewhere the Bearer key is what keeps strangers out.
    security = (
        None if loopback else TransportSecuritySettings(enable_dns_rebinding_protection=False)
    )
    server.streamable_http_app(
        stateless_http=True,
        json_response=True,
        transport_security=security,
        host="127.0.0.1" if loopback else "0.0.0.0",
        max_request_body_size=max_body_bytes,
    )
    manager = server.session_manager

    def running() -> AbstractAsyncContextManager[None]:
        return manager.run()

    api.state.hosts.append(running)
    api.router.routes.append(Route(PATH, endpoint=StreamableHTTPASGIApp(manager)))


__all__ = ["PATH", "mount"]
