"""Every entry point refuses an empty or padded id instead of storing under
another one: the CLI and the Hermes provider (the gateway's routes are in
tests/gateway/test_gateway_hardening.py)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from memstore.errors import InvalidIdError
from tests.porting_support import cli_env, run_cli

__all__ = ["cli_env"]

BAD = ["", " alice", "alice ", "al\nice"]


@pytest.mark.parametrize("bad", BAD)
def test_cli_refuses_bad_ids(cli_env: Path, bad: str) -> None:
    commands = [
        ["capture", "--user", bad, "--session", "s1", "--user-text", "I like tea"],
        ["capture", "--user", "bob", "--session", bad, "--user-text", "I like tea"],
        ["memories", "list", "--user", bad],
        ["memories", "forget", "--user", "bob", bad],
        ["persona", "show", "--user", bad],
        ["pipeline", "run", "--user", bad],
        ["recall", "--user", bad, "tea"],
    ]
    for args in commands:
        out = run_cli(*args)
        assert out.exit_code != 0, (args, out.output)
        assert "Traceback" not in out.output
        assert any(w in out.output for w in ("empty", "whitespace", "control")), out.output
    listed = run_cli("users", "list", "--json")
    assert listed.exit_code == 0 and json.loads(listed.output) == []


pytest.importorskip("agent.memory_provider")

from tests.hermes_support import config, hermes_home_fixture, provider_module  # noqa: E402,F401

MemstoreProvider = provider_module().MemstoreProvider
from memstore.hermes_provider.identity import resolve_identity  # noqa: E402


def _resolve(configured: str | None = None, **kwargs: Any) -> str:
    return resolve_identity(kwargs, "sess-1", scope="auto", configured=configured).user_id


@pytest.mark.hermes
@pytest.mark.parametrize(
    ("configured", "kwargs"),
    [
        (None, {"platform": "telegram", "user_id": " 123"}),
        (None, {"platform": "telegram", "user_id": "123 "}),
        (None, {"platform": "api_server", "gateway_session_key": " alice"}),
        (" ada", {"platform": "cli"}),
        ("   ", {"platform": "cli"}),
    ],
)
def test_hermes_identity_refuses_padded_ids(configured: str | None, kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidIdError):
        _resolve(configured, **kwargs)


@pytest.mark.hermes
def test_hermes_identity_keeps_distinct_ids_distinct() -> None:
    # Collapsing inner whitespace made "a  b" and "a b" one user.
    assert _resolve(platform="telegram", user_id="a  b") != _resolve(
        platform="telegram", user_id="a b"
    )
    assert _resolve(platform="telegram", user_id=123) == "telegram:123"  # ints are fine
    # A host that passes no user (None or "") falls back as before.
    assert _resolve(platform="cli", user_id="") == "default"


@pytest.mark.hermes
def test_hermes_provider_stays_off_for_a_padded_id(
    hermes_home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    p = MemstoreProvider(config())
    with caplog.at_level(logging.WARNING, logger="memstore.hermes"):
        p.initialize("s1", platform="telegram", user_id=" 123", hermes_home=str(hermes_home))
    assert p.store is None
    assert any("whitespace" in r.getMessage() for r in caplog.records)
    p.sync_turn("I love green tea.", "Noted.", session_id="s1")  # nothing to write into
    p.shutdown()
    p2 = MemstoreProvider(config())
    p2.initialize(" s1", platform="cli", hermes_home=str(hermes_home))
    assert p2.store is None
    p2.shutdown()


@pytest.mark.hermes
def test_hermes_tools_refuse_padded_ids(hermes_home: Path) -> None:
    from agent.memory_manager import MemoryManager

    p = MemstoreProvider(config())
    mm = MemoryManager()
    mm.add_provider(p)
    mm.initialize_all("s1", platform="cli", hermes_home=str(hermes_home))
    try:
        p.sync_turn("I love green tea.", "Noted.", session_id="s1")
        p.on_session_end([])
        found = json.loads(mm.handle_tool_call("memstore_memory_search", {"query": "green tea"}))
        mid = found["results"][0]["id"]
        out = json.loads(mm.handle_tool_call("memstore_memory_forget", {"memory_id": f" {mid}"}))
        assert "whitespace" in out["error"]
        out = json.loads(
            mm.handle_tool_call("memstore_conversation_search", {"query": "tea", "session": "s1 "})
        )
        assert "whitespace" in out["error"]
        again = json.loads(mm.handle_tool_call("memstore_memory_search", {"query": "green tea"}))
        assert mid in {r["id"] for r in again["results"]}  # not forgotten
    finally:
        p.shutdown()
