"""Imports never resurrect: an upstream data directory's ``vectors.db`` says
which L1 records the upstream still serves (merged and deleted ones stay
out), and data of a user erased here is not brought back by any import
format without ``--allow-erased``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memstore import Settings, Store
from memstore.errors import InvalidInputError
from memstore.porting.report import ImportReport
from memstore.porting.upstream import read_upstream
from memstore.porting.upstream_apply import import_upstream
from tests.backends import Targets
from tests.porting_support import (
    DELETED,
    MERGED,
    MERGED_INTO,
    build_upstream_dir,
    cli_env,
    run_cli,
    with_gone_records,
)

pytestmark = pytest.mark.both_backends

__all__ = ["cli_env"]


def _open(db: Path) -> Store:
    return Store.open(db, settings=Settings().replace(embedder="hashing", scheduler=False))


def test_merged_and_deleted_records_in_vectors_db_are_not_brought_back(
    new_target: Targets, tmp_path: Path
) -> None:
    root = with_gone_records(build_upstream_dir(tmp_path / "up"))
    with _open(new_target("m.db")) as s:
        report = ImportReport()
        import_upstream(s, read_upstream(root, report), "alice", report)
        assert report.ok, report.problems
        assert report.counts["records live upstream"] == 5
        assert report.counts["records merged upstream (not imported)"] == 1
        assert report.counts["records deleted upstream (not imported)"] == 1
        contents = {m["content"] for m in s.list_memories("alice", include_retired=True)}
        assert MERGED_INTO in contents
        assert MERGED not in contents and DELETED not in contents
        # Re-importing changes nothing and still brings neither back.
        again = ImportReport()
        import_upstream(s, read_upstream(root, again), "alice", again)
        contents = {m["content"] for m in s.list_memories("alice", include_retired=True)}
        assert MERGED not in contents and DELETED not in contents


def test_without_vectors_db_every_latest_record_counts(tmp_path: Path) -> None:
    root = build_upstream_dir(tmp_path / "up")
    with_gone_records(root)
    (root / "vectors.db").unlink()
    report = ImportReport()
    data = read_upstream(root, report)
    assert {r.id for r in data.records} >= {"m_cat", "m_pin", "m_cats"}
    assert "records live upstream" not in report.counts


def test_an_unreadable_vectors_db_imports_no_record(tmp_path: Path) -> None:
    root = build_upstream_dir(tmp_path / "up")
    (root / "vectors.db").write_bytes(b"not a database at all" * 100)
    report = ImportReport()
    data = read_upstream(root, report)
    assert data.records == [] and data.messages
    assert report.problems and report.problems[0].where == "vectors.db"


def test_reimport_after_forget_user_needs_allow_erased(tmp_path: Path, cli_env: Path) -> None:
    root = build_upstream_dir(tmp_path / "up")
    assert run_cli("import", str(root), "--format", "upstream", "--user", "alice").exit_code == 0
    assert run_cli("users", "forget", "alice", "--yes").exit_code == 0
    r = run_cli("import", str(root), "--format", "upstream", "--user", "alice")
    assert r.exit_code == 1
    assert "was erased" in r.stderr and "--allow-erased" in r.stderr
    with _open(cli_env) as s:
        assert s.list_memories("alice") == []
        assert s.search_conversations("alice", "sencha", strategy="keyword") == []
        with pytest.raises(InvalidInputError, match="was erased"):
            import_upstream(s, read_upstream(root, ImportReport()), "alice", ImportReport())
    r = run_cli("import", str(root), "--format", "upstream", "--user", "alice", "--allow-erased")
    assert r.exit_code == 0, r.output
    with _open(cli_env) as s:
        assert s.list_memories("alice")


def test_jsonl_and_export_imports_skip_an_erased_user(tmp_path: Path, cli_env: Path) -> None:
    lines = [
        {"user": u, "session": "s", "role": "user", "content": f"{u} likes oolong", "id": f"{u}1"}
        for u in ("bob", "carol")
    ]
    f = tmp_path / "in.jsonl"
    f.write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert run_cli("import", str(f)).exit_code == 0
    exported = tmp_path / "all.jsonl"
    assert run_cli("export", "--all", "-o", str(exported)).exit_code == 0
    assert run_cli("users", "forget", "bob", "--yes").exit_code == 0

    r = run_cli("import", str(f))
    assert r.exit_code == 1 and f"{f}:1: user 'bob' was erased" in r.stderr
    r = run_cli("import", str(exported), "--format", "memstore")
    assert r.exit_code == 1 and "user 'bob' was erased" in r.stderr
    with _open(cli_env) as s:
        assert s.search_conversations("bob", "oolong", strategy="keyword") == []
        assert s.search_conversations("carol", "oolong", strategy="keyword")


def test_imports_skip_messages_a_session_forget_erased(tmp_path: Path, cli_env: Path) -> None:
    lines = [
        {"user": "dana", "session": "gone", "role": "user", "content": c, "id": i}
        for i, c in (("g1", "My locker code is 4471"), ("g2", "The locker is in the gym"))
    ]
    lines.append({"user": "dana", "session": "kept", "role": "user", "content": "I like oolong"})
    lines[-1]["id"] = "k1"
    f = tmp_path / "in.jsonl"
    f.write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert run_cli("import", str(f)).exit_code == 0
    exported = tmp_path / "all.jsonl"
    assert run_cli("export", "--all", "-o", str(exported)).exit_code == 0
    with _open(cli_env) as s:
        s.forget_session("dana", "gone")

    r = run_cli("import", str(f))
    assert r.exit_code == 1 and "messages of user 'dana' were erased" in r.stderr
    r = run_cli("import", str(exported))
    assert r.exit_code == 1 and "had messages erased that this export holds" in r.stderr
    with _open(cli_env) as s:
        assert s.search_conversations("dana", "locker", strategy="keyword") == []
        assert s.search_conversations("dana", "oolong", strategy="keyword")

    r = run_cli("import", str(f), "--allow-erased")
    assert r.exit_code == 0, r.output
    with _open(cli_env) as s:
        assert s.search_conversations("dana", "locker", strategy="keyword")
