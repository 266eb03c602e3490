"""``--db`` takes a file path or a PostgreSQL URL, the same commands on both."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from memstore.cli import cli
from memstore.errors import InvalidInputError


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory of its own: nothing may appear in it."""
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("MEMSTORE_EMBEDDER", "hashing")
    monkeypatch.setenv("MEMSTORE_CONFIG", str(tmp_path / "none.toml"))
    return work


def _ok(*args: str) -> str:
    r = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return r.output


def test_commands_take_the_store_from_db(target: str, in_tmp: Path, backend: str) -> None:
    db = ["--db", target]
    _ok("capture", *db, "--user", "alice", "--session", "s1", "--user-text", "I like green tea")
    _ok("reindex", *db)
    for strategy in ("keyword", "vector", "hybrid"):
        out = _ok(
            "search", "conversations", "green tea", *db, "--user", "alice",
            "--strategy", strategy, "--json",
        )  # fmt: skip
        assert json.loads(out)[0]["text"] == "I like green tea", strategy
    # Before the command, as the root option, too.
    assert "l0.captured" in _ok(*db, "events", "tail", "-n", "1")
    assert "head" in _ok("db", "current", *db)
    report = json.loads(_ok("doctor", *db, "--json"))
    assert report["schema_revision"] == report["schema_head"]
    if backend == "postgresql":
        assert report["pgvector"].startswith("pgvector ") and "postgresql" in report
    assert list(in_tmp.iterdir()) == []


def test_memstore_db_may_hold_a_url(
    target: str, in_tmp: Path, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMSTORE_DB", target)
    _ok("capture", "--user", "bob", "--session", "s", "--user-text", "My dog is called Rex")
    out = _ok("search", "conversations", "Rex", "--user", "bob", "--strategy", "keyword", "--json")
    assert json.loads(out)[0]["text"] == "My dog is called Rex"
    assert list(in_tmp.iterdir()) == []


@pytest.mark.parametrize(
    "url",
    ["mysql://u@h/db", "redis://localhost:6379/0", "sqlite://relative.db", "postgresql:/h/db"],
)
def test_an_unsupported_url_is_a_usage_error_that_creates_nothing(
    url: str, in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for args in (
        ["--db", url, "events", "tail"],
        ["events", "tail", "--db", url],
        ["capture", "--db", url, "--user", "a", "--session", "s", "--user-text", "x"],
        ["demo", "--db", url],
    ):
        r = CliRunner().invoke(cli, args)
        assert r.exit_code == 2, (args, r.output)
        assert "--db" in r.output and "Traceback" not in r.output
    monkeypatch.setenv("MEMSTORE_DB", url)
    r = CliRunner().invoke(cli, ["events", "tail"])
    assert r.exit_code != 0 and isinstance(r.exception, InvalidInputError), r.output
    assert list(in_tmp.iterdir()) == [] and not os.path.exists("/mysql:")


def test_hermes_install_refuses_a_url(in_tmp: Path, tmp_path: Path) -> None:
    r = CliRunner().invoke(
        cli,
        ["hermes", "install", "--hermes-home", str(tmp_path / "h"), "--db", "postgresql://h/db"],
    )
    assert r.exit_code == 2 and "MEMSTORE_DB" in r.output
    assert not (tmp_path / "h").exists()


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_bench_scale_db_prints_both_backends(backend: str, in_tmp: Path, tmp_path: Path) -> None:
    from tests.backends import pg_admin_url

    url = pg_admin_url()
    assert url is not None
    keep = tmp_path / "kept"
    args = [
        "bench", "scale", "--db", url, "--layout", "2x20,40", "--queries", "5", "--turns", "5",
        "--sessions", "1", "--keep", str(keep),
    ]  # fmt: skip
    out = _ok(*args, "--json", str(tmp_path / "r.json"))
    assert "| bytes per message" in out and "| PostgreSQL |" in out.replace("  ", " ")
    res = json.loads((tmp_path / "r.json").read_text())
    assert sorted(res["runs"]) == [
        "postgresql 1x40",
        "postgresql 2x20",
        "sqlite 1x40",
        "sqlite 2x20",
    ]
    for name, run in res["runs"].items():
        assert run["build"]["messages"] == 40 and not run["build"].get("reused")
        assert run["build"]["reindex"]["rows"] == 40
        assert run["rebuild_events"] >= 2
        if name.endswith("2x20"):
            assert run["derive"]["failed"] == 0 and run["derive"]["memories"] > 0
    # The second run measures copies of the kept stores, built once.
    again = _ok(*args, "--sessions", "0", "--json", str(tmp_path / "r2.json"))
    assert again.count("(kept build reused)") == 4
    res2 = json.loads((tmp_path / "r2.json").read_text())
    assert all(r["build"]["reused"] for r in res2["runs"].values())
    import psycopg

    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://")) as conn:
        names = [r[0] for r in conn.execute("SELECT datname FROM pg_database").fetchall()]
        # Scratch copies are gone; the two kept builds stay (dropped here).
        scratch = [r["scratch_database"] for r in [*res["runs"].values(), *res2["runs"].values()]
                   if "scratch_database" in r]  # fmt: skip
        assert len(scratch) == 4 and not set(scratch) & set(names)
        kept = [n for n in names if n.startswith("scale_")]
        assert len(kept) >= 2
    for rec in keep.glob("scale-*.json"):
        name = f"scale_{rec.stem.removeprefix('scale-')}"
        if name in kept:
            with psycopg.connect(
                url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True
            ) as conn:
                conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
