"""Whose memory a Hermes agent uses, and turns that are never mistaken for each other.

Through hermes-agent 0.19.0's real MemoryManager with the keyword arguments
its hosts pass to ``initialize`` (agent/agent_init.py): the messaging gateway
passes ``user_id`` and ``gateway_session_key``, the api_server only
``gateway_session_key`` (from ``X-Hermes-Session-Key``), the CLI neither.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agent.memory_provider")

from agent.memory_manager import MemoryManager

from memstore.config import Settings
from memstore.derive import api
from memstore.errors import ConfigError
from tests.hermes_support import config, hermes_home_fixture, provider_module  # noqa: F401

pytestmark = pytest.mark.hermes

provider_module()
MemstoreProvider = provider_module().MemstoreProvider

from memstore.hermes_provider import config as provider_config  # noqa: E402
from memstore.hermes_provider.identity import (  # noqa: E402
    LOCAL_PLATFORMS,
    MAX_USER_ID,
    resolve_identity,
)
from memstore.hermes_provider.settings import hermes_settings  # noqa: E402


def manager(home: Path, session: str, **kwargs: Any) -> tuple[MemoryManager, Any]:
    # No background timers: these tests extract with on_session_end and close
    # the store right after; the api_server tests run with the timers on.
    p = MemstoreProvider(config(scheduler=False, **kwargs.pop("cfg", {})))
    mm = MemoryManager()
    mm.add_provider(p)
    mm.initialize_all(session, hermes_home=str(home), agent_context="primary", **kwargs)
    return mm, p


def who(scope: str = "auto", configured: str | None = None, **kwargs: Any) -> tuple[str, str]:
    ident = resolve_identity(
        kwargs,
        kwargs.pop("session", "sess-1"),
        scope=hermes_settings(Settings(), {"user_scope": scope}).user_scope,
        configured=configured,
    )
    return ident.user_id, ident.source


# -- the resolution table -------------------------------------------------------------


@pytest.mark.parametrize(
    ("scope", "configured", "kwargs", "expected"),
    [
        # single-user local platforms: the configured user, else "default"
        ("auto", None, {"platform": "cli"}, ("default", "local_default")),
        ("auto", "ada", {"platform": "cli"}, ("ada", "configured")),
        ("auto", None, {"platform": "tui"}, ("default", "local_default")),
        ("auto", None, {"platform": "acp"}, ("default", "local_default")),
        # messaging platforms: the sender, namespaced by platform
        (
            "auto",
            "ada",
            {"platform": "telegram", "user_id": "123", "gateway_session_key": "agent:main:x"},
            ("telegram:123", "host_user"),
        ),
        ("auto", None, {"platform": "discord", "user_id": "123"}, ("discord:123", "host_user")),
        # api_server: the caller's X-Hermes-Session-Key
        (
            "auto",
            None,
            {"platform": "api_server", "gateway_session_key": "alice"},
            ("api_server:key:alice", "session_key"),
        ),
        # a multi-user host with no identity: the configured user, else per session
        ("auto", "ada", {"platform": "api_server"}, ("ada", "configured")),
        ("auto", None, {"platform": "api_server"}, ("api_server:session:sess-1", "session")),
        # user: the configured user is never a multi-user host's fallback
        ("user", "ada", {"platform": "api_server"}, ("api_server:session:sess-1", "session")),
        ("user", "ada", {"platform": "cli"}, ("ada", "configured")),
        # session_key: per chat even when the sender is known
        (
            "session_key",
            None,
            {"platform": "slack", "user_id": "U1", "gateway_session_key": "agent:main:slack:c1"},
            ("slack:key:agent:main:slack:c1", "session_key"),
        ),
        # shared on purpose
        ("shared", None, {"platform": "telegram", "user_id": "123"}, ("default", "shared")),
        ("shared", "team", {"platform": "api_server"}, ("team", "shared")),
    ],
)
def test_identity_table(
    scope: str, configured: str | None, kwargs: dict[str, Any], expected: tuple[str, str]
) -> None:
    assert who(scope, configured, **kwargs) == expected


def test_a_user_id_and_a_session_key_of_the_same_text_never_meet() -> None:
    assert who(platform="api_server", user_id="k") != who(
        platform="api_server", gateway_session_key="k"
    )
    assert who(platform="telegram", user_id="7") != who(platform="discord", user_id="7")


def test_long_session_keys_stay_distinct_and_bounded() -> None:
    a = who(platform="api_server", gateway_session_key="x" * 256 + "a")[0]
    b = who(platform="api_server", gateway_session_key="x" * 256 + "b")[0]
    assert a != b and len(a) <= MAX_USER_ID and len(b) <= MAX_USER_ID


def test_unknown_scope_is_a_config_error(hermes_home: Path) -> None:
    with pytest.raises(ConfigError, match=r"user_scope.*choose one of auto"):
        hermes_settings(Settings(), {"user_scope": "per-planet"})
    with pytest.raises(ConfigError, match="user_scope"):
        provider_config.resolve(hermes_home, {"user_scope": "everyone"})
    assert provider_config.resolve(hermes_home, {"user_scope": "session-key"}).user_scope == (
        "session_key"
    )
    assert "cli" in LOCAL_PLATFORMS and "api_server" not in LOCAL_PLATFORMS


def test_anonymous_callers_are_kept_apart_and_logged_once(
    hermes_home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="memstore.hermes")
    from memstore.hermes_provider import identity

    identity._warned.discard(("webhook", "auto"))
    users = set()
    for i in range(3):
        mm, p = manager(hermes_home, f"anon-{i}", platform="webhook")
        users.add(p.user_id)
        mm.shutdown_all()
    assert users == {"webhook:session:anon-0", "webhook:session:anon-1", "webhook:session:anon-2"}
    said = [r for r in caplog.records if "gave no user id" in r.getMessage()]
    assert len(said) == 1


def test_identity_survives_a_session_rotation(hermes_home: Path) -> None:
    mm, p = manager(hermes_home, "s-1", platform="api_server")
    first = p.user_id
    mm.on_session_switch("s-2", parent_session_id="s-1", reset=True)
    assert p.session_id == "s-2" and p.user_id == first == "api_server:session:s-1"
    mm.shutdown_all()


# -- memories never cross users ---------------------------------------------------------


def test_two_callers_contradictory_facts_both_survive(hermes_home: Path) -> None:
    """Alice and Bob share a session id (the worst case) and contradict each other."""
    said = {"alice": "I live in Lisbon.", "bob": "I live in Reykjavik."}
    users = {}
    for caller, text in said.items():
        mm, p = manager(
            hermes_home, "shared-session", platform="api_server", gateway_session_key=caller
        )
        mm.sync_all(text, "Noted.", session_id="shared-session")
        assert mm.flush_pending(timeout=30)
        mm.on_session_end([])  # extraction (offline rules) and dedup now
        users[caller] = p.user_id
        mm.shutdown_all()
    assert users["alice"] != users["bob"]

    mm, p = manager(hermes_home, "check", platform="cli")
    store = p.store
    alice = [
        m["content"]
        for m in api.list_memories(store._derivation, users["alice"], include_retired=True)
    ]
    bob = [
        m["content"]
        for m in api.list_memories(store._derivation, users["bob"], include_retired=True)
    ]
    assert [m for m in api.list_memories(store._derivation, users["alice"])] and alice == [
        m["content"] for m in api.list_memories(store._derivation, users["alice"])
    ]  # nothing of Alice's was retired
    assert any("Lisbon" in m for m in alice) and not any("Reykjavik" in m for m in alice)
    assert any("Reykjavik" in m for m in bob) and not any("Lisbon" in m for m in bob)
    assert len(bob) == len(api.list_memories(store._derivation, users["bob"]))
    mm.shutdown_all()


def test_shared_scope_does_merge_them(hermes_home: Path) -> None:
    """The control: one memory on purpose, and the later fact supersedes the earlier."""
    for caller, text in (("alice", "I live in Lisbon."), ("bob", "I live in Reykjavik.")):
        mm, p = manager(
            hermes_home,
            f"s-{caller}",
            platform="api_server",
            gateway_session_key=caller,
            cfg={"user_scope": "shared"},
        )
        mm.sync_all(text, "Noted.", session_id=f"s-{caller}")
        assert mm.flush_pending(timeout=30)
        mm.on_session_end([])
        user, store = p.user_id, p.store
        active = [m["content"] for m in api.list_memories(store._derivation, user)]
        mm.shutdown_all()
    assert user == "default"
    assert any("Reykjavik" in m for m in active) and not any("Lisbon" in m for m in active)


# -- turn ids -------------------------------------------------------------------------


def _history(n: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(n):
        out += [{"role": "user", "content": f"earlier {i}"}, {"role": "assistant", "content": "ok"}]
    return out


def _texts(p: Any, session: str) -> list[str]:
    with p.store._db.read() as conn:
        from sqlalchemy import text

        rows = conn.execute(
            text("SELECT text FROM l0_messages WHERE user_id = :u AND session_id = :s"),
            {"u": p.user_id, "s": session},
        ).all()
    return [r[0] for r in rows]


def test_concurrent_requests_at_one_position_are_all_captured(hermes_home: Path) -> None:
    """The api_server builds an agent per request: concurrent requests in one
    session load the same history and end at the same transcript position."""
    history = _history(2)
    n = 8
    providers = []
    for _ in range(n):
        mm, p = manager(hermes_home, "busy", platform="api_server", gateway_session_key="k")
        providers.append((mm, p))
    start = threading.Barrier(n)

    def turn(i: int) -> None:
        mm, _p = providers[i]
        # Two of them say exactly the same thing and get the same answer.
        said = "yes" if i < 2 else f"request {i}"
        messages = [
            *history,
            {"role": "user", "content": said},
            {"role": "assistant", "content": f"answer {i % 6}"},
        ]
        start.wait(10)
        mm.sync_all(said, f"answer {i % 6}", session_id="busy", messages=messages)
        assert mm.flush_pending(timeout=30)

    threads = [threading.Thread(target=turn, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    texts = _texts(providers[0][1], "busy")
    assert sorted(t for t in texts if t.startswith(("yes", "request"))) == sorted(
        ["yes", "yes", *(f"request {i}" for i in range(2, n))]
    )
    assert len(texts) == 2 * n
    for mm, _p in providers:
        mm.shutdown_all()


def test_a_retried_sync_is_idempotent(hermes_home: Path) -> None:
    mm, p = manager(hermes_home, "retry", platform="cli")
    messages = [
        *_history(1),
        {"role": "user", "content": "again"},
        {"role": "assistant", "content": "sure"},
    ]
    for _ in range(3):
        p.sync_turn("again", "sure", session_id="retry", messages=messages)
    p.sync_turn("again", "sure", session_id="retry")  # and without the transcript
    p.sync_turn("again", "sure", session_id="retry")
    texts = _texts(p, "retry")
    assert texts.count("again") == 2 and texts.count("sure") == 2
    # The same words later in the conversation are a new turn.
    later = [
        *messages,
        {"role": "user", "content": "again"},
        {"role": "assistant", "content": "sure"},
    ]
    p.sync_turn("again", "sure", session_id="retry", messages=later)
    assert _texts(p, "retry").count("again") == 3
    mm.shutdown_all()


def test_host_ids_and_timestamps_are_used(hermes_home: Path) -> None:
    stamped = [
        {"role": "user", "content": "stamped", "timestamp": "2026-01-02T03:04:05Z"},
        {"role": "assistant", "content": "fine", "message_id": "m-42"},
    ]
    for _ in range(2):  # two instances (two processes): the stamp makes them one turn
        mm, p = manager(hermes_home, "ids", platform="cli")
        p.sync_turn("stamped", "fine", session_id="ids", messages=stamped)
        with p.store._db.read() as conn:
            from sqlalchemy import text

            rows = conn.execute(
                text(
                    "SELECT message_id, text, occurred_at FROM l0_messages "
                    "WHERE session_id = 'ids' ORDER BY text"
                )
            ).all()
        mm.shutdown_all()
    assert len(rows) == 2
    assert rows[0][0] == "hermes:m-42"
    assert rows[1][1] == "stamped" and rows[1][2].startswith("2026-01-02T03:04:05")
    # A timestamp memstore cannot read costs the stamp, never the turn.
    mm, p = manager(hermes_home, "ids2", platform="cli")
    p.sync_turn(
        "odd",
        "ok",
        session_id="ids2",
        messages=[
            {"role": "user", "content": "odd", "timestamp": "not a time"},
            {"role": "assistant", "content": "ok"},
        ],
    )
    assert sorted(_texts(p, "ids2")) == ["odd", "ok"]
    mm.shutdown_all()


def test_the_user_text_is_what_the_user_sent(hermes_home: Path) -> None:
    """Concurrent api_server requests in one session: the transcript's last user
    message can be another in-flight request's message merged with this one."""
    mm, p = manager(hermes_home, "merged", platform="api_server", gateway_session_key="k")
    merged = [
        {"role": "user", "content": "first request\n\nsecond request"},
        {"role": "assistant", "content": "ok"},
    ]
    p.sync_turn("second request", "ok", session_id="merged", messages=merged)
    assert sorted(_texts(p, "merged")) == ["ok", "second request"]
    mm.shutdown_all()


def test_identical_texts_sent_at_once_are_two_turns(hermes_home: Path) -> None:
    """Two api_server requests in one session send the same words at once; each
    sees both messages merged in its transcript, stamped with the first one's
    time. The stamp is not this request's, so it must not make them one turn."""
    merged = [
        {"role": "user", "content": "Same words.\n\nSame words.", "timestamp": 1767322800.5},
        {"role": "assistant", "content": "ok"},
    ]
    texts: list[str] = []
    for _ in range(2):  # one provider per request, as the api_server builds them
        mm, p = manager(hermes_home, "same", platform="api_server", gateway_session_key="k")
        p.sync_turn("Same words.", "ok", session_id="same", messages=merged)
        texts = _texts(p, "same")
        mm.shutdown_all()
    assert sorted(texts) == ["Same words.", "Same words.", "ok", "ok"]
