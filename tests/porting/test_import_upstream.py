"""Importing a TencentDB Agent Memory data directory: L0 to L3 as events."""

from __future__ import annotations

from pathlib import Path

import pytest

from memstore import Settings, Store
from memstore.errors import ConfigError
from memstore.porting.report import ImportReport
from memstore.porting.upstream import parse_scene, read_upstream, strip_navigation
from memstore.porting.upstream_apply import MODEL, import_upstream
from memstore.porting.upstream_env import load_settings
from tests.porting_support import PERSONA, build_upstream_dir, cli_target, run_cli

pytestmark = pytest.mark.both_backends

__all__ = ["cli_target"]  # the fixture, imported for pytest


def _open(db: str) -> Store:
    return Store.open(db, settings=Settings().replace(embedder="hashing", scheduler=False))


def _state(s: Store, user: str) -> tuple[object, ...]:
    mems = sorted(
        (m["memory_id"], m["content"], m["type"], m["priority"], m["scene_name"],
         tuple(m["source_message_ids"]), m["activity_start"])
        for m in s.list_memories(user)
    )  # fmt: skip
    scenes = sorted(
        (x["scene_id"], x["name"], x["summary"], x["body"], x["heat"], tuple(x["memory_ids"]))
        for x in s.list_scenes(user)
    )
    l0 = sorted(
        (h.ref, h.text, h.session_id, h.occurred_at)
        for h in s.search_conversations(user, "sencha nurse Lisbon move",
                                        strategy="keyword", limit=20)
    )  # fmt: skip
    return mems, scenes, s.get_persona(user), l0


def test_upstream_dir_imports_into_all_four_layers(tmp_path: Path, target: str) -> None:
    root = build_upstream_dir(tmp_path / "memory-tdai")
    with _open(target) as s:
        report = ImportReport()
        import_upstream(s, read_upstream(root, report), "alice", report)
        assert report.ok, report.problems
        assert report.counts["messages stored"] == 6
        assert report.counts["memories imported"] == 4
        assert report.counts["scenes imported"] == 2

        # L0: searchable, with the upstream's ids and times, both file forms.
        hits = s.search_conversations("alice", "vegetarian", strategy="keyword")
        assert hits[0].ref == "msg_1714000000000_000000"
        assert hits[0].session_id == "agent:main:chat-1"
        assert hits[0].occurred_at.startswith("2024-04-24T23:06:40")
        grouped = s.search_conversations("alice", "moving Lisbon", strategy="keyword")
        assert grouped[0].ref == "msg_g1" and grouped[0].session_id == "agent:main:chat-2"

        # L1: the later line of m_2 won; provenance says where each came from.
        mems = {m["content"]: m for m in s.list_memories("alice")}
        assert "The user drinks sencha green tea daily." in mems
        assert "The user drinks sencha." not in mems
        assert mems["The user is vegetarian."]["source_message_ids"] == ["msg_1714000000000_000000"]
        move = mems["The user moves to Lisbon in May 2024."]
        assert move["type"] == "episodic" and move["activity_start"].startswith("2024-05-01")
        assert mems["The user works night shifts as a nurse."]["priority"] == 90
        hist = s.memory_history("alice", mems["The user is vegetarian."]["memory_id"])
        assert hist[0]["deriver"] == "import" and hist[0]["model"] == MODEL
        assert "m_1" in hist[0]["reason"] and "records/2024-04-25.jsonl:1" in hist[0]["reason"]
        found = s.search_memories("alice", "sencha", strategy="keyword")
        assert found and "sencha" in found[0].text

        # L2: heat and summary from META, memories linked by scene name.
        scenes = {x["name"]: x for x in s.list_scenes("alice")}
        assert scenes["Food"]["heat"] == 7 and scenes["Food"]["summary"] == "Vegetarian; sencha"
        assert "- sencha daily" in scenes["Food"]["body"]
        food_mems = {m["memory_id"] for m in mems.values() if m["scene_name"] == "Food"}
        assert set(scenes["Food"]["memory_ids"]) == food_mems and len(food_mems) == 2
        assert [x["name"] for x in s.list_scenes("alice")] == ["Food", "Work"]  # by heat

        # L3: persona without the upstream's navigation (memstore composes its own).
        assert s.get_persona("alice") == PERSONA.strip()
        rec = s.recall("alice", "what should I cook? sencha?")
        assert "Vegetarian nurse" in rec.text and "Food" in rec.navigation

        # Nothing left for the pipeline to extract again.
        sessions = [x for st in s.pipeline_status("alice") for x in st["sessions"]]
        assert len(sessions) == 2 and all(x["messages_pending"] == 0 for x in sessions)
        # A queued extraction finds nothing to do and adds no memory.
        s.run_pipeline("alice")
        assert len(s.list_memories("alice")) == 4

        before = _state(s, "alice")
        s.rebuild()
        assert _state(s, "alice") == before


def test_reimport_is_idempotent_and_picks_up_changes(tmp_path: Path, target: str) -> None:
    root = build_upstream_dir(tmp_path / "d")
    with _open(target) as s:
        r1 = ImportReport()
        import_upstream(s, read_upstream(root, r1), "alice", r1)
        head = s.event_count()
        state = _state(s, "alice")
        r2 = ImportReport()
        import_upstream(s, read_upstream(root, r2), "alice", r2)
        assert s.event_count() == head, "a second import appended events"
        assert _state(s, "alice") == state
        assert r2.counts["messages already known"] == 6
        assert r2.counts["memories already imported"] == 4

        # The upstream kept working: a record changed, a scene heated up.
        with (root / "records" / "2024-04-27.jsonl").open("w", encoding="utf-8") as fh:
            import json

            from tests.porting_support import record

            fh.write(json.dumps(record("m_3", "The user now works day shifts.",
                                       scene_name="Work")) + "\n")  # fmt: skip
        (root / "scene_blocks" / "Work.md").write_text(
            "-----META-START-----\nsummary: Day-shift nurse\nheat: 5\n-----META-END-----\n"
            "## Work\n- nurse, days\n",
            encoding="utf-8",
        )
        r3 = ImportReport()
        import_upstream(s, read_upstream(root, r3), "alice", r3)
        assert r3.counts["memories updated"] == 1
        contents = [m["content"] for m in s.list_memories("alice")]
        assert "The user now works day shifts." in contents
        assert "The user works night shifts as a nurse." not in contents
        work = next(x for x in s.list_scenes("alice") if x["name"] == "Work")
        assert (work["heat"], work["summary"]) == (5, "Day-shift nurse")
        again = _state(s, "alice")
        s.rebuild()
        assert _state(s, "alice") == again


def test_other_users_are_untouched_and_rederive_redoes_the_import(
    tmp_path: Path, target: str
) -> None:
    root = build_upstream_dir(tmp_path / "d")
    with _open(target) as s:
        s.capture_turn("bob", "b1", "I love chess", "ok")
        rep = ImportReport()
        import_upstream(s, read_upstream(root, rep), "alice", rep)
        assert s.search_conversations("bob", "sencha", strategy="keyword") == []
        assert s.list_memories("bob") == []
        gen = s.rederive("alice")
        assert gen >= 1
        # memstore's own (offline) deriver redid L1 from the imported L0.
        redone = [m["content"] for m in s.list_memories("alice")]
        assert any("nurse" in c or "sencha" in c or "vegetarian" in c for c in redone)
        assert all(m["generation"] == gen for m in s.list_memories("alice"))
        old = [m["content"] for m in s.list_memories("alice", generation=0)]
        assert "The user is vegetarian." in old


def test_bad_lines_are_reported_and_the_rest_imported(tmp_path: Path, target: str) -> None:
    root = build_upstream_dir(tmp_path / "d", bad_lines=True)
    (root / "scene_blocks" / "Broken.md").write_bytes(b"\x00\x01binary\xff")
    with _open(target) as s:
        rep = ImportReport()
        import_upstream(s, read_upstream(root, rep), "alice", rep)
    where = sorted(p.where for p in rep.problems)
    assert where == [
        "conversations/2024-04-25.jsonl:2",
        "conversations/2024-04-25.jsonl:4",
        "records/2024-04-25.jsonl:4",
        "scene_blocks/Broken.md",
    ]
    msgs = " ".join(str(p) for p in rep.problems)
    assert "not JSON" in msgs and '"sessionKey" is null' in msgs and "binary" in msgs
    assert '"type"' in msgs
    assert rep.counts["messages stored"] == 6
    assert rep.counts["memories imported"] == 4


def test_scene_and_persona_parsing() -> None:
    sc = parse_scene("no meta at all\n", "Hobbies_and_Fun.md")
    assert (sc.name, sc.heat, sc.summary, sc.body) == ("Hobbies and Fun", 0, "", "no meta at all")
    assert strip_navigation("# P\ntext\n\n---\n## 🗺️ Scene Navigation (Scene Index)\nx") == (
        "# P\ntext"
    )
    assert strip_navigation("# P\nonly") == "# P\nonly"


def test_cli_import_upstream_with_progress_and_summary(cli_target: str, tmp_path: Path) -> None:
    root = build_upstream_dir(tmp_path / "d", bad_lines=True)
    r = run_cli("import", str(root), "--format", "upstream", "--user", "alice")
    assert r.exit_code == 1, r.output
    assert "skipped conversations/2024-04-25.jsonl:2: not JSON" in r.stderr
    assert "6 messages stored" in r.stdout and "4 memories imported" in r.stdout
    assert "3 problem(s)" in r.stdout
    r = run_cli("import", str(tmp_path / "nowhere"), "--format", "upstream", "--user", "a")
    assert r.exit_code == 1 and "does not exist" in r.stderr
    r = run_cli("import", str(root), "--format", "upstream")
    assert r.exit_code == 2 and "--user" in r.stderr
    r = run_cli("import", str(root), "--format", "upstream", "--user", "alice ")
    assert r.exit_code == 1 and "whitespace" in r.stderr


def test_upstream_llm_environment_is_honoured_when_memstore_s_is_unset(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("MEMSTORE_CONFIG", str(tmp_path / "none.toml"))
    monkeypatch.setenv("TDAI_LLM_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("TDAI_LLM_API_KEY", "tdai-key")
    monkeypatch.setenv("TDAI_LLM_MODEL", "qwen-upstream")
    monkeypatch.setenv("TDAI_LLM_TIMEOUT_MS", "45000")
    # Only the upstream-compatible paths (serve, import of upstream data) read them.
    assert Settings.load().llm.model == ""
    s = load_settings()
    assert (s.llm.base_url, s.llm.api_key, s.llm.model) == (
        "http://127.0.0.1:9/v1", "tdai-key", "qwen-upstream",
    )  # fmt: skip
    assert s.llm.timeout_s == 45.0 and s.llm.configured
    monkeypatch.setenv("MEMSTORE_LLM_MODEL", "ours")
    (tmp_path / "c.toml").write_text('llm_base_url = "http://file/v1"\n')
    monkeypatch.setenv("MEMSTORE_CONFIG", str(tmp_path / "c.toml"))
    s = load_settings()
    assert (s.llm.model, s.llm.base_url, s.llm.api_key) == ("ours", "http://file/v1", "tdai-key")


def test_serve_and_imports_of_upstream_data_read_the_upstream_names(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, cli_target: str
) -> None:
    """The two upstream-compatible paths hand TDAI_LLM_* to their settings; the
    other commands do not (test_the_core_settings_read_no_upstream_variable)."""
    import memstore.cli.porting
    import memstore.gateway.server

    monkeypatch.setenv("TDAI_LLM_MODEL", "qwen-upstream")
    served: list[Settings] = []
    monkeypatch.setattr(
        memstore.gateway.server, "serve", lambda db, cfg, settings, **kw: served.append(settings)
    )
    assert run_cli("serve", "--port", "0").exit_code == 0
    assert [s.llm.model for s in served] == ["qwen-upstream"]

    given: list[object] = []

    def no_store(db: object, **kw: object) -> None:
        given.append(kw.get("fallbacks"))
        raise SystemExit(3)

    monkeypatch.setattr(memstore.cli.porting, "open_store", no_store)
    root = build_upstream_dir(tmp_path / "up")
    run_cli("import", str(root), "--format", "upstream", "--user", "a")
    (tmp_path / "c.jsonl").write_text('{"user_id": "a"}\n', encoding="utf-8")
    run_cli("import", str(tmp_path / "c.jsonl"), "--format", "jsonl")
    assert given == [{"llm.model": "qwen-upstream"}, None]
    monkeypatch.setenv("TDAI_LLM_TIMEOUT_MS", "soon")
    with pytest.raises(ConfigError, match="TDAI_LLM_TIMEOUT_MS: not a number"):
        load_settings()
