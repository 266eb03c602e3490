"""The one-time scrub (migration 0023_scrub), on both backends: a store that an
older version left with endpoint passwords in its failure events, failure
rows and vector space names comes out of ``upgrade`` with none, keeps its
vectors (a rotated password re-embeds nothing) and rebuilds to the same
failure rows."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import inspect, text

from memstore import Settings
from memstore.db import migrate
from memstore.db.connect import open_database
from memstore.derive.events import RunFailed, derive_stream
from memstore.events.log import NewEvent
from memstore.store import Store, default_projections
from tests.fakeopenai import FakeOpenAI

OLD = "OldPassw0rdLeak"
ROTATED = "NewPassw0rd2"


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(embed_dim=32) as f:
        yield f


def _settings(fake: FakeOpenAI, password: str) -> Settings:
    return Settings().replace(
        scheduler=False,
        background_indexer=False,
        embedder="openai",
        embed_base_url=fake.base_url.replace("http://", f"http://k:{password}@"),
        embed_model="fake-embed",
    )


def _dump(target: str) -> dict[str, list[Any]]:
    db = open_database(target)
    try:
        with db.read() as conn:
            names = [n for n in inspect(conn).get_table_names() if not n.startswith("sqlite_")]
            return {n: list(conn.execute(text(f'SELECT * FROM "{n}"'))) for n in names}
    finally:
        db.close()


def _leave_old_secrets(store: Store) -> str:
    """What versions before the scrub wrote: the URL with its password in a
    failure's error text and in the embedding model id."""
    error = (
        f"LLMError: LLM l1_extract: http://bob:{OLD}@127.0.0.1:1/v1 (model m) unreachable "
        f"(key=sk-{OLD})"
    )
    store.append(
        [NewEvent(derive_stream("alice"), RunFailed("l1", "s1", error, 1, "run-1"), "alice")]
    )
    clean = store._embedder.model_id if store._embedder else ""
    assert clean.startswith("openai:")
    leaky = clean.replace("openai:", f"openai:k:{OLD}@", 1)
    with store._db.write() as conn:
        for kind in ("l0", "l1"):
            conn.execute(
                text("UPDATE vector_spaces SET name = :n, model_id = :m WHERE name = :o"),
                {"n": f"{kind}:{leaky}", "m": leaky, "o": f"{kind}:{clean}"},
            )
            conn.execute(
                text("UPDATE vector_index SET space = :n WHERE space = :o"),
                {"n": f"{kind}:{leaky}", "o": f"{kind}:{clean}"},
            )
        conn.execute(
            text("UPDATE embedding_cache SET model_id = :m WHERE model_id = :o"),
            {"m": leaky, "o": clean},
        )
    return error


def test_upgrade_scrubs_old_secrets_and_keeps_the_vectors(target: str, fake: FakeOpenAI) -> None:
    with Store.open(target, settings=_settings(fake, OLD)) as store:
        store.capture("alice", "s1", [{"role": "user", "content": "I row on Sundays in Porto"}])
        assert store.reindex() >= 1
        _leave_old_secrets(store)
        assert OLD in repr(_dump(target)), "the test did not plant the old secrets"
        failures_before = len(store.read_events(types=[RunFailed.TYPE]))

    owners = migrate.projection_tables(default_projections())
    db = open_database(target)
    try:
        migrate.downgrade(db, "0021_capture", owners=owners)
        migrate.upgrade(db, owners=owners)
        assert migrate.current_revision(db) == migrate.head_revision()
    finally:
        db.close()

    dump = _dump(target)
    for name, rows in dump.items():
        assert OLD not in repr(rows), f"{OLD} left in {name}"
    assert any("bob:***@127.0.0.1:1" in repr(r) for r in dump["derive_failures"])

    sent = len(fake.embedding_requests())
    with Store.open(target, settings=_settings(fake, ROTATED)) as store:
        events = store.read_events(types=[RunFailed.TYPE])
        assert len(events) == failures_before  # rewritten in place, none lost
        error = events[-1].payload.error  # type: ignore[attr-defined]
        assert "http://bob:***@127.0.0.1:1/v1" in error and "key=***" in error
        assert store.reindex() == 0  # same endpoint, new password: nothing re-embedded
        status = store.embedding_status()
        assert status["l0"]["pending"] == 0 and status["l0"]["ready"]
        rows_before = _dump(target)["derive_failures"]
        store.rebuild()
        assert _dump(target)["derive_failures"] == rows_before
    assert len(fake.embedding_requests()) == sent
    for name, rows in _dump(target).items():
        assert ROTATED not in repr(rows), f"{ROTATED} in {name}"


# Bytes in files: SQLite only (PostgreSQL's VACUUM is checked by the erasure tests).
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_sqlite_file_bytes_hold_no_old_secret_after_the_next_open(
    backend: str, target: str, fake: FakeOpenAI
) -> None:
    from pathlib import Path

    with Store.open(target, settings=_settings(fake, OLD)) as store:
        store.capture("alice", "s1", [{"role": "user", "content": "I row on Sundays"}])
        store.reindex()
        _leave_old_secrets(store)
    owners = migrate.projection_tables(default_projections())
    db = open_database(target)
    try:
        migrate.downgrade(db, "0021_capture", owners=owners)
        migrate.upgrade(db, owners=owners)
    finally:
        db.close()
    with Store.open(target, settings=_settings(fake, ROTATED)):
        pass  # the open finishes the compaction the scrub asked for
    for path in Path(target).parent.iterdir():
        if path.name.startswith(Path(target).name):
            assert OLD.encode() not in path.read_bytes(), path.name


def test_a_live_run_records_no_secret(target: str, fake: FakeOpenAI) -> None:
    settings = _settings(fake, OLD).replace(
        llm_base_url=f"http://bob:{OLD}@127.0.0.1:1/v1",
        llm_model="m",
        llm_max_retries=0,
        llm_timeout_s=2.0,
    )
    with Store.open(target, settings=settings) as store:
        store.capture("alice", "s1", [{"role": "user", "content": "I row on Sundays"}])
        store.end_session("alice", "s1", timeout_s=10)
        outcomes = store.run_pipeline("alice")
        store.reindex()
        shown = repr((outcomes, store.pipeline_status("alice"), store.embedding_status()))
        failures = store.read_events(types=[RunFailed.TYPE])
    assert failures, "the LLM run did not fail"
    assert "127.0.0.1:1" in repr([e.payload for e in failures])
    assert OLD not in shown
    for name, rows in _dump(target).items():
        assert OLD not in repr(rows), f"{OLD} in {name}"


# PostgreSQL only: a SQLite file has no password.
@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_a_database_password_is_in_no_output_and_no_table(
    backend: str, target: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    from tests.porting_support import run_cli

    secret = "PgUrlSecret9"
    # The test server trusts local connections: the password is sent, not needed.
    url = target.replace("://memstore@", f"://memstore:{secret}@", 1)
    assert secret in url
    monkeypatch.setenv("MEMSTORE_EMBEDDER", "hashing")
    monkeypatch.setenv("MEMSTORE_SCHEDULER", "0")
    caplog.set_level(logging.DEBUG)
    outputs = [
        run_cli("--db", url, "capture", "--user", "a", "--session", "s", "--user-text", "hi"),
        run_cli("--db", url, "pipeline", "run", "--json"),
        run_cli("--db", url, "pipeline", "status", "--json"),
        run_cli("--db", url, "doctor", "--json"),
        run_cli("--db", url, "events", "tail", "--json"),
        run_cli("--db", url.replace("/mt_", "/no_such_db_"), "doctor"),
    ]
    assert outputs[0].exit_code == 0, outputs[0].output
    for out in outputs:
        assert secret not in out.output
    assert all(secret not in r.getMessage() for r in caplog.records)
    for name, rows in _dump(target).items():
        assert secret not in repr(rows), f"{secret} in {name}"
