"""Bounded input: every import path stops at a line and a total size limit
with an error naming the line (an endless input fails fast, in bounded
memory); a capture with two different messages under one id is refused; CLI
errors are one line and an exit code; ``Store.open`` raises only memstore
errors."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from memstore.errors import InvalidInputError, MemstoreError
from memstore.porting.report import MAX_LINE_BYTES, ImportReport, ReadBudget, read_text
from memstore.porting.upstream import read_upstream
from memstore.porting.upstream_apply import import_upstream
from memstore.store import Store
from tests.porting_support import build_upstream_dir, cli_target, msg, run_cli

pytestmark = pytest.mark.both_backends

__all__ = ["cli_target"]


class _Endless(io.RawIOBase):
    """An input that never ends (a pipe from ``yes``), counting what was read."""

    def __init__(self, pattern: bytes) -> None:
        self.pattern, self.served = pattern, 0

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        n = 1 << 20 if n is None or n < 0 else n
        out = (self.pattern * (n // len(self.pattern) + 1))[:n]
        self.served += n
        return out


def test_dev_zero_is_refused_at_once() -> None:
    with pytest.raises(InvalidInputError, match="binary file"):
        read_text(Path("/dev/zero"), "/dev/zero")


def test_an_endless_line_stops_at_the_line_limit_naming_it() -> None:
    src = _Endless(b"{}\n" * 2 + b"a" * 1000)  # two lines, then one that never ends
    src.pattern = b"a"
    with pytest.raises(InvalidInputError, match=r"^x\.jsonl:1: line longer than 16 MiB"):
        read_text(src, "x.jsonl")  # type: ignore[arg-type]
    assert src.served <= MAX_LINE_BYTES + (2 << 20)


def test_an_endless_stream_of_lines_stops_at_the_total_limit() -> None:
    src = _Endless(b'{"user": "u"}\n')
    with pytest.raises(InvalidInputError, match=r"^s:\d+: the import is larger than 4 MiB"):
        read_text(src, "s", budget=ReadBudget(4 << 20))  # type: ignore[arg-type]
    assert src.served <= 5 << 20


def test_an_upstream_directory_shares_one_budget(tmp_path: Path) -> None:
    root = build_upstream_dir(tmp_path / "up")
    sizes = sorted(p.stat().st_size for p in (root / "conversations").iterdir())
    report = ImportReport()
    data = read_upstream(root, report, budget=ReadBudget(sizes[0] + 10))
    assert any("larger than" in p.message for p in report.problems)
    assert data.messages  # the files read before the budget ran out are kept


def test_jsonl_import_reports_a_reused_id_with_other_content(
    tmp_path: Path, cli_target: str
) -> None:
    f = tmp_path / "in.jsonl"
    lines = [
        {"user": "u", "session": "s", "role": "user", "content": "one", "id": "m1"},
        {"user": "u", "session": "s", "role": "user", "content": "two", "id": "m1"},
    ]
    f.write_text("".join(json.dumps(x) + "\n" for x in lines))
    res = run_cli("import", str(f))
    assert res.exit_code == 1
    assert f"{f}:2: id 'm1' is already used by line 1 with different content" in res.output


@pytest.mark.parametrize(
    "args",
    [
        ["memories", "list", "--user", "u", "--generation", "100000000000000000000"],
        ["persona", "show", "--user", "u", "--generation", "100000000000000000000"],
        ["scenes", "list", "--user", "u", "--generation", "100000000000000000000"],
        ["export", "--user", "u", "-o", "/no/such/dir/out.jsonl"],
        ["export", "--user", "u", "-o", "/dev/full"],
        ["import", "/dev/zero"],
    ],
)
def test_cli_errors_are_one_line_and_an_exit_code(cli_target: str, args: list[str]) -> None:
    assert run_cli("capture", "--user", "u", "--session", "s", "--user-text", "hi").exit_code == 0
    res = run_cli(*args)
    assert res.exit_code != 0
    assert "Traceback" not in res.output
    errors = [ln for ln in res.output.splitlines() if ln.lower().startswith("error")]
    assert len(errors) == 1, res.output


@pytest.mark.parametrize("where", ["a\x00b.db", b"a.db", 42])
def test_store_open_raises_only_memstore_errors(where: object) -> None:
    with pytest.raises(MemstoreError):
        Store.open(where)  # type: ignore[arg-type]


def test_upstream_messages_sharing_an_id_are_reported_not_dropped(
    tmp_path: Path, target: str
) -> None:
    root = build_upstream_dir(tmp_path / "up")
    clash = msg("agent:main:chat-3", "sid-3", 0, "user", "one text")
    other = {**clash, "content": "another text", "timestamp": clash["timestamp"] + 1}
    with (root / "conversations" / "2024-04-27.jsonl").open("w") as f:
        f.write(json.dumps(clash) + "\n" + json.dumps(other) + "\n")
    report = ImportReport()
    with Store.open(target) as s:
        import_upstream(s, read_upstream(root, report), "alice", report)
    assert [p.where for p in report.problems] == ["conversations/ (session agent:main:chat-3)"]
    assert "like an earlier message" in report.problems[0].message
    assert report.counts["messages stored"] == 6  # the other sessions' messages


def test_an_over_long_line_is_skipped_and_named_and_the_rest_kept(
    tmp_path: Path, cli_target: str
) -> None:
    good = {"user": "u", "session": "s", "role": "user", "content": "kept"}
    big = json.dumps({**good, "content": "x" * (MAX_LINE_BYTES + 10)})
    f = tmp_path / "in.jsonl"
    f.write_text(
        json.dumps({**good, "id": "a"}) + "\n" + big + "\n" + json.dumps({**good, "id": "b"}) + "\n"
    )
    report = ImportReport()
    text = read_text(f, "in.jsonl", report=report)
    assert [str(p) for p in report.problems] == ["in.jsonl:2: line longer than 16 MiB"]
    assert len(text) < 1000 and text.count("\n") == 3  # line numbers hold
    res = run_cli("import", str(f))
    assert res.exit_code == 1
    assert f"{f}:2: line longer than 16 MiB" in res.output
    assert "2 messages stored" in res.output
