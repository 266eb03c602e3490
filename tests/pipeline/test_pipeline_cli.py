"""``memstore pipeline status|run``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from memstore.cli import cli
from memstore.pipeline import PipelineService
from tests.pipeline_support import FakeDeriver, capture, open_store


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MEMSTORE_CONFIG", str(tmp_path / "none.toml"))
    monkeypatch.setenv("MEMSTORE_EMBEDDER", "hashing")


def test_status_and_run_on_an_empty_database(tmp_path: Path) -> None:
    db = str(tmp_path / "m.db")
    # Reading commands never create a database: a missing one is an error.
    r = CliRunner().invoke(cli, ["pipeline", "status", "--db", db])
    assert r.exit_code == 1 and not Path(db).exists()
    open_store(Path(db)).close()
    r = CliRunner().invoke(cli, ["pipeline", "status", "--db", db])
    assert r.exit_code == 0, r.output
    assert "no pipeline state" in r.output
    r = CliRunner().invoke(cli, ["pipeline", "status", "--db", db, "--json"])
    assert json.loads(r.output) == []
    r = CliRunner().invoke(cli, ["pipeline", "run", "--db", db, "--user", "u"])
    assert r.exit_code == 0 and "nothing due" in r.output


def test_status_shows_pending_sessions(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    store = open_store(path)
    svc = PipelineService(store._derivation, deriver=FakeDeriver())
    capture(store, svc, "alice", "s1")
    svc.stop()
    store.close()
    r = CliRunner().invoke(cli, ["pipeline", "status", "--db", str(path), "--user", "alice"])
    assert r.exit_code == 0, r.output
    assert "user alice" in r.output and "session s1: 1/1 rounds" in r.output
    assert "queued l1 s1" in r.output


def test_help_has_examples() -> None:
    for cmd in (["pipeline"], ["pipeline", "status"], ["pipeline", "run"]):
        r = CliRunner().invoke(cli, [*cmd, "--help"])
        assert r.exit_code == 0 and "Example:" in r.output
