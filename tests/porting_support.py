"""Small upstream data directories in the upstream's formats, and a CLI runner."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from memstore.cli import cli

T0 = 1_714_000_000_000  # 2024-04-24T23:06:40Z, epoch ms as the upstream writes


def _jsonl(path: Path, rows: list[Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "".join(
            (r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)) + "\n" for r in rows
        ),
        encoding="utf-8",
    )


def msg(key: str, sid: str, i: int, role: str, content: str) -> dict[str, Any]:
    return {
        "sessionKey": key,
        "sessionId": sid,
        "recordedAt": "2024-04-25T00:00:00.000Z",
        "id": f"msg_{T0 + i}_{i:06x}",
        "role": role,
        "content": content,
        "timestamp": T0 + i * 60_000,
    }


def record(rid: str, content: str, **kw: Any) -> dict[str, Any]:
    return {
        "id": rid,
        "content": content,
        "type": kw.get("type", "persona"),
        "priority": kw.get("priority", 80),
        "scene_name": kw.get("scene_name", "Food"),
        "source_message_ids": kw.get("sources", []),
        "metadata": kw.get("metadata", {}),
        "timestamps": ["2024-04-25T00:10:00.000Z"],
        "createdAt": "2024-04-25T00:10:00.000Z",
        "updatedAt": kw.get("updatedAt", "2024-04-25T00:10:00.000Z"),
        "sessionKey": kw.get("sessionKey", "agent:main:chat-1"),
        "sessionId": "sid-1",
    }


def scene(summary: str, heat: int, body: str) -> str:
    return (
        "-----META-START-----\n"
        "created: 2024-04-25T00:12:00.000Z\n"
        "updated: 2024-04-26T08:00:00.000Z\n"
        f"summary: {summary}\n"
        f"heat: {heat}\n"
        "-----META-END-----\n\n"
        f"{body}\n"
    )


PERSONA = "# User profile\n\nVegetarian nurse living in Lisbon; drinks sencha.\n"
NAVIGATION = (
    "\n---\n## 🗺️ Scene Navigation (Scene Index)\n*index*\n\n"
    "### Path: /home/u/.memory-tencentdb/memory-tdai/scene_blocks/Food.md\n"
    "**热度**: 7\nSummary: food\n"
)


def build_upstream_dir(root: Path, *, bad_lines: bool = False) -> Path:
    """Two sessions (flat and older grouped L0), records with a superseded
    line, two scene blocks, a persona with its navigation."""
    conv = [
        msg("agent:main:chat-1", "sid-1", 0, "user", "I am vegetarian and I love sencha"),
        msg("agent:main:chat-1", "sid-1", 1, "assistant", "Noted, sencha and veggie food."),
        msg("agent:main:chat-1", "sid-1", 2, "user", "I work as a nurse on night shifts"),
        msg("agent:main:chat-1", "sid-1", 3, "assistant", "That sounds demanding."),
    ]
    if bad_lines:
        conv.insert(1, "{not json")
        conv.insert(3, {"sessionKey": None, "role": "user", "content": "x", "timestamp": T0})
    _jsonl(root / "conversations" / "2024-04-25.jsonl", conv)
    grouped = {
        "sessionKey": "agent:main:chat-2",
        "sessionId": "sid-2",
        "recordedAt": "2024-04-26T09:00:00.000Z",
        "messageCount": 2,
        "messages": [
            {"id": "msg_g1", "role": "user", "content": "We are moving to Lisbon in May",
             "timestamp": T0 + 86_400_000},
            {"id": "msg_g2", "role": "assistant", "content": "Exciting move!",
             "timestamp": T0 + 86_460_000},
        ],
    }  # fmt: skip
    _jsonl(root / "conversations" / "2024-04-26.jsonl", [grouped])
    recs: list[Any] = [
        record("m_1", "The user is vegetarian.", sources=[conv[0]["id"]] if not bad_lines else []),
        record("m_2", "The user drinks sencha.", scene_name="Food"),
        record("m_3", "The user works night shifts as a nurse.", scene_name="Work", priority=90),
    ]
    if bad_lines:
        recs.append({"id": "m_bad", "content": "no type"})
    _jsonl(root / "records" / "2024-04-25.jsonl", recs)
    _jsonl(
        root / "records" / "2024-04-26.jsonl",
        [
            # The same id again: this line supersedes the earlier one.
            record("m_2", "The user drinks sencha green tea daily.", scene_name="Food",
                   updatedAt="2024-04-26T09:05:00.000Z"),
            record("m_4", "The user moves to Lisbon in May 2024.", type="episodic",
                   scene_name="Home", sessionKey="agent:main:chat-2",
                   metadata={"activity_start_time": "2024-05-01T00:00:00.000Z"}),
        ],
    )  # fmt: skip
    blocks = root / "scene_blocks"
    blocks.mkdir(parents=True, exist_ok=True)
    (blocks / "Food.md").write_text(
        scene("Vegetarian; sencha", 7, "## Food\n- vegetarian\n- sencha daily"), encoding="utf-8"
    )
    (blocks / "Work.md").write_text(
        scene("Night-shift nurse", 2, "## Work\n- nurse, nights"), encoding="utf-8"
    )
    (root / "persona.md").write_text(PERSONA + NAVIGATION, encoding="utf-8")
    (root / ".metadata").mkdir(exist_ok=True)
    return root


MERGED = "The user has a cat called Tom."
DELETED = "The user's bank PIN is 4921."
MERGED_INTO = "The user has two cats, Tom and Jerry."


def vectors_db(root: Path, live: list[str]) -> None:
    """The upstream's vectors.db as it keeps it: one l1_records row per live
    record (the columns of its schema; vector tables need sqlite-vec and
    are not read)."""
    conn = sqlite3.connect(root / "vectors.db")
    conn.execute(
        "CREATE TABLE l1_records (record_id TEXT PRIMARY KEY, content TEXT NOT NULL, "
        "type TEXT DEFAULT '', priority INTEGER DEFAULT 50, scene_name TEXT DEFAULT '', "
        "session_key TEXT DEFAULT '', session_id TEXT DEFAULT '', timestamp_str TEXT DEFAULT '', "
        "timestamp_start TEXT DEFAULT '', timestamp_end TEXT DEFAULT '', "
        "created_time TEXT DEFAULT '', updated_time TEXT DEFAULT '', "
        "metadata_json TEXT DEFAULT '{}')"
    )
    conn.executemany(
        "INSERT INTO l1_records (record_id, content) VALUES (?, '')", [(i,) for i in live]
    )
    conn.commit()
    conn.close()


def with_gone_records(root: Path) -> Path:
    """Adds a record merged into another (its id left vectors.db, the merged
    record's timestamp trail holds its timestamp) and one deleted outright."""
    cat: dict[str, Any] = record("m_cat", MERGED, scene_name="Pets")
    cat["timestamps"] = ["2024-04-27T08:00:00.000Z"]
    pin: dict[str, Any] = record("m_pin", DELETED, scene_name="Money")
    pin["timestamps"] = ["2024-04-27T08:30:00.000Z"]
    both: dict[str, Any] = record("m_cats", MERGED_INTO, scene_name="Pets")
    both["timestamps"] = ["2024-04-27T08:00:00.000Z", "2024-04-28T10:00:00.000Z"]
    _jsonl(root / "records" / "2024-04-28.jsonl", [cat, pin, both])
    vectors_db(root, ["m_1", "m_2", "m_3", "m_4", "m_cats"])
    return root


@pytest.fixture
def cli_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    db = tmp_path / "cli.db"
    monkeypatch.setenv("MEMSTORE_DB", str(db))
    monkeypatch.setenv("MEMSTORE_EMBEDDER", "hashing")
    monkeypatch.setenv("MEMSTORE_CONFIG", str(tmp_path / "none.toml"))
    return db


@pytest.fixture
def cli_target(target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """As ``cli_env``, with the store on the test's engine (tests/backends.py):
    ``MEMSTORE_DB`` is a file path or a PostgreSQL URL."""
    monkeypatch.setenv("MEMSTORE_DB", target)
    monkeypatch.setenv("MEMSTORE_EMBEDDER", "hashing")
    monkeypatch.setenv("MEMSTORE_CONFIG", str(tmp_path / "none.toml"))
    return target


def run_cli(*args: str, input: str | bytes | None = None) -> Result:
    """The CLI in-process, with the same error handling as ``memstore``."""
    from memstore.cli import main

    def entry() -> None:
        main(list(args))

    runner = CliRunner()
    import click

    @click.command(context_settings={"ignore_unknown_options": True})
    def wrapper() -> None:
        entry()

    return runner.invoke(wrapper, [], input=input, catch_exceptions=False)


__all__ = [
    "DELETED",
    "MERGED",
    "MERGED_INTO",
    "build_upstream_dir",
    "cli",
    "cli_env",
    "cli_target",
    "run_cli",
    "vectors_db",
    "with_gone_records",
]
