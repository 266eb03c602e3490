"""The inspector over plain HTTP (no browser): the gateway's guard lets /ui
through to the inspector's own login, scripts may use the Bearer key, pages
carry security headers, and the API keeps its rules."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from memstore.store import Store
from tests.gateway_support import Running, running_gateway
from tests.mcp_support import SETTINGS

KEY = "k"


@pytest.fixture
def gw(tmp_path: Path) -> Iterator[Running]:
    db = tmp_path / "h.db"
    with Store.open(db, settings=SETTINGS) as store:
        store.capture("alice", "s1", [{"role": "user", "content": "I am allergic to peanuts."}])
        store.run_pipeline()
    with running_gateway(db, SETTINGS, api_key=KEY) as running:
        yield running


def test_pages_need_the_key_and_send_security_headers(gw: Running) -> None:
    r = httpx.get(gw.url + "/ui/user?u=alice")
    assert r.status_code == 303 and r.headers["location"].startswith("/ui/login?next=")
    assert httpx.get(gw.url + "/ui/login").status_code == 200
    bad = httpx.post(gw.url + "/ui/login", data={"key": "nope", "next": "/ui/"})
    assert bad.status_code == 401 and "set-cookie" not in bad.headers
    # Never redirected off the inspector after logging in.
    ok = httpx.post(gw.url + "/ui/login", data={"key": KEY, "next": "https://evil.test/"})
    assert ok.status_code == 303 and ok.headers["location"] == "/ui/"
    cookie = ok.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and KEY + ";" not in cookie
    with gw.client(KEY) as c:
        page = c.get("/ui/user?u=alice")
        assert page.status_code == 200 and "allergic to peanuts" in page.text
        csp = page.headers["content-security-policy"]
        assert "default-src 'none'" in csp and "script-src" not in csp
        assert page.headers["x-frame-options"] == "DENY"
        assert c.get("/ui/static/style.css").headers["content-type"].startswith("text/css")
        assert c.get("/ui/user").status_code == 400  # no user named: an HTML error page
        assert "text/html" in c.get("/ui/user").headers["content-type"]


def test_a_script_with_the_key_may_post_without_a_csrf_token(gw: Running) -> None:
    store: Store = gw.store
    [m] = store.list_memories("alice")
    with gw.client(KEY) as c:
        r = c.post("/ui/forget", data={"u": "alice", "m": m["memory_id"]})
        assert r.status_code == 303
    assert store.get_memory("alice", m["memory_id"])["status"] != "active"  # type: ignore[index]
    # Forms are the inspector's only: the API still takes JSON alone, and the
    # key is still required there.
    assert httpx.post(gw.url + "/v1/search", data={"q": "x"}).status_code == 401
    with gw.client(KEY) as c:
        assert c.post("/v1/search", data={"user_id": "a", "query": "x"}).status_code == 415


@pytest.mark.slow
def test_memstore_ui_serves_a_local_store_on_loopback(tmp_path: Path) -> None:
    db = tmp_path / "cli.db"
    with Store.open(db, settings=SETTINGS) as store:
        store.capture("alice", "s1", [{"role": "user", "content": "I am allergic to peanuts."}])
    env = {**os.environ, "MEMSTORE_EMBEDDER": "hashing", "MEMSTORE_SCHEDULER": "false"}
    cmd = [sys.executable, "-m", "memstore", "ui", "--db", str(db), "--read-only"]
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        while line and "inspector on" not in line:
            line = proc.stderr.readline()
        url = line.split("inspector on ", 1)[1].split()[0]
        assert url.startswith("http://127.0.0.1:") and url.endswith("/ui/")
        page = httpx.get(url, timeout=30)
        assert page.status_code == 200 and "alice" in page.text and "read-only" in page.text
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
