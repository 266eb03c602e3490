"""The CLI as a new user meets it: --db anywhere, MEMSTORE_USER, users list,
reading never creates files, doctor's lines and exit status, tables, --help
without the heavy imports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import pytest

from memstore.cli import cli
from memstore.cli.commands import COMMANDS
from tests.porting_support import cli_env, run_cli

__all__ = ["cli_env"]


def test_command_table_matches_the_commands() -> None:
    assert set(COMMANDS) == set(cli.commands)
    for name, cmd in cli.commands.items():
        modules, short = COMMANDS[name]
        assert short == cmd.get_short_help_str(limit=80), name
        assert cmd.callback is not None
        assert cmd.callback.__module__ in modules, name
        if isinstance(cmd, click.Group):
            for sub in cmd.commands.values():
                assert sub.callback is not None and sub.callback.__module__ in modules


def test_help_does_not_import_the_engine() -> None:
    code = (
        "import sys\n"
        "from memstore.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('memstore.store', 'sqlalchemy', 'numpy', 'openai') "
        "if m in sys.modules]\n"
        "print('HEAVY', heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "Commands:" in out.stdout and "serve" in out.stdout
    assert "HEAVY []" in out.stdout, out.stdout


def test_db_before_or_after_the_command_and_memstore_user(
    cli_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = tmp_path / "other.db"
    r = run_cli("--db", str(other), "capture", "--user", "u", "--session", "s",
                "--user-text", "I love green tea")  # fmt: skip
    assert r.exit_code == 0, r.output
    assert other.exists() and not cli_env.exists()
    monkeypatch.setenv("MEMSTORE_USER", "u")
    before = run_cli("--db", str(other), "search", "conversations", "tea", "--json")
    after = run_cli("search", "conversations", "tea", "--json", "--db", str(other))
    assert before.exit_code == after.exit_code == 0
    assert json.loads(before.stdout)[0]["text"] == "I love green tea"
    assert before.stdout == after.stdout


def test_users_list_with_counts_and_headers(cli_env: Path) -> None:
    for user, text in (("ann", "I love tea"), ("ann", "I live in Oslo"), ("ben", "I love chess")):
        run_cli("capture", "--user", user, "--session", "s", "--user-text", text,
                "--assistant-text", "ok")  # fmt: skip
    r = run_cli("users", "list")
    assert r.exit_code == 0
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["USER", "SESSIONS", "MESSAGES", "MEMORIES", "LAST", "MESSAGE"]
    assert lines[1].split()[:4] == ["ann", "1", "4", "0"]
    assert lines[2].split()[:4] == ["ben", "1", "2", "0"]
    data = json.loads(run_cli("users", "list", "--json").stdout)
    assert [u["user_id"] for u in data] == ["ann", "ben"]


@pytest.mark.parametrize(
    "args",
    [
        ["search", "conversations", "x", "--user", "u"],
        ["search", "memories", "x", "--user", "u"],
        ["memories", "list", "--user", "u"],
        ["scenes", "list", "--user", "u"],
        ["persona", "show", "--user", "u"],
        ["recall", "x", "--user", "u"],
        ["events", "tail"],
        ["projections", "status"],
        ["pipeline", "status"],
        ["users", "list"],
        ["export", "--all"],
        ["reindex"],
    ],
    ids=lambda a: " ".join(a[:2]),
)
def test_reading_commands_never_create_a_database(tmp_path: Path, args: list[str]) -> None:
    missing = tmp_path / "not" / "there.db"
    r = run_cli("--db", str(missing), *args)
    assert r.exit_code == 1
    assert str(missing) in r.stderr and "nothing was created" in r.stderr
    assert not missing.parent.exists()


def test_doctor_prints_lines_and_fails_on_a_mismatched_vector_space(
    cli_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    r = run_cli("doctor")
    assert r.exit_code == 0, r.output
    assert "does not exist yet" in r.stdout and not cli_env.exists()
    assert "{" not in r.stdout and r.stdout.rstrip().endswith("ok")
    run_cli("capture", "--user", "u", "--session", "s", "--user-text", "I love tea")
    run_cli("reindex")
    r = run_cli("doctor")
    assert r.exit_code == 0 and "l0: dims 384, ready yes, pending 0" in r.stdout
    assert "{" not in r.stdout
    # The configured embedder changes: the vectors on disk are another model's.
    monkeypatch.setenv("MEMSTORE_EMBEDDER", "openai")
    monkeypatch.setenv("MEMSTORE_EMBED_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("MEMSTORE_EMBED_MODEL", "other-model")
    monkeypatch.setenv("MEMSTORE_EMBED_DIMENSIONS", "384")
    r = run_cli("doctor")
    assert r.exit_code == 1
    assert "built with hashing" in r.stderr and "memstore reindex" in r.stderr


def test_limit_must_be_a_positive_integer(cli_env: Path) -> None:
    run_cli("capture", "--user", "u", "--session", "s", "--user-text", "I love tea")
    for bad in ("0", "-3", "abc", "21"):
        r = run_cli("search", "conversations", "tea", "--user", "u", "--limit", bad)
        assert r.exit_code == 2 and "--limit" in r.stderr, bad
    assert run_cli("events", "tail", "-n", "0").exit_code == 2
    r = run_cli("search", "conversations", "tea", "--user", "u", "--limit", "1")
    assert r.exit_code == 0
    assert r.stdout.splitlines()[0].split() == ["SCORE", "TIME", "SESSION", "ID", "TEXT"]
