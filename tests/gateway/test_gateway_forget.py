"""The /v1 forget routes over real HTTP: retire a memory (persona, scenes and
recall follow), erase messages, a session, a time range; bad input is a 4xx
with a message and changes nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.gateway_support import Running, running_gateway


@pytest.fixture
def gw(tmp_path: Path) -> Iterator[Running]:
    with running_gateway(tmp_path / "gw.db") as g:
        yield g


def _capture(c: httpx.Client, session: str, content: str, when: str) -> list[str]:
    r = c.post(
        "/v1/capture",
        json={"user_id": "alice", "session_id": session,
              "messages": [{"role": "user", "content": content, "timestamp": when},
                           {"role": "assistant", "content": "Noted.", "timestamp": when}]},
    )  # fmt: skip
    assert r.status_code == 200, r.text
    return list(r.json()["stored"])


def _everything(c: httpx.Client) -> str:
    parts: list[Any] = [
        c.get("/v1/users/alice/persona").json(),
        c.get("/v1/users/alice/scenes").json(),
        c.get("/v1/users/alice/memories").json(),
        c.post("/v1/recall", json={"user_id": "alice", "query": "where I live, my sister"}).json(),
        c.post("/v1/search", json={"user_id": "alice", "query": "Porto sister tea",
                                   "layer": "conversations", "strategy": "keyword"}).json(),
    ]  # fmt: skip
    return repr(parts)


def test_v1_forget_routes(gw: Running) -> None:
    with gw.client() as c:
        porto = _capture(c, "s1", "I live in Porto and I am allergic to peanuts.", "2023-01-01")
        _capture(c, "s2", "My sister is called Yolanda.", "2023-06-01")
        _capture(c, "s3", "I like green tea.", "2024-06-01")
        store = gw.store
        for s in ("s1", "s2", "s3"):
            store.end_session("alice", s)
        store.run_pipeline("alice")
        assert all(w in _everything(c) for w in ("Porto", "Yolanda", "green tea"))

        # Retire: the memory's scenes, persona and source excerpt follow at once.
        [m] = [m for m in store.list_memories("alice") if "Porto" in m["content"]]
        r = c.delete(f"/v1/users/alice/memories/{m['memory_id']}")
        assert r.status_code == 200 and r.json()["forgotten"] == m["memory_id"]
        assert "Porto" not in _everything(c)

        # Erase the messages themselves.
        r = c.post("/v1/users/alice/messages/forget", json={"message_ids": porto[:1]})
        assert r.status_code == 200, r.text
        assert r.json()["compacted"] and r.json()["messages_removed"] == 1
        assert "peanuts" not in _everything(c)

        r = c.delete("/v1/users/alice/sessions/s2")
        assert r.status_code == 200 and r.json()["grain"] == "session"
        assert "Yolanda" not in _everything(c)

        r = c.post("/v1/users/alice/forget-between",
                   json={"start": "2024-01-01T00:00:00Z", "dry_run": True})  # fmt: skip
        assert r.status_code == 200 and r.json()["dry_run"] and r.json()["messages_removed"] == 2
        assert "green tea" in _everything(c)
        r = c.post("/v1/users/alice/forget-between", json={"start": "2024-01-01T00:00:00Z"})
        assert r.status_code == 200 and r.json()["messages_removed"] == 2
        assert "green tea" not in _everything(c)

        head = store.event_count()
        assert c.delete("/v1/users/alice/sessions/nope").status_code == 404
        r = c.post("/v1/users/alice/messages/forget", json={"message_ids": []})
        assert r.status_code in (400, 422) and "error" in r.json()
        r = c.post("/v1/users/alice/messages/forget", json={"message_ids": ["x"], "extra": 1})
        assert r.status_code in (400, 422)
        r = c.post(
            "/v1/users/alice/forget-between", json={"start": "2024-01-01", "end": "2023-01-01"}
        )
        assert r.status_code == 400 and "before" in r.json()["error"]
        assert store.event_count() == head


def test_upstream_delete_routes(gw: Running) -> None:
    with gw.client() as c:
        for session, text in (("k1", "I live in Porto."), ("k2", "My sister is called Yolanda.")):
            r = c.post("/capture", json={"user_content": text, "assistant_content": "ok",
                                         "session_key": session, "user_id": "alice"})  # fmt: skip
            assert r.status_code == 200, r.text
        _capture(c, "k3", "I like green tea.", "2024-06-01")
        store = gw.store
        for s in ("k1", "k2", "k3"):
            store.end_session("alice", s)
        store.run_pipeline("alice")
        [tea] = [m for m in store.list_memories("alice") if "green tea" in m["content"]]

        r = c.post("/v2/atomic/delete", json={"ids": [tea["memory_id"]], "user_id": "alice"})
        assert r.status_code == 200 and r.json()["deleted_count"] == 1
        assert "green tea" not in repr(c.get("/v1/users/alice/persona").json())

        r = c.post("/v2/conversation/delete", json={"session_id": "k1", "user_id": "alice"})
        assert r.status_code == 200 and r.json()["deleted_count"] == 2 and r.json()["compacted"]
        assert "Porto" not in _everything(c)
        mid = store.search_conversations("alice", "Yolanda", strategy="keyword")[0].ref
        r = c.post("/v2/conversation/delete", json={"message_ids": [mid], "user_id": "alice"})
        assert r.status_code == 200 and r.json()["deleted_count"] == 1
        assert "Yolanda" not in _everything(c)

        both = {"message_ids": ["x"], "session_id": "k2", "user_id": "alice"}
        assert c.post("/v2/conversation/delete", json=both).status_code == 400
        assert c.post("/v2/conversation/delete", json={"user_id": "alice"}).status_code == 400
        r = c.post("/v2/conversation/delete", json={"session_id": "", "user_id": "alice"})
        assert r.status_code == 400
        assert c.post("/v2/atomic/delete", json={"ids": [], "user_id": "alice"}).status_code in (
            400, 422)  # fmt: skip


def test_v1_retention_run(gw: Running) -> None:
    with gw.client() as c:
        _capture(c, "s1", "I live in Porto.", "2001-01-01")
        _capture(c, "s2", "I like green tea.", "2099-01-01")
        r = c.post("/v1/retention/run", json={})
        assert r.status_code == 200 and r.json() == []  # no limit set
        r = c.post("/v1/retention/run", json={"days": 365, "dry_run": True})
        assert [(x["user_id"], x["messages_removed"], x["dry_run"]) for x in r.json()] == [
            ("alice", 2, True)
        ]
        r = c.post("/v1/retention/run", json={"days": 365})
        assert [(x["messages_removed"], x["compacted"]) for x in r.json()] == [(2, True)]
        assert "Porto" not in _everything(c) and "green tea" in _everything(c)
        assert c.post("/v1/retention/run", json={"days": -1}).status_code in (400, 422)
