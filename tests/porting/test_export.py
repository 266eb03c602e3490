"""``memstore export`` → ``memstore import --format memstore`` restores exactly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from memstore import Settings, Store
from memstore.porting.report import ImportReport
from memstore.porting.upstream import read_upstream
from memstore.porting.upstream_apply import import_upstream
from tests.backends import Targets
from tests.porting_support import build_upstream_dir, cli_env, run_cli

pytestmark = pytest.mark.both_backends

__all__ = ["cli_env"]


def _open(db: Path) -> Store:
    return Store.open(db, settings=Settings().replace(embedder="hashing", scheduler=False))


def _state(s: Store, user: str) -> dict[str, Any]:
    keep = (
        "memory_id", "content", "type", "priority", "scene_name", "status", "origin",
        "source_message_ids", "activity_start", "activity_end", "generation", "retired_by",
    )  # fmt: skip
    mems = sorted(
        (json.dumps({k: m[k] for k in keep}, sort_keys=True)
         for m in s.list_memories(user, include_retired=True)),
    )  # fmt: skip
    scenes = sorted(
        (x["scene_id"], x["name"], x["summary"], x["body"], x["heat"], tuple(x["memory_ids"]))
        for x in s.list_scenes(user)
    )
    with s._db.read() as conn:
        l0 = conn.execute(
            text(
                "SELECT session_id, message_id, role, text, occurred_at FROM l0_messages "
                "WHERE user_id = :u ORDER BY session_id, message_id"
            ),
            {"u": user},
        ).all()
    return {"memories": mems, "scenes": scenes, "persona": s.get_persona(user),
            "l0": [tuple(r) for r in l0]}  # fmt: skip


def _populate(db: Path, tmp: Path) -> None:
    with _open(db) as s:
        # An erased user first: the log has a gap where their events were.
        s.capture_turn("zed", "z", "I love secrets", "ok")
        s.end_session("zed", "z")
        s.forget_user("zed")
        s.capture_turn("alice", "s1", "I love green tea", "Noted")
        s.capture_turn("alice", "s1", "I live in Lisbon", "Nice")
        s.end_session("alice", "s1")
        s.capture_turn("bob", "b1", "I work as a pilot", "Cool")
        s.end_session("bob", "b1")
        s.run_pipeline()
        s.write_memory("alice", "add", "Alice prefers short answers.", type="instruction")
        first = s.list_memories("alice")[0]["memory_id"]
        s.forget_memory("alice", first)
        rep = ImportReport()
        import_upstream(s, read_upstream(build_upstream_dir(tmp / "up"), rep), "alice", rep)
        s.rederive("bob")


def test_user_export_round_trips_exactly(
    new_target: Targets, cli_env: Path, tmp_path: Path
) -> None:
    _populate(cli_env, tmp_path)
    out = tmp_path / "alice.jsonl"
    r = run_cli("export", "--user", "alice", "-o", str(out))
    assert r.exit_code == 0, r.output
    lines = out.read_text(encoding="utf-8").splitlines()
    assert json.loads(lines[0])["format"] == "memstore-events/1"
    assert all(json.loads(x)["user_id"] == "alice" for x in lines[1:])

    copy = new_target("copy.db")
    r = run_cli("--db", str(copy), "import", str(out), "--format", "memstore")
    assert r.exit_code == 0, r.output
    assert f"{len(lines) - 1} events restored" in r.stdout
    with _open(cli_env) as a, _open(copy) as b:
        original = _state(a, "alice")
        assert original["memories"] and original["scenes"] and original["persona"]
        assert _state(b, "alice") == original
        assert _state(b, "bob")["l0"] == []
        b.rebuild()
        assert _state(b, "alice") == original
    # Restoring the same file again changes nothing.
    r = run_cli("--db", str(copy), "import", str(out), "--format", "memstore")
    assert r.exit_code == 0 and "events already present" in r.stdout
    assert "events restored" not in r.stdout


def test_all_export_round_trips_every_user(
    new_target: Targets, cli_env: Path, tmp_path: Path
) -> None:
    _populate(cli_env, tmp_path)
    out = tmp_path / "all.jsonl"
    assert run_cli("export", "--all", "-o", str(out)).exit_code == 0
    copy = new_target("copy.db")
    r = run_cli("--db", str(copy), "import", "-", "--format", "memstore",
                input=out.read_text(encoding="utf-8"))  # fmt: skip
    assert r.exit_code == 0, r.output
    with _open(cli_env) as a, _open(copy) as b:
        for user in ("alice", "bob", "zed"):
            assert _state(b, user) == _state(a, user)
        assert len(b.list_memories("bob")) == len(a.list_memories("bob")) > 0


def test_restore_reports_bad_lines(new_target: Targets, cli_env: Path, tmp_path: Path) -> None:
    _populate(cli_env, tmp_path)
    out = tmp_path / "a.jsonl"
    run_cli("export", "--user", "bob", "-o", str(out))
    lines = out.read_text(encoding="utf-8").splitlines()
    broken = json.loads(lines[1])
    broken["type"] = "no.such.type"
    lines[1] = json.dumps(broken)
    lines.insert(2, "garbage")
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    r = run_cli("--db", str(new_target("c.db")), "import", str(out), "--format", "memstore")
    assert r.exit_code == 1
    assert "a.jsonl:2: unknown event type 'no.such.type'" in r.stderr
    assert "a.jsonl:3: not JSON" in r.stderr


def test_markdown_export_is_readable(cli_env: Path, tmp_path: Path) -> None:
    _populate(cli_env, tmp_path)
    r = run_cli("export", "--user", "alice", "--markdown")
    assert r.exit_code == 0
    md = r.stdout
    assert md.startswith("# alice")
    assert "## Persona" in md and "Vegetarian nurse" in md
    assert "### instruction" in md and "- Alice prefers short answers." in md
    assert "### Food (heat 7)" in md


def test_export_needs_a_user_or_all_and_an_existing_database(cli_env: Path, tmp_path: Path) -> None:
    assert run_cli("export").exit_code == 2
    missing = tmp_path / "nope" / "x.db"
    r = run_cli("--db", str(missing), "export", "--all")
    assert r.exit_code == 1 and str(missing) in r.stderr
    assert not missing.parent.exists()
