from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from memstore.cli import cli
from tests.porting_support import cli_env, run_cli

__all__ = ["cli_env"]

ROOT = Path(__file__).resolve().parents[2]


def _walk(
    cmd: click.Command, path: tuple[str, ...] = ()
) -> list[tuple[tuple[str, ...], click.Command]]:
    out = [(path, cmd)]
    if isinstance(cmd, click.Group):
        for name, sub in cmd.commands.items():
            out += _walk(sub, (*path, name))
    return out


@pytest.mark.parametrize(
    ("path", "cmd"), _walk(cli), ids=lambda v: " ".join(v) if isinstance(v, tuple) else ""
)
def test_every_command_has_help_with_an_example(path: tuple[str, ...], cmd: click.Command) -> None:
    res = CliRunner().invoke(cli, [*path, "--help"])
    assert res.exit_code == 0, res.output
    assert "Example" in res.output, f"`memstore {' '.join(path)} --help` shows no example"
    assert (cmd.help or "").strip(), "command has no help text"


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        MEMSTORE_DB=str(tmp_path / "cli.db"),
        MEMSTORE_EMBEDDER="hashing",
        MEMSTORE_CONFIG=str(tmp_path / "none.toml"),
        PYTHONPATH=str(ROOT),
    )
    return env


def _subprocess(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``python -m memstore`` in a fresh process: for what only a real process
    shows (the entry point, import-time failures, a clean stderr)."""
    return subprocess.run(
        [sys.executable, "-m", "memstore", *args],
        env=_env(tmp_path) | env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@dataclass
class _Ran:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def _run(cli_env: Path) -> Callable[..., _Ran]:
    """The CLI in this process (``memstore.cli.main``, the entry point's own
    error handling), with the same environment ``_subprocess`` gives: the
    behaviour under test does not depend on a process boundary, and a fresh
    interpreter per command costs seconds."""

    def run(_tmp_path: Path, *args: str) -> _Ran:
        r = run_cli(*args)
        return _Ran(r.exit_code, r.stdout, r.stderr)

    return run


def test_capture_search_tail_rebuild_from_the_cli(
    tmp_path: Path, _run: Callable[..., _Ran]
) -> None:
    r = _run(
        tmp_path,
        "capture",
        "--user",
        "alice",
        "--session",
        "s1",
        "--user-text",
        "I like green tea",
        "--assistant-text",
        "ok",
        "--json",
    )
    assert r.returncode == 0, r.stderr
    assert len(json.loads(r.stdout)["stored"]) == 2
    r = _run(
        tmp_path, "capture", "--user", "alice", "--session", "s1", "--user-text", "我每天早上喝咖啡"
    )
    assert r.returncode == 0, r.stderr
    for strategy in ("keyword", "vector", "hybrid"):
        if strategy != "keyword":
            assert _run(tmp_path, "reindex").returncode == 0
        r = _run(
            tmp_path,
            "search",
            "conversations",
            "咖啡",
            "--user",
            "alice",
            "--strategy",
            strategy,
            "--json",
        )
        assert r.returncode == 0, r.stderr
        hits = json.loads(r.stdout)
        assert hits[0]["text"] == "我每天早上喝咖啡"
    r = _run(tmp_path, "search", "conversations", "tea", "--user", "bob", "--json")
    assert json.loads(r.stdout) == []
    r = _run(tmp_path, "events", "tail", "-n", "5", "--json")
    assert [e["type"] for e in json.loads(r.stdout)] == ["l0.captured", "l0.captured"]
    r = _run(tmp_path, "projections", "rebuild", "--all")
    assert r.returncode == 0 and "replayed 2 events" in r.stdout
    r = _run(tmp_path, "projections", "status", "--json")
    assert all(p["lag"] == 0 for p in json.loads(r.stdout))
    r = _run(tmp_path, "db", "current")
    assert "current:" in r.stdout


def test_errors_are_one_clear_line_without_traceback(
    tmp_path: Path, _run: Callable[..., _Ran]
) -> None:
    # A real process: the installed entry point prints one line, no traceback.
    r = _subprocess(tmp_path, "capture", "--user", " ", "--session", "s", "--user-text", "x")
    assert r.returncode == 1
    assert r.stderr.strip() == "error: user_id must not be empty"
    # The same handling (memstore.cli.main) for another command, in-process.
    r = _run(tmp_path, "projections", "rebuild", "nonexistent")
    assert r.returncode == 1 and "Traceback" not in r.stderr and "no projection named" in r.stderr


def test_doctor_reports_and_fails_without_sqlite_vec(
    tmp_path: Path, _run: Callable[..., _Ran]
) -> None:
    r = _run(tmp_path, "doctor", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads(r.stdout)
    assert report["sqlite_vec"].startswith("v") and report["fts5"] is True
    assert report["embedder"]["model_id"] == "hashing-v1-384"
    # A real process: the installed entry point fails cleanly without sqlite-vec.
    r = _subprocess(tmp_path, "doctor", MEMSTORE_SQLITE_MODULE="sqlite_module_that_does_not_exist")
    assert r.returncode == 1 and "sqlite-vec" in r.stderr and "Traceback" not in r.stderr


def test_demo_runs_offline_through_every_layer(tmp_path: Path, _run: Callable[..., _Ran]) -> None:
    r = _run(tmp_path, "demo", "--db", str(tmp_path / "demo.db"))
    assert r.returncode == 0, r.stderr
    out = r.stdout
    for heading in ("L0:", "L1:", "L2:", "L3: persona", "recall for:"):
        assert heading in out
    recall = out.split("recall for:")[1]
    assert "<relevant-memories>" in recall and "Munich" in recall
    assert "offline rule-based deriver" in out
