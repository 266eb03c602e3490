"""Migrations never destroy data unasked, and never leave projections stale
(defect 4)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from memstore import Settings
from memstore.cli import cli, main
from memstore.db import migrate
from memstore.db.engine import SqliteDatabase
from memstore.errors import MigrationError
from memstore.store import Store, default_projections


def _owners() -> dict[str, str]:
    """Which projection owns which table: what ``Store.open`` tells the migrations."""
    return migrate.projection_tables(default_projections())


def _settings() -> Settings:
    return Settings().replace(embedder="hashing", scheduler=False, background_indexer=False)


def _fill(db_path: Path) -> int:
    with Store.open(db_path, settings=_settings()) as store:
        store.capture_turn("alice", "s1", "I moved to Lisbon and I am vegetarian", "Noted")
        store.capture_turn("alice", "s1", "My sister Ana plays the cello", "Nice")
        store.end_session("alice", "s1")
        store.reindex()
        return store.event_count()


def _events(db_path: Path) -> int:
    db = SqliteDatabase(db_path)
    try:
        with db.read() as conn:
            return int(conn.exec_driver_sql("SELECT count(*) FROM events").scalar_one())
    finally:
        db.close()


def test_downgrade_to_base_refuses_to_drop_the_log(db_path: Path) -> None:
    n = _fill(db_path)
    db = SqliteDatabase(db_path)
    try:
        with pytest.raises(MigrationError, match=r"events \(\d+ rows\).*--yes"):
            migrate.downgrade(db, "base", owners=_owners())
        assert migrate.current_revision(db) == migrate.head_revision()  # nothing changed
    finally:
        db.close()
    assert _events(db_path) == n
    with Store.open(db_path, settings=_settings()) as store:
        assert store.search_conversations("alice", "Lisbon", strategy="keyword")


def test_cli_downgrade_needs_yes(db_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _fill(db_path)
    with pytest.raises(SystemExit) as refused:
        main(["db", "downgrade", "base", "--db", str(db_path)])
    assert refused.value.code == 1
    assert "--yes" in capsys.readouterr().err
    assert _events(db_path) > 0
    res = CliRunner().invoke(cli, ["db", "downgrade", "base", "--yes", "--db", str(db_path)])
    assert res.exit_code == 0, res.output
    assert "at base" in res.output
    db = SqliteDatabase(db_path)
    try:
        assert migrate.current_revision(db) is None
    finally:
        db.close()


@pytest.mark.parametrize("revision", ["0001", "0002", "0004", "0005", "0006"])
def test_down_and_up_again_rebuilds_what_was_dropped(db_path: Path, revision: str) -> None:
    _fill(db_path)
    with Store.open(db_path, settings=_settings()) as store:
        before_msgs = [h.text for h in store.search_conversations("alice", "cello")]
        before_mem = sorted(m["content"] for m in store.list_memories("alice"))
        before_status = store.pipeline_status("alice")
    assert before_msgs and before_mem
    db = SqliteDatabase(db_path)
    try:
        migrate.downgrade(
            db, revision, owners=_owners()
        )  # only rebuildable tables: no confirmation
        stale = migrate.upgrade(db, owners=_owners())
        assert stale  # the dropped projections lost their checkpoints
    finally:
        db.close()
    with Store.open(db_path, settings=_settings()) as store:
        assert all(s.lag == 0 and s.position > 0 for s in store.projection_status())
        store.reindex()
        assert [h.text for h in store.search_conversations("alice", "cello")] == (before_msgs)
        assert sorted(m["content"] for m in store.list_memories("alice")) == before_mem
        # Timers come back from the reconciler once a scheduler runs; the
        # state they are armed from is rebuilt here.
        assert _without_timers(store.pipeline_status("alice")) == _without_timers(before_status)


def _without_timers(status: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # ``next_run_at`` counts the timers too.
    return [{k: v for k, v in u.items() if k not in ("l2_timer", "next_run_at")} for u in status]


def test_status_is_honest_between_migration_and_open(db_path: Path) -> None:
    _fill(db_path)
    db = SqliteDatabase(db_path)
    try:
        migrate.downgrade(db, "0001", owners=_owners())
        migrate.upgrade(db, owners=_owners())
        with db.read() as conn:
            names = {r[0] for r in conn.exec_driver_sql("SELECT name FROM projection_checkpoints")}
    finally:
        db.close()
    assert "l0_messages" not in names  # no checkpoint: behind the log, not "lag 0"
