"""Helpers of the MCP tests: a seeded store, and the SDK's client over stdio
(``python -m memstore mcp``) or over HTTP (the gateway's /mcp)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from memstore import Settings
from memstore.store import Store

SETTINGS = Settings().replace(embedder="hashing", scheduler=False, background_indexer=False)
# What the stdio server process reads instead of the test's Settings object.
SERVER_ENV = {"MEMSTORE_EMBEDDER": "hashing", "MEMSTORE_SCHEDULER": "false"}


def seed(db: Path) -> dict[str, str]:
    """alice and bob, each with derived memories; returns a memory id of each."""
    with Store.open(db, settings=SETTINGS) as store:
        store.capture("alice", "s1", [
            {"role": "user", "content": "My name is Dana and I am allergic to peanuts.",
             "id": "m1", "timestamp": "2023-05-08T10:00:00Z"},
        ])  # fmt: skip
        store.capture("bob", "s1", [
            {"role": "user", "content": "I am allergic to cats and I live in Berlin.",
             "id": "m1", "timestamp": "2023-05-08T10:00:00Z"},
        ])  # fmt: skip
        store.run_pipeline()
        ids = {}
        for user in ("alice", "bob"):
            [m] = [m for m in store.list_memories(user) if "allergic" in m["content"]]
            ids[user] = m["memory_id"]
        return ids


def stdio_client(db: Path, *args: str) -> Client:
    env = {**os.environ, **SERVER_ENV}
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "memstore", "mcp", "--db", str(db), *args], env=env
    )
    return Client(params, read_timeout_seconds=60)


@asynccontextmanager
async def http_client(url: str, headers: dict[str, str]) -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(headers=headers, timeout=60) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        yield client


def data(result: Any) -> Any:
    """A tool result's value: the structured content the SDK sends beside the text."""
    assert not result.is_error, result.content
    if result.structured_content is not None:
        return result.structured_content.get("result", result.structured_content)
    return json.loads(result.content[0].text)


def error_text(result: Any) -> str:
    assert result.is_error
    return str(result.content[0].text)
