"""Migration 0019_storage on both backends: files from before it (dict
payloads, ``l0:`` keys, ``l0_messages.content_hash``) come out packed and
smaller, and every event reads, replays and searches as before."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from sqlalchemy import inspect, text

from memstore import Settings
from memstore.db import migrate
from memstore.db.connect import open_database
from memstore.store import Store, default_projections

_BEFORE = "0017_pgvector"


def _owners() -> dict[str, str]:
    return migrate.projection_tables(default_projections())


def _fill(s: Store) -> None:
    for turn in range(6):
        s.capture_turn(
            f"u{turn % 2}",
            "s1",
            f"turn {turn}: my sister Ana plays the cello in Porto",
            f"reply {turn}: how long has she played?",
            timestamp=f"2024-03-0{turn + 1}T12:00:00Z",
            turn_id=f"t{turn}",
        )
    s.capture("u0", "s2", [{"role": "user", "content": "named ☕", "name": "Bo"}])


def _state(s: Store) -> dict[str, Any]:
    hits = {
        u: [(h.ref, h.text) for h in s.search_conversations(u, "cello Porto", limit=20)]
        for u in ("u0", "u1")
    }
    return {
        "events": [(e.position, e.stream, e.payload.to_dict()) for e in s.read_events()],
        "hits": hits,
    }


def _raw(target: str) -> tuple[list[tuple[Any, ...]], set[str]]:
    db = open_database(target)
    try:
        with db.read() as conn:
            rows = conn.execute(
                text(
                    "SELECT position, user_id, payload, idempotency_key FROM events "
                    "WHERE type = 'l0.captured' ORDER BY position"
                )
            ).all()
            cols = {c["name"] for c in inspect(conn).get_columns("l0_messages")}
            if "content_hash" in cols:
                bad = conn.execute(text("SELECT text, content_hash FROM l0_messages")).all()
                assert all(hashlib.sha256(t.encode()).hexdigest() == h for t, h in bad)
        return [tuple(r) for r in rows], cols
    finally:
        db.close()


def _old_key(user: str, payload: dict[str, Any]) -> str:
    ids = [m["id"] for m in payload["messages"]]
    joined = "\x1f".join([user, payload["session_id"], *ids])
    return "l0:" + hashlib.sha256(joined.encode()).hexdigest()


def test_files_from_before_0019_upgrade_losslessly(target: str, settings: Settings) -> None:
    with Store.open(target, settings=settings) as s:
        _fill(s)
        s.reindex()
        before = _state(s)
    packed, cols = _raw(target)
    assert "content_hash" not in cols
    assert all(isinstance(json.loads(p), list) and k is None for _, _, p, k in packed)

    db = open_database(target)
    try:
        migrate.downgrade(db, _BEFORE, owners=_owners())
    finally:
        db.close()
    old, cols = _raw(target)
    assert "content_hash" in cols
    # What the code before 0019 wrote: dict payloads with their derived keys.
    for _, user, payload, key in old:
        data = json.loads(payload)
        assert isinstance(data, dict) and key == _old_key(user, data)
    old_bytes = sum(len(p.encode()) for _, _, p, _ in old)

    with Store.open(target, settings=settings) as s:  # upgrades to head
        after, cols = _raw(target)
        assert "content_hash" not in cols
        assert [(p, json.loads(d), k) for p, _, d, k in after] == [
            (p, json.loads(d), None) for p, _, d, _ in packed
        ]
        assert sum(len(p.encode()) for _, _, p, _ in after) < 0.6 * old_bytes
        assert _state(s) == before
        s.rebuild()
        assert _state(s) == before
