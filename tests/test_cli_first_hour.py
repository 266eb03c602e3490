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


def test_users_list_loads_no_engine_and_no_llm_client(cli_env: Path) -> None:
    # What a short command imports decides its start-up time (measured by
    # scripts/cli_startup.py); importing is checked here, not timed.
    import subprocess
    import sys

    run_cli("capture", "--user", "alice", "--session", "s1", "--user-text", "I like green tea")
    code = (
        "import sys\n"
        "from memstore.cli import main\n"
        f"try:\n    main(['users', 'list', '--db', {str(cli_env)!r}])\n"
        "except SystemExit:\n    pass\n"
        "print('HEAVY', [m for m in ('openai', 'numpy', 'memstore.store', 'alembic',"
        " 'apscheduler', 'tqdm') if m in sys.modules])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "alice" in out.stdout
    assert "HEAVY []" in out.stdout, out.stdout + out.stderr


def test_opening_a_store_does_not_import_openai(cli_env: Path) -> None:
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from memstore import Store\n"
        f"with Store.open({str(cli_env)!r}) as s:\n"
        "    s.search_conversations('tea', user_id='alice')\n"
        "print('OPENAI', 'openai' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "OPENAI False" in out.stdout, out.stdout + out.stderr
