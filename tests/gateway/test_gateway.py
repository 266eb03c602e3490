"""The gateway over real HTTP: upstream routes, /v1, auth, CORS, limits, errors."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from memstore.errors import ConfigError
from memstore.gateway.config import GatewayConfig, is_loopback
from memstore.gateway.guard import token_matches
from tests.gateway_support import Running, running_gateway

KEY = "s3cret-token-for-tests"


@pytest.fixture
def gw(tmp_path: Path) -> Iterator[Running]:
    with running_gateway(tmp_path / "gw.db", cors_origins=("https://app.example",)) as g:
        yield g


@pytest.fixture
def gw_auth(tmp_path: Path) -> Iterator[Running]:
    with running_gateway(tmp_path / "gwa.db", api_key=KEY) as g:
        yield g


def test_health_reports_status_version_uptime_and_stores(gw: Running) -> None:
    with gw.client() as c:
        r = c.get("/health")
    assert r.status_code == 200
    body = r.json()
    assert body["status"] == "ok"
    assert body["version"]
    assert isinstance(body["uptime"], int)
    assert body["stores"] == {"vectorStore": True, "embeddingService": True}


def test_upstream_capture_recall_and_search_round_trip(gw: Running) -> None:
    with gw.client() as c:
        r = c.post(
            "/capture",
            json={
                "user_content": "I am vegetarian and I love green tea",
                "assistant_content": "Noted!",
                "session_key": "chat-1",
                "session_id": "instance-9",
                "user_id": "alice",
            },
        )
        assert r.status_code == 200, r.text
        assert r.json() == {"l0_recorded": 2, "scheduler_notified": True}
        # The same call again (a client retry) stores nothing new.
        again = c.post(
            "/capture",
            json={
                "user_content": "I am vegetarian and I love green tea",
                "assistant_content": "Noted!",
                "session_key": "chat-1",
                "user_id": "alice",
            },
        )
        assert again.json()["l0_recorded"] == 0
        conv = c.post(
            "/search/conversations",
            json={"query": "green tea", "limit": 5, "session_key": "chat-1", "user_id": "alice"},
        ).json()
        assert conv["total"] >= 1
        assert "green tea" in conv["results"]
        assert "Session: chat-1" in conv["results"]
        # Another user sees nothing of alice's.
        other = c.post("/search/conversations", json={"query": "green tea"}).json()
        assert other == {"results": "No matching conversation messages found.", "total": 0}

        assert c.post(
            "/session/end", json={"session_key": "chat-1", "user_id": "alice"}
        ).json() == {"flushed": True}
        mem = c.post(
            "/search/memories", json={"query": "tea", "type": "persona", "user_id": "alice"}
        ).json()
        assert mem["total"] >= 1 and mem["strategy"] == "hybrid"
        assert "**[persona]**" in mem["results"] and "tea" in mem["results"]

        rec = c.post(
            "/recall", json={"query": "which tea do I love?", "session_key": "chat-2",
                             "user_id": "alice"},
        ).json()  # fmt: skip
        assert "tea" in rec["context"]
        assert rec["memory_count"] >= 1 and rec["strategy"] == "hybrid"
        nothing = c.post("/recall", json={"query": "tea", "session_key": "x"}).json()
        assert nothing["memory_count"] == 0 and "tea" not in nothing["context"]


def test_capture_accepts_openai_messages_and_requires_fields(gw: Running) -> None:
    with gw.client() as c:
        r = c.post(
            "/capture",
            json={
                "user_content": "x",
                "assistant_content": "y",
                "session_key": "s",
                "messages": [
                    {
                        "role": "user",
                        "content": "My cat is called Miso",
                        "timestamp": 1714000000000,
                    },
                    {"role": "assistant", "content": "Cute name"},
                ],
            },
        )
        assert r.json()["l0_recorded"] == 2
        hits = gw.store.search_conversations("default", "Miso", strategy="keyword")
        assert hits and hits[0].occurred_at.startswith("2024-04-24")
        missing = c.post("/capture", json={"user_content": "hi"})
        assert missing.status_code == 400
        assert "session_key" in missing.json()["error"]
        assert c.post("/recall", json={"query": "", "session_key": "s"}).status_code == 400
        bad_type = c.post("/search/memories", json={"query": "x", "type": "feelings"})
        assert bad_type.status_code == 400 and "type" in bad_type.json()["error"]


def test_seed_formats_a_and_b_and_validation_errors(gw: Running) -> None:
    rounds = [
        [{"role": "user", "content": "I live in Lisbon"}, {"role": "assistant", "content": "Nice"}],
        [{"role": "user", "content": "I work as a nurse"}, {"role": "assistant", "content": "Ok"}],
    ]
    with gw.client() as c:
        fmt_a = {"sessions": [{"sessionKey": "hist-1", "conversations": rounds}]}
        a = c.post("/seed", json={"data": fmt_a, "user_id": "bob"})
        assert a.status_code == 200, a.text
        body = a.json()
        assert body["sessions_processed"] == 1 and body["rounds_processed"] == 2
        assert body["messages_processed"] == 4 and body["l0_recorded"] == 4
        assert set(body) == {
            "sessions_processed", "rounds_processed", "messages_processed",
            "l0_recorded", "duration_ms", "flushed",
        }  # fmt: skip
        assert body["flushed"] is True
        # Format B; the same data again is already known.
        b = c.post("/seed", json={"data": [{"sessionKey": "hist-1", "conversations": rounds}],
                                  "user_id": "bob"})  # fmt: skip
        assert b.status_code == 200 and b.json()["l0_recorded"] == 0
        # Seeding ran extraction, as the upstream's does.
        assert any("Lisbon" in m["content"] for m in gw.store.list_memories("bob"))

        bad = c.post(
            "/seed",
            json={"data": [{"sessionKey": "", "conversations": [[{"role": "user"}], []]}]},
        )
        assert bad.status_code == 400
        errs = bad.json()["validation_errors"]
        stages = sorted(e["stage"] for e in errs)
        assert stages == ["message", "round", "session"]
        assert c.post("/seed", json={"data": 42}).status_code == 400
        mixed = c.post(
            "/seed",
            json={"data": [{"sessionKey": "k", "conversations": [[
                {"role": "user", "content": "a", "timestamp": 1714000000000},
                {"role": "assistant", "content": "b"}]]}]},
        )  # fmt: skip
        assert mixed.status_code == 400
        assert mixed.json()["validation_errors"][0]["stage"] == "timestamp_consistency"


def test_errors_are_json_with_messages(gw: Running) -> None:
    with gw.client() as c:
        r = c.post(
            "/recall", content=b'{"query": "x", ', headers={"content-type": "application/json"}
        )
        assert r.status_code == 400
        assert r.json()["error"].startswith("malformed JSON body")
        r = c.post("/recall", content=b"query=x", headers={"content-type": "text/plain"})
        assert r.status_code == 415
        r = c.get("/no/such/route")
        assert r.status_code == 404 and r.json() == {"error": "Not found: GET /no/such/route"}
        r = c.post("/search/memories", json=["not", "an", "object"])
        assert r.status_code == 400 and "error" in r.json()
        r = c.post("/v1/search", json={"user_id": "a", "query": "x", "limit": 50})
        assert r.status_code == 400 and "limit" in r.json()["error"]
        r = c.post("/v1/search", json={"user_id": "a", "query": "x", "bogus": 1})
        assert r.status_code == 400 and "bogus" in r.json()["error"]
        r = c.get("/v1/users/alice/memories/nope/history")
        assert r.status_code == 404 and "nope" in r.json()["error"]


def test_body_limit_by_header_and_by_streamed_size(tmp_path: Path) -> None:
    with running_gateway(tmp_path / "lim.db", max_body_bytes=2048) as g, g.client() as c:
        big = {"user_content": "x" * 5000, "assistant_content": "y", "session_key": "s"}
        r = c.post("/capture", json=big)
        assert r.status_code == 413 and "2048" in r.json()["error"]

        def chunks() -> Iterator[bytes]:  # no Content-Length: chunked transfer
            yield b'{"user_content": "'
            for _ in range(10):
                yield b"z" * 500
            yield b'", "session_key": "s"}'

        r = c.post("/capture", content=chunks(), headers={"content-type": "application/json"})
        assert r.status_code == 413
        ok = c.post("/capture", json={"user_content": "small", "session_key": "s"})
        assert ok.status_code == 200
        assert g.store.search_conversations("default", "z", strategy="keyword") == []


def test_bearer_auth_guards_every_route_but_health(gw_auth: Running) -> None:
    body = {"query": "x", "session_key": "s"}
    with gw_auth.client() as anon:
        assert anon.get("/health").status_code == 200
        r = anon.post("/recall", json=body)
        assert r.status_code == 401 and "Bearer" in r.json()["error"]
        assert r.headers["www-authenticate"].startswith("Bearer")
        assert anon.get("/v1/users").status_code == 401
        assert anon.get("/v1/openapi.json").status_code == 401
        assert anon.get("/no/such/route").status_code == 401  # no route discovery
    with gw_auth.client("wrong-token") as bad:
        r = bad.post("/recall", json=body)
        assert r.status_code == 401 and "invalid token" in r.json()["error"]
    with gw_auth.client(KEY) as good:
        assert good.post("/recall", json=body).status_code == 200
        assert good.get("/v1/users").status_code == 200


def test_requests_without_user_id_go_to_the_default_user(tmp_path: Path) -> None:
    # The upstream's Hermes plugin names the user on capture and recall only.
    with running_gateway(tmp_path / "du.db", default_user="hermes-user") as g, g.client() as c:
        c.post("/capture", json={"user_content": "I love rowing", "session_key": "s"})
        found = c.post("/search/conversations", json={"query": "rowing"}).json()
        assert found["total"] >= 1
        assert g.store.search_conversations("hermes-user", "rowing", strategy="keyword")
        assert g.store.search_conversations("default", "rowing", strategy="keyword") == []
    with pytest.raises(ConfigError):
        GatewayConfig(default_user=" x").check()


def test_auth_off_leaves_routes_open(gw: Running) -> None:
    with gw.client() as c:
        assert c.post("/recall", json={"query": "x", "session_key": "s"}).status_code == 200


def test_cors_allow_list_and_preflight(gw: Running) -> None:
    with gw.client() as c:
        pre = c.options(
            "/recall",
            headers={"Origin": "https://app.example", "Access-Control-Request-Method": "POST"},
        )
        assert pre.status_code == 204
        assert pre.headers["access-control-allow-origin"] == "https://app.example"
        assert "POST" in pre.headers["access-control-allow-methods"]
        assert "Authorization" in pre.headers["access-control-allow-headers"]
        r = c.get("/health", headers={"Origin": "https://app.example"})
        assert r.headers["access-control-allow-origin"] == "https://app.example"
        evil = c.get("/health", headers={"Origin": "https://evil.example"})
        assert "access-control-allow-origin" not in evil.headers
        assert evil.headers["vary"] == "Origin"
        pre_evil = c.options("/recall", headers={"Origin": "https://evil.example"})
        assert pre_evil.status_code == 204
        assert "access-control-allow-origin" not in pre_evil.headers


def test_preflight_needs_no_token(gw_auth: Running) -> None:
    with gw_auth.client() as c:
        assert c.options("/recall").status_code == 204


def test_v1_routes(gw: Running) -> None:
    with gw.client() as c:
        cap = c.post(
            "/v1/capture",
            json={"user_id": "carol", "session_id": "s1", "messages": [
                {"role": "user", "content": "I love playing the cello", "id": "m1"},
                {"role": "assistant", "content": "Lovely", "id": "m2"},
            ]},
        )  # fmt: skip
        assert cap.status_code == 200 and cap.json()["stored"] == ["m1", "m2"]
        end = c.post("/v1/users/carol/sessions/s1/end").json()
        assert end["timed_out"] is False
        mems = c.get("/v1/users/carol/memories").json()
        assert mems and any("cello" in m["content"] for m in mems)
        mid = next(m["memory_id"] for m in mems if "cello" in m["content"])
        hist = c.get(f"/v1/users/carol/memories/{mid}/history").json()
        assert hist[0]["source_message_ids"] == ["m1"]
        assert c.get("/v1/users/carol/memories", params={"type": "bogus"}).status_code == 400

        found = c.post("/v1/search", json={"user_id": "carol", "query": "cello"}).json()
        assert found and found[0]["kind"] == "l1"
        q = {"user_id": "carol", "query": "cello", "layer": "conversations", "strategy": "keyword"}
        l0 = c.post("/v1/search", json=q).json()
        assert [h["ref"] for h in l0] == ["m1"]

        rec = c.post(
            "/v1/recall", json={"user_id": "carol", "query": "does she play the cello?"}
        ).json()
        assert set(rec) == {"text", "stable", "per_turn", "truncated", "timed_out"}
        assert set(rec["stable"]) == {"text", "persona", "navigation", "instructions"}
        assert set(rec["per_turn"]) == {"text", "memories", "messages"}
        assert any("cello" in m["content"] for m in rec["per_turn"]["memories"])

        c.post("/v1/users/carol/sessions/s1/end")
        gw.store.run_pipeline("carol")
        scenes = c.get("/v1/users/carol/scenes").json()
        persona = c.get("/v1/users/carol/persona").json()
        assert persona["user_id"] == "carol"
        assert isinstance(scenes, list)

        users = c.get("/v1/users").json()
        assert [u["user_id"] for u in users] == ["carol"]
        assert users[0]["messages"] == 2 and users[0]["memories"] >= 1

        ev = c.get("/v1/events", params={"limit": 2}).json()
        assert len(ev) == 2 and ev[0]["position"] < ev[1]["position"]
        first = c.get("/v1/events", params={"after": 0, "limit": 1}).json()
        assert first[0]["position"] == 1 and first[0]["type"] == "l0.captured"
        assert first[0]["payload"]["messages"][0]["text"] == "I love playing the cello"

        gone = c.delete(f"/v1/users/carol/memories/{mid}")
        assert gone.json() == {"forgotten": mid, "user_id": "carol"}
        live = c.get("/v1/users/carol/memories").json()
        assert mid not in [m["memory_id"] for m in live]
        assert c.delete("/v1/users/carol/memories/unknown-id").status_code == 404

        report = c.delete("/v1/users/carol").json()
        assert report["user_id"] == "carol" and report["events_removed"] >= 3
        assert c.get("/v1/users").json() == []
        assert c.post("/v1/search", json={"user_id": "carol", "query": "cello",
                                          "layer": "conversations"}).json() == []  # fmt: skip


def test_openapi_document_describes_both_route_sets(gw: Running) -> None:
    with gw.client() as c:
        doc = c.get("/v1/openapi.json").json()
    paths = doc["paths"]
    for p in ("/health", "/recall", "/capture", "/search/memories", "/search/conversations",
              "/session/end", "/seed", "/v1/search", "/v1/recall", "/v1/users/{user_id}",
              "/v1/users/{user_id}/memories", "/v1/events"):  # fmt: skip
        assert p in paths, p
    assert "SearchBody" in doc["components"]["schemas"]


def test_non_loopback_bind_needs_a_key_or_insecure() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.4")
    with pytest.raises(ConfigError, match="API key"):
        GatewayConfig(host="0.0.0.0").check()
    GatewayConfig(host="0.0.0.0", api_key=KEY).check()
    GatewayConfig(host="0.0.0.0", insecure=True).check()


def test_env_key_falls_back_to_upstream_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEMSTORE_GATEWAY_API_KEY", raising=False)
    monkeypatch.setenv("TDAI_GATEWAY_API_KEY", "  upstream-key\n")
    monkeypatch.setenv("TDAI_CORS_ORIGINS", "https://a.example, https://b.example")
    cfg = GatewayConfig.from_env()
    assert cfg.api_key == "upstream-key"
    assert cfg.cors_origins == ("https://a.example", "https://b.example")
    monkeypatch.setenv("MEMSTORE_GATEWAY_API_KEY", "ours")
    assert GatewayConfig.from_env().api_key == "ours"


def test_token_comparison() -> None:
    assert token_matches("abc", "abc")
    assert not token_matches("abd", "abc")
    assert not token_matches("ab", "abc")
    assert not token_matches("é", "e")


def test_port_in_use_is_a_clear_error() -> None:
    from memstore.gateway.server import bind

    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    try:
        with pytest.raises(ConfigError, match="cannot listen"):
            bind("127.0.0.1", busy.getsockname()[1])
    finally:
        busy.close()
