"""Credentials in endpoint URLs are never stored, logged, printed or used as an
identity: a whole run through the CLI with a password in the LLM URL and in
the embeddings URL, then a grep of every table, every byte of the database
files, every CLI output and every log record for the passwords."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from memstore.db.driver import load_vec, sqlite_module
from tests.fakeopenai import FakeOpenAI
from tests.porting_support import run_cli

LLM_SECRET = "S3cretPassw0rd"
EMBED_SECRET = "EmbPw1Secret"
ROTATED = "EmbPw2Rotated"
SECRETS = (LLM_SECRET, EMBED_SECRET, ROTATED)


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(embed_dim=32) as f:
        yield f


def _with_password(url: str, user: str, password: str) -> str:
    return url.replace("http://", f"http://{user}:{password}@", 1)


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake: FakeOpenAI) -> Path:
    db = tmp_path / "secret.db"
    values = {
        "MEMSTORE_DB": str(db),
        "MEMSTORE_CONFIG": str(tmp_path / "none.toml"),
        "MEMSTORE_SCHEDULER": "0",
        "MEMSTORE_EMBEDDER": "openai",
        "MEMSTORE_EMBED_BASE_URL": _with_password(fake.base_url, "k", EMBED_SECRET),
        "MEMSTORE_EMBED_MODEL": "fake-embed",
        # Nothing listens on port 1: every derivation fails, quoting its endpoint.
        "MEMSTORE_LLM_BASE_URL": f"http://bob:{LLM_SECRET}@127.0.0.1:1/v1",
        "MEMSTORE_LLM_MODEL": "fake-model",
        "MEMSTORE_LLM_MAX_RETRIES": "0",
        "MEMSTORE_LLM_TIMEOUT_S": "2",
    }
    for k, v in values.items():
        monkeypatch.setenv(k, v)
    return db


def _cli(*args: str) -> str:
    out = run_cli(*args)
    return out.output


def _tables(db: Path) -> dict[str, list[tuple[object, ...]]]:
    con = sqlite_module().connect(str(db))
    load_vec(con)
    try:
        names = [
            r[0]
            for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            if not r[0].startswith("sqlite_")
        ]
        out = {}
        for name in names:
            out[name] = list(con.execute(f'SELECT * FROM "{name}"'))
        return out
    finally:
        con.close()


def _assert_clean(what: str, text: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"{secret} in {what}: {text[:400]}"


def test_no_secret_in_tables_files_outputs_or_logs(
    env: Path, fake: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    outputs: dict[str, str] = {}
    outputs["capture"] = _cli(
        "capture", "--user", "alice", "--session", "s1",
        "--user-text", "I live in Porto and I row on Sundays", "--assistant-text", "Noted.",
    )  # fmt: skip
    outputs["pipeline run"] = _cli("pipeline", "run", "--user", "alice", "--json")
    assert "LLMError" in outputs["pipeline run"]  # the run did fail, quoting its endpoint
    assert "127.0.0.1:1" in outputs["pipeline run"]
    outputs["reindex"] = _cli("reindex")
    assert fake.embedding_requests(), "nothing was embedded"
    for args in (
        ("doctor",), ("doctor", "--json"), ("events", "tail", "-n", "50"),
        ("events", "tail", "-n", "50", "--json"), ("pipeline", "status"),
        ("pipeline", "status", "--json"), ("search", "--user", "alice", "Porto"),
        ("recall", "--user", "alice", "where do I live"), ("users", "list", "--json"),
    ):  # fmt: skip
        outputs[" ".join(args)] = _cli(*args)
    assert "fake-embed" in outputs["doctor --json"]

    for what, text in outputs.items():
        _assert_clean(f"`memstore {what}`", text)
    for record in caplog.records:
        _assert_clean(f"log {record.name}", record.getMessage())
    for name, rows in _tables(env).items():
        _assert_clean(f"table {name}", repr(rows))
    for path in env.parent.iterdir():
        if path.name.startswith(env.name):
            data = path.read_bytes()
            for secret in SECRETS:
                assert secret.encode() not in data, f"{secret} in the bytes of {path.name}"


def test_a_rotated_embedding_password_re_embeds_nothing(
    env: Path, fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    _cli("capture", "--user", "alice", "--session", "s1", "--user-text", "I row on Sundays")
    assert _cli("reindex").startswith("embedded 1 row")
    spaces_before = _tables(env)["vector_spaces"]
    sent = len(fake.embedding_requests())
    monkeypatch.setenv("MEMSTORE_EMBED_BASE_URL", _with_password(fake.base_url, "k", ROTATED))
    assert _cli("reindex").startswith("embedded 0 row")
    assert len(fake.embedding_requests()) == sent  # nothing sent again
    assert _tables(env)["vector_spaces"] == spaces_before
    report = json.loads(_cli("doctor", "--json"))
    status = report["embeddings"]
    assert status["l0"]["pending"] == 0 and status["l0"]["ready"]
    assert ROTATED not in json.dumps(report) and EMBED_SECRET not in json.dumps(report)


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("http://bob:pw@127.0.0.1:1/v1", "http://bob:***@127.0.0.1:1/v1"),
        (
            "LLM l1: https://u:p@h/v1 (model m) failed",
            "LLM l1: https://u:***@h/v1 (model m) failed",
        ),
        ("postgresql+psycopg://u:pw@db:5432/x", "postgresql+psycopg://u:***@db:5432/x"),
        ("https://sk-abc123@h/v1", "https://***@h/v1"),
        ("https://h/v1?api_key=abc&x=1", "https://h/v1?api_key=***&x=1"),
        ("mail me at bob@example.org", "mail me at bob@example.org"),
        ("no url here", "no url here"),
    ],
)
def test_redact(raw: str, shown: str) -> None:
    from memstore.redact import redact

    assert redact(raw) == shown


def test_a_database_url_keeps_its_user_name() -> None:
    from memstore.db.target import safe_url

    assert (
        safe_url("postgresql+psycopg://memstore@h:1/db") == "postgresql+psycopg://memstore@h:1/db"
    )
    assert safe_url("postgresql+psycopg://u:pw@h:1/db") == "postgresql+psycopg://u:***@h:1/db"


def test_strip_credentials_is_the_endpoint_identity() -> None:
    from memstore.redact import strip_credentials

    a = strip_credentials("http://k:pw1@127.0.0.1:8000/v1?api_key=z&x=1")
    b = strip_credentials("http://k:pw2@127.0.0.1:8000/v1?api_key=y&x=1")
    assert a == b == "http://127.0.0.1:8000/v1?x=1"
