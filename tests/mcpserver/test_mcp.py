"""The MCP server through the SDK's own client: over stdio (``memstore mcp``
pinned to one user) and over streamable HTTP (/mcp on the gateway, behind
the Bearer key, the user from the request). Each call reaches one user's
data only; bad input is a tool error with a message, and nothing changes."""

from __future__ import annotations

from pathlib import Path

import anyio
import httpx
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from memstore.store import Store
from tests.gateway_support import running_gateway
from tests.mcp_support import SETTINGS, data, error_text, http_client, seed, stdio_client

pytestmark = pytest.mark.slow  # each test starts a server process or a gateway

TOOLS = {"recall", "search_memories", "search_conversations", "list_memories",
         "remember", "forget", "capture"}  # fmt: skip


async def _walk_as_alice(client: Client, ids: dict[str, str]) -> None:
    """recall, search, remember, forget, capture and the resources, as alice."""
    assert {t.name for t in (await client.list_tools()).tools} == TOOLS
    text = data(await client.call_tool("recall", {"query": "what is the user allergic to?"}))
    assert "peanuts" in text and "cats" not in text
    hits = data(await client.call_tool("search_memories", {"query": "allergic"}))
    assert [h["memory_id"] for h in hits] == [ids["alice"]]
    msgs = data(await client.call_tool("search_conversations", {"query": "allergic"}))
    assert [m["session_id"] for m in msgs] == ["s1"] and "peanuts" in msgs[0]["text"]
    added = data(await client.call_tool("remember", {"content": "The user prefers tea."}))
    listed = data(await client.call_tool("list_memories", {}))
    assert added["memory_id"] in {m["memory_id"] for m in listed}
    assert all("cats" not in m["content"] for m in listed)
    # Another user's memory id is not found, and stays.
    err = error_text(await client.call_tool("forget", {"memory_id": ids["bob"]}))
    assert "no memory" in err
    gone = data(await client.call_tool("forget", {"memory_id": ids["alice"]}))
    assert gone["forgotten"] == ids["alice"]
    listed = data(await client.call_tool("list_memories", {}))
    assert ids["alice"] not in {m["memory_id"] for m in listed}
    stored = data(await client.call_tool("capture", {
        "session_id": "s9", "messages": [{"role": "user", "content": "I got a dog", "id": "x"}],
    }))  # fmt: skip
    assert stored["stored"] == ["x"]
    again = data(await client.call_tool("capture", {
        "session_id": "s9", "messages": [{"role": "user", "content": "I got a dog", "id": "x"}],
    }))  # fmt: skip
    assert (again["stored"], again["duplicates"]) == ([], ["x"])
    # The forgotten allergy left the persona and the scenes with it (the name stays).
    persona = await client.read_resource("memstore://persona")
    persona_text = persona.contents[0].text  # type: ignore[union-attr]
    assert "Dana" in persona_text and "peanuts" not in persona_text
    scenes = await client.read_resource("memstore://scenes")
    scenes_text = scenes.contents[0].text  # type: ignore[union-attr]
    assert "peanuts" not in scenes_text and "Berlin" not in scenes_text
    # Bad input: a message, not a crash, and nothing stored.
    assert "limit" in error_text(
        await client.call_tool("search_memories", {"query": "x", "limit": "many"})
    )
    assert "type" in error_text(await client.call_tool("list_memories", {"type": "secret"}))
    assert "content" in error_text(await client.call_tool("remember", {"content": "   "}))
    assert "role" in error_text(
        await client.call_tool("capture", {"session_id": "s9", "messages": [{"content": "x"}]})
    )
    with pytest.raises(MCPError):
        await client.read_resource("memstore://scenes/No such scene")


def _bob_untouched(db: Path, ids: dict[str, str]) -> None:
    with Store.open(db, settings=SETTINGS) as store:
        bob = store.list_memories("bob")
        assert ids["bob"] in {m["memory_id"] for m in bob}
        assert all("tea" not in m["content"] for m in bob)
        assert [s["session_id"] for s in store.list_sessions("bob")] == ["s1"]
        alice = {m["content"] for m in store.list_memories("alice")}
        assert "The user prefers tea." in alice
        # remember and forget are events in alice's log, like a memory tool's.
        types = [e.type for e in store.read_events(user_id="alice")]
        assert "l1.written" in types and "l1.forgotten" in types
        assert "l1.written" not in [e.type for e in store.read_events(user_id="bob")]


def test_stdio_server_pinned_to_one_user(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    ids = seed(db)

    async def main() -> None:
        async with stdio_client(db, "--user", "alice") as client:
            await _walk_as_alice(client, ids)

    anyio.run(main)
    _bob_untouched(db, ids)


def test_stdio_read_only_offers_no_writing_tool(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    seed(db)

    async def main() -> None:
        async with stdio_client(db, "--user", "bob", "--read-only") as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert names == {"recall", "search_memories", "search_conversations", "list_memories"}
            text = data(await client.call_tool("recall", {"query": "where do I live? Berlin"}))
            assert "Berlin" in text and "peanuts" not in text

    anyio.run(main)


def test_http_server_behind_the_key_with_the_user_of_the_request(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    ids = seed(db)
    with running_gateway(db, SETTINGS, api_key="k3y") as gw:
        url = gw.url + "/mcp"
        # No key, a wrong key: refused before the MCP server sees the request.
        init = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
        assert httpx.post(url, json=init).status_code == 401
        wrong = httpx.post(url, json=init, headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401

        async def main() -> None:
            auth = {"Authorization": "Bearer k3y"}
            async with http_client(url, {**auth, "X-Memstore-User": "alice"}) as client:
                await _walk_as_alice(client, ids)
            async with http_client(url, {**auth, "X-Memstore-User": "bob"}) as client:
                listed = data(await client.call_tool("list_memories", {}))
                assert ids["bob"] in {m["memory_id"] for m in listed}
                assert all("peanuts" not in m["content"] for m in listed)
                text = data(await client.call_tool("recall", {"query": "peanuts allergy"}))
                assert "peanuts" not in text
            async with http_client(url, {**auth, "X-Memstore-User": "a" * 300}) as client:
                err = error_text(await client.call_tool("list_memories", {}))
                assert "longer than" in err
            # No user named: the gateway's default user, who has nothing.
            async with http_client(url, auth) as client:
                assert data(await client.call_tool("list_memories", {})) == []

        anyio.run(main)
    _bob_untouched(db, ids)
