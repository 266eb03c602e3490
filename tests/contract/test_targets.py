"""What ``Store.open`` / ``MEMSTORE_DB`` accept: a file path or a PostgreSQL URL.
Any other URL is an error and never becomes a local file or folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from memstore import Settings
from memstore.db.target import parse
from memstore.errors import InvalidInputError, StorageError
from memstore.store import Store

SETTINGS = Settings().replace(embedder="hashing", scheduler=False, background_indexer=False)


@pytest.mark.parametrize(
    "url",
    [
        "mysql://u@h/db",
        "http://example.com/x.db",
        "postgresql+asyncpg://u@h/db",
        "postgresql+psycopg2://u@h/db",
        "redis://localhost:6379/0",
        "sqlite://relative-without-third-slash",
    ],
)
def test_unsupported_urls_are_refused_and_create_nothing(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidInputError, match="URL"):
        Store.open(url, settings=SETTINGS)
    # A URL folded by Path ("x://h" -> "x:/h") is refused as well.
    with pytest.raises(InvalidInputError, match="URL"):
        Store.open(Path(url), settings=SETTINGS)
    monkeypatch.setenv("MEMSTORE_DB", url)
    with pytest.raises(InvalidInputError, match="URL"):
        Store.open(settings=SETTINGS)
    assert os.listdir(tmp_path) == []


def test_postgres_spellings_and_sqlite_urls() -> None:
    for url in ("postgresql://u@h:5/d", "postgres://u@h:5/d", "postgresql+psycopg://u@h:5/d"):
        assert parse(url).url == "postgresql+psycopg://u@h:5/d"
    assert parse("sqlite:///rel/x.db").path == Path("rel/x.db")
    assert parse("sqlite:////abs/x.db").path == Path("/abs/x.db")
    assert parse("C:/data/x.db").path is not None  # a drive letter is not a scheme
    assert parse("plain/file.db").path == Path("plain/file.db")


def test_an_unreachable_server_is_a_storage_error_without_the_password(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    # Port 9 (discard) on loopback: nothing listens there.
    with pytest.raises(StorageError) as err:
        Store.open("postgresql://memstore:s3cret@127.0.0.1:9/nothing", settings=SETTINGS)
    assert "s3cret" not in str(err.value) and "***" in str(err.value)
    assert os.listdir(tmp_path) == []


def test_memstore_db_may_hold_a_postgres_url(monkeypatch: pytest.MonkeyPatch) -> None:
    from memstore.db.connect import resolve

    monkeypatch.setenv("MEMSTORE_DB", "postgres://u@h:5/d")
    assert resolve(None).url == "postgresql+psycopg://u@h:5/d"


def test_the_command_line_creates_no_files_for_a_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A PostgreSQL URL is a server to connect to (here none answers), any
    other scheme a usage error; neither becomes a file or folder."""
    from click.testing import CliRunner

    from memstore.cli import cli
    from memstore.errors import StorageError

    monkeypatch.chdir(tmp_path)
    args = ["capture", "--user", "u", "--session", "s", "--user-text", "hi"]
    res = CliRunner().invoke(cli, ["--db", "postgresql://u@127.0.0.1:9/d", *args])
    assert isinstance(res.exception, StorageError) and "cannot open" in str(res.exception)
    res = CliRunner().invoke(cli, ["--db", "mysql://u@h/db", *args])
    assert res.exit_code == 2 and "unsupported database URL scheme 'mysql'" in res.output
    assert os.listdir(tmp_path) == []
