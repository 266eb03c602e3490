"""``memstore mcp``: the MCP server over stdio, pinned to one user.

stdout carries the protocol, so nothing else may print there: the store's
logging goes to stderr (Python's default)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from memstore.mcpserver.tools import build_server
from memstore.store import Store
from memstore.validate import check_id


def run_stdio(db: str | Path | None, user_id: str, *, read_only: bool = False) -> None:
    user = check_id("--user", user_id)

    def user_for(headers: Mapping[str, str] | None) -> str:
        return user  # a stdio server has one user, whatever a call says

    with Store.open(db) as store:
        server = build_server(lambda: store, user_for, read_only=read_only)
        server.run("stdio")


__all__ = ["run_stdio"]
