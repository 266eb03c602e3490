"""``memstore import`` checks every line: bad ones are reported by number and
skipped, every good one is imported, and the exit status says so."""

from __future__ import annotations

import json
from pathlib import Path

from memstore import Settings, Store
from tests.porting_support import cli_env, run_cli

__all__ = ["cli_env"]


def _lines(path: Path, rows: list[object]) -> Path:
    path.write_text(
        "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows),
        encoding="utf-8",
    )
    return path


def _open(db: Path) -> Store:
    return Store.open(db, settings=Settings().replace(embedder="hashing", scheduler=False))


def _m(user: object, content: str, **kw: object) -> dict[str, object]:
    return {"user": user, "session": kw.pop("session", "s1"), "role": "user",
            "content": content, **kw}  # fmt: skip


def test_bad_lines_reported_by_number_good_ones_all_imported(cli_env: Path, tmp_path: Path) -> None:
    f = _lines(
        tmp_path / "chat.jsonl",
        [
            _m("u1", "first good line", id="1"),
            "this is not json",
            _m(None, "user is null"),
            _m("u1", "second good line", id="2"),
            _m("u1", "bad role", role="wizard"),
            _m("u1", "bad time", timestamp="yesterday-ish"),
            [1, 2, 3],
            _m("alice ", "trailing space aliases alice"),
            _m("u1", "third good line", id="3"),
            _m("u1", 42),
            _m("u1", "far future", timestamp="9999-12-31T23:00:00-05:00"),
            _m("u2", "another user's good line", id="1", session="s9"),
        ],
    )
    r = run_cli("import", str(f))
    assert r.exit_code == 1
    for n in (2, 3, 5, 6, 7, 8, 10, 11):
        assert f"chat.jsonl:{n}:" in r.stderr, (n, r.stderr)
    assert "chat.jsonl:1:" not in r.stderr and "chat.jsonl:12:" not in r.stderr
    assert '"user" is null' in r.stderr
    assert "4 messages stored" in r.stdout and "8 problem(s)" in r.stdout
    with _open(cli_env) as s:
        got = s.search_conversations("u1", "good line", strategy="keyword", limit=10)
        assert sorted(h.ref for h in got) == ["1", "2", "3"]
        assert s.search_conversations("None", "user is null", strategy="keyword") == []
        assert s.search_conversations("alice", "aliases", strategy="keyword") == []
    # Again: nothing new, the same problems, still non-zero.
    r = run_cli("import", str(f))
    assert r.exit_code == 1 and "0 messages stored, 4 already known" in r.stdout


def test_clean_file_exits_zero_and_stdin_works(cli_env: Path, tmp_path: Path) -> None:
    rows = [_m("u1", "I love green tea", id="a"), _m("u1", "and sencha", id="b")]
    data = "".join(json.dumps(r) + "\n" for r in rows)
    r = run_cli("import", "-", input=data)
    assert r.exit_code == 0, r.output
    assert "2 messages stored" in r.stdout and "0 problem(s)" in r.stdout
    assert "next: `memstore pipeline run`" in r.stdout


def test_binary_file_is_an_error_and_imports_nothing(cli_env: Path, tmp_path: Path) -> None:
    f = tmp_path / "blob.jsonl"
    f.write_bytes(bytes(range(256)) * 40)
    r = run_cli("import", str(f))
    assert r.exit_code == 1 and "binary" in r.stderr
    latin = tmp_path / "latin1.jsonl"
    latin.write_bytes(b'{"user": "u1", "session": "s", "role": "user", "content": "caf\xe9"}\n')
    r = run_cli("import", str(latin))
    assert r.exit_code == 1 and "not UTF-8" in r.stderr
    assert not cli_env.exists() or _count(cli_env) == 0


def _count(db: Path) -> int:
    with _open(db) as s:
        return s.event_count()


def test_seed_files_formats_a_and_b(cli_env: Path, tmp_path: Path) -> None:
    rounds = [[{"role": "user", "content": "I live in Porto"},
               {"role": "assistant", "content": "Nice"}]]  # fmt: skip
    a = tmp_path / "a.json"
    a.write_text(json.dumps({"sessions": [{"sessionKey": "h1", "conversations": rounds}]}))
    b = tmp_path / "b.json"
    b.write_text(json.dumps([{"conversations": rounds}]))
    r = run_cli("import", str(a), "--format", "seed", "--user", "dora")
    assert r.exit_code == 0, r.output
    assert "2 messages stored" in r.stdout
    r = run_cli("import", str(b), "--format", "seed", "--user", "dora")
    assert r.exit_code == 1 and "sessionKey" in r.stderr  # no key and no fallback
    r = run_cli("import", str(b), "--format", "seed", "--user", "dora", "--session-key", "h2")
    assert r.exit_code == 0 and "2 messages stored" in r.stdout
    r = run_cli("import", str(a), "--format", "seed", "--user", "dora")
    assert "0 messages stored" in r.stdout
    bad = tmp_path / "bad.json"
    bad.write_text("[{")
    r = run_cli("import", str(bad), "--format", "seed", "--user", "dora")
    assert r.exit_code == 1 and "not JSON" in r.stderr
    with _open(cli_env) as s:
        hits = s.search_conversations("dora", "Porto", strategy="keyword")
        assert sorted(h.session_id or "" for h in hits) == ["h1", "h2"]


def test_memstore_user_env_defaults_user(
    cli_env: Path, tmp_path: Path, monkeypatch: object
) -> None:
    import pytest

    assert isinstance(monkeypatch, pytest.MonkeyPatch)
    monkeypatch.setenv("MEMSTORE_USER", "erin")
    a = tmp_path / "a.json"
    a.write_text(json.dumps([{"sessionKey": "k", "conversations": [[
        {"role": "user", "content": "I love rowing"}]]}]))  # fmt: skip
    r = run_cli("import", str(a), "--format", "seed")
    assert r.exit_code == 0, r.output
    with _open(cli_env) as s:
        assert s.search_conversations("erin", "rowing", strategy="keyword")
