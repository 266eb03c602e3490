"""The CLI as someone meets it in their first hour: formats recognised without
being named, stdin and empty text, missing stores left alone, one error style."""

from __future__ import annotations

from pathlib import Path

from tests.porting_support import cli_env, run_cli

__all__ = ["cli_env"]


def test_import_recognises_a_memstore_export_without_format(cli_env: Path, tmp_path: Path) -> None:
    run_cli("capture", "--user", "alice", "--session", "s1", "--user-text", "I like green tea")
    exported = run_cli("export", "--user", "alice")
    assert exported.exit_code == 0
    copy = tmp_path / "copy.db"
    done = run_cli("import", "-", "--db", str(copy), input=exported.output)
    assert done.exit_code == 0, done.output
    assert "events restored" in done.output
    listed = run_cli("search", "conversations", "tea", "--user", "alice", "--db", str(copy))
    assert "green tea" in listed.output


def test_import_of_plain_jsonl_still_reads_messages(cli_env: Path, tmp_path: Path) -> None:
    src = tmp_path / "chats.jsonl"
    src.write_text('{"user": "bob", "session": "s", "role": "user", "content": "I ski"}\n')
    done = run_cli("import", str(src))
    assert done.exit_code == 0, done.output
    assert "messages stored" in done.output
