"""The gateway on loopback against a hostile web page and careless input: the
Host allow-list (DNS rebinding), the Bearer scheme, API key checks, the
access log, a bounded /seed without server paths, and ids refused on the
upstream-compatible routes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from memstore.errors import ConfigError
from memstore.gateway.config import GatewayConfig
from memstore.porting.inventory import list_users
from tests.gateway_support import Running, running_gateway

KEY = "k3y-for-hardening-tests"
EVIL = {"Host": "attacker.example:18602"}


@pytest.fixture
def gw(tmp_path: Path) -> Iterator[Running]:
    with running_gateway(tmp_path / "h.db") as g:
        yield g


def _alice(c: httpx.Client) -> None:
    said = [{"role": "user", "content": "I row on Sundays"}]
    r = c.post("/v1/capture", json={"user_id": "alice", "session_id": "s1", "messages": said})
    assert r.status_code == 200, r.text


def test_a_foreign_host_header_is_refused_without_a_key(gw: Running) -> None:
    with gw.client() as c:
        _alice(c)
        r = c.delete("/v1/users/alice", headers=EVIL)
        assert r.status_code == 421, r.text
        assert "attacker.example" in r.json()["error"] and "--allowed-host" in r.json()["error"]
        for method, path in (("GET", "/health"), ("GET", "/v1/users"), ("POST", "/recall")):
            assert c.request(method, path, headers=EVIL, json={}).status_code == 421
        # Nothing was erased; loopback names still work.
        port = gw.url.rsplit(":", 1)[1]
        for host in (f"localhost:{port}", f"127.0.0.1:{port}", "LOCALHOST", f"[::1]:{port}"):
            assert c.get("/v1/users", headers={"Host": host}).status_code == 200, host
    assert [u["user_id"] for u in list_users(gw.store)] == ["alice"]


def test_a_foreign_host_header_is_refused_with_a_key_too(tmp_path: Path) -> None:
    with running_gateway(tmp_path / "k.db", api_key=KEY) as g, g.client(KEY) as c:
        _alice(c)
        assert c.delete("/v1/users/alice", headers=EVIL).status_code == 421
        assert list_users(g.store)


def test_allowed_host_adds_a_name(tmp_path: Path) -> None:
    extra = ("memory.example",)
    with running_gateway(tmp_path / "a.db", allowed_hosts=extra) as g, g.client() as c:
        assert c.get("/health", headers={"Host": "memory.example:8420"}).status_code == 200
        assert c.get("/health", headers={"Host": "other.example"}).status_code == 421
    with running_gateway(tmp_path / "b.db", allowed_hosts=("*",)) as g, g.client() as c:
        assert c.get("/health", headers=EVIL).status_code == 200
    with pytest.raises(ConfigError, match="allowed host"):
        GatewayConfig(allowed_hosts=("http://x.example/",)).check()


def test_host_names_default_to_loopback_and_the_bound_address() -> None:
    from memstore.gateway.guard import host_name

    names = GatewayConfig(host="192.0.2.7", api_key=KEY).host_names()
    assert names is not None and {"localhost", "127.0.0.1", "::1", "192.0.2.7"} <= names
    assert "attacker.example" not in names
    assert host_name("Example.ORG:80") == "example.org"
    assert host_name("[::1]:8420") == "::1"
    assert host_name("::1") == "::1"


def test_bearer_scheme_is_case_insensitive(tmp_path: Path) -> None:
    with running_gateway(tmp_path / "c.db", api_key=KEY) as g, g.client() as c:
        for scheme in ("bearer", "BEARER", "Bearer", "bEaReR"):
            r = c.get("/v1/users", headers={"Authorization": f"{scheme} {KEY}"})
            assert r.status_code == 200, scheme
        assert c.get("/v1/users", headers={"Authorization": f"Basic {KEY}"}).status_code == 401
        assert c.get("/v1/users", headers={"Authorization": "bearer"}).status_code == 401


@pytest.mark.parametrize("key", ["clé-secrète", "two words", "tab\tkey", "emoji🔑key"])
def test_keys_must_be_printable_ascii(key: str) -> None:
    with pytest.raises(ConfigError, match="printable ASCII"):
        GatewayConfig(api_key=key).check()


def test_serve_refuses_a_non_ascii_key_at_start(tmp_path: Path) -> None:
    env = {**os.environ, "MEMSTORE_GATEWAY_API_KEY": "clé"}
    out = subprocess.run(
        [sys.executable, "-m", "memstore", "serve", "--db", str(tmp_path / "x.db"), "--port", "0"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode != 0
    assert "printable ASCII" in out.stderr and "Traceback" not in out.stderr


def test_access_log_prints_a_line_per_request(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "memstore", "serve", "--db", str(tmp_path / "log.db"),
         "--port", "0", "--access-log"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "MEMSTORE_EMBEDDER": "hashing", "MEMSTORE_SCHEDULER": "0"},
    )  # fmt: skip
    assert proc.stderr is not None and proc.stdout is not None
    try:
        url = None
        deadline = time.monotonic() + 120
        while url is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            m = re.search(r"gateway on (http://\S+) ", line)
            url = m.group(1) if m else None
        assert url, "gateway did not start"
        assert httpx.get(url + "/health", timeout=30).status_code == 200
        assert httpx.get(url + "/no/such/route", timeout=30).status_code == 404
    finally:
        proc.terminate()
        rest = proc.stdout.read()  # uvicorn prints access lines on stdout
        proc.wait(timeout=60)
    assert '"GET /health HTTP/1.1" 200' in rest
    assert '"GET /no/such/route HTTP/1.1" 404' in rest


def _sessions(n: int, rounds: int = 1) -> list[dict[str, object]]:
    conv = [{"role": "user", "content": "hello there"}, {"role": "assistant", "content": "hi"}]
    return [{"sessionKey": f"k{i}", "conversations": [conv] * rounds} for i in range(n)]


def test_seed_is_bounded_and_reveals_no_server_path(tmp_path: Path) -> None:
    with (
        running_gateway(tmp_path / "seed.db", seed_max_sessions=3, seed_max_messages=10) as g,
        g.client() as c,
    ):
        r = c.post("/seed", json={"data": _sessions(4), "user_id": "bob"})
        assert r.status_code == 413, r.text
        assert "at most 3 sessions" in r.json()["error"]
        r = c.post("/seed", json={"data": _sessions(1, rounds=6), "user_id": "bob"})
        assert r.status_code == 413 and "10 messages" in r.json()["error"]
        assert list_users(g.store) == []  # nothing stored by a refused seed
        ok = c.post("/seed", json={"data": _sessions(2), "user_id": "bob"})
        assert ok.status_code == 200, ok.text
        assert str(tmp_path) not in ok.text and "seed.db" not in ok.text
        assert ok.json()["l0_recorded"] == 4


def test_seed_default_limit_answers_a_huge_seed_at_once(gw: Running) -> None:
    started = time.monotonic()
    with gw.client() as c:
        r = c.post("/seed", json={"data": _sessions(5000), "user_id": "bob"})
    assert r.status_code == 413 and "5000 sessions" in r.json()["error"]
    assert time.monotonic() - started < 60  # refused up front, not after extraction
    assert list_users(gw.store) == []


BAD_IDS = ["", " ", " alice", "alice ", "al\x00ice"]


@pytest.mark.parametrize("bad", BAD_IDS)
def test_upstream_routes_refuse_empty_or_padded_user_ids(gw: Running, bad: str) -> None:
    bodies = {
        "/capture": {"user_content": "I like tea", "session_key": "s", "user_id": bad},
        "/recall": {"query": "tea", "session_key": "s", "user_id": bad},
        "/search/memories": {"query": "tea", "user_id": bad},
        "/search/conversations": {"query": "tea", "user_id": bad},
        "/session/end": {"session_key": "s", "user_id": bad},
        "/seed": {"data": _sessions(1), "user_id": bad},
    }
    with gw.client() as c:
        for path, body in bodies.items():
            r = c.post(path, json=body)
            assert r.status_code == 400, (path, r.text)
            assert "user_id" in r.json()["error"]
    assert list_users(gw.store) == []  # in particular, nothing under "default"


@pytest.mark.parametrize("bad", ["", " s", "s "])
def test_upstream_routes_refuse_empty_or_padded_session_keys(gw: Running, bad: str) -> None:
    bodies = {
        "/capture": {"user_content": "I like tea", "session_key": bad},
        "/recall": {"query": "tea", "session_key": bad},
        "/search/conversations": {"query": "tea", "session_key": bad},
        "/session/end": {"session_key": bad},
        "/seed": {"data": [{"sessionKey": bad, "conversations": [[
            {"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]]}]},
    }  # fmt: skip
    with gw.client() as c:
        for path, body in bodies.items():
            r = c.post(path, json=body)
            assert r.status_code == 400, (path, r.text)
    assert list_users(gw.store) == []
