"""Hypothesis drives the command line with junk arguments and junk import files:
every run ends in success or a one-line error with a non-zero exit, never a
traceback. (The Store API is fuzzed in tests/reliability/test_reliability_api.py.)"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memstore import Settings
from memstore.cli import main
from memstore.store import Store
from tests.backends import Targets

pytestmark = [pytest.mark.reliability, pytest.mark.slow, pytest.mark.both_backends]

TEXT = st.one_of(
    st.text(max_size=40),
    st.sampled_from(
        [
            "alice",
            "alice ",
            "",
            " ",
            "-",
            "--",
            "a\x00b",
            "\ud800x",
            "0",
            "-1",
            "1e400",
            "nan",
            "inf",
            "9999-12-31T23:00:00-05:00",
            "x" * 300,
        ]
    ),
)
NUM = st.one_of(st.integers(-(10**20), 10**20).map(str), TEXT)

# command words, then (option, value strategy) pairs; None marks a positional argument
COMMANDS: dict[str, list[tuple[str | None, st.SearchStrategy[str]]]] = {
    "capture": [
        ("--user", TEXT),
        ("--session", TEXT),
        ("--user-text", TEXT),
        ("--assistant-text", TEXT),
        ("--timestamp", TEXT),
    ],
    "search conversations": [
        (None, TEXT),
        ("--user", TEXT),
        ("--limit", NUM),
        ("--session", TEXT),
        ("--strategy", TEXT),
    ],
    "search memories": [(None, TEXT), ("--user", TEXT), ("--type", TEXT), ("--limit", NUM)],
    "recall": [(None, TEXT), ("--user", TEXT), ("--budget", NUM)],
    "memories list": [("--user", TEXT), ("--generation", NUM), ("--type", TEXT)],
    "memories history": [(None, TEXT), ("--user", TEXT)],
    "memories forget": [(None, TEXT), ("--user", TEXT)],
    "memories add": [(None, TEXT), ("--user", TEXT), ("--scene", TEXT)],
    "scenes list": [("--user", TEXT)],
    "persona show": [("--user", TEXT)],
    "events tail": [("-n", NUM)],
    "users forget": [(None, TEXT), ("--wait", NUM)],
    "pipeline status": [("--user", TEXT)],
}

LINE = st.one_of(
    st.text(max_size=60),
    st.sampled_from(
        [
            '{"user": null, "session": "s", "role": "user", "content": "x"}',
            '{"user": "u", "session": "s", "role": "user", "content": 42}',
            '{"user": "u", "session": "s", "role": "robot", "content": "x"}',
            '{"user": "u ", "session": "s", "role": "user", "content": "x"}',
            '{"user": "u", "session": "s", "role": "user", "content": "ok"}',
            "[]",
            "{",
        ]
    ),
)


@pytest.fixture(scope="module")
def cli_db(module_target: Targets) -> Iterator[str]:
    path = module_target("cli.db")
    with Store.open(
        path, settings=Settings().replace(embedder="hashing", scheduler=False)
    ) as store:
        store.capture_turn("alice", "s1", "I like green tea", "noted")
        store.write_memory("alice", "add", "The user likes green tea.")
    yield path


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    # stderr as the interpreter sets it up (backslashreplace): a message quoting
    # a lone surrogate from argv prints, where pytest's capture would raise.
    raw = io.BytesIO()
    stderr = io.TextIOWrapper(raw, encoding="utf-8", errors="backslashreplace", write_through=True)
    code: object = 0
    try:
        with contextlib.redirect_stderr(stderr):
            main(args)
    except SystemExit as e:
        code = e.code
    capsys.readouterr()
    err = raw.getvalue().decode("utf-8")
    assert "Traceback" not in err, (args, err)
    if code not in (0, None):
        assert isinstance(code, int) and code > 0, (args, code)
        errors = [ln for ln in err.splitlines() if ln.lower().startswith("error")]
        assert len(errors) == 1, (args, err)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_fuzz_cli_commands(
    cli_db: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    data: st.DataObject,
) -> None:
    monkeypatch.setenv("MEMSTORE_EMBEDDER", "hashing")
    monkeypatch.setenv("MEMSTORE_SCHEDULER", "false")
    name = data.draw(st.sampled_from(sorted(COMMANDS)), label="command")
    args = [*name.split(), "--db", cli_db]
    if name == "users forget":
        args.append("--yes")  # before any positional: after "--" it would be one
    for option, values in COMMANDS[name]:
        if data.draw(st.booleans(), label=f"give {option}"):
            value = data.draw(values, label=str(option))
            args += [value] if option is None else [option, value]
    _run(args, capsys)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(lines=st.lists(LINE, max_size=8), raw=st.binary(max_size=64))
def test_fuzz_cli_import(
    cli_db: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    lines: list[str],
    raw: bytes,
) -> None:
    monkeypatch.setenv("MEMSTORE_EMBEDDER", "hashing")
    monkeypatch.setenv("MEMSTORE_SCHEDULER", "false")
    src = tmp_path / "in.jsonl"
    src.write_bytes("\n".join(lines).encode("utf-8", "surrogatepass") + raw)
    _run(["import", str(src), "--db", cli_db], capsys)


@pytest.mark.parametrize(
    "command",
    [
        ["persona", "show"],
        ["scenes", "list"],
        ["memories", "list"],
        ["pipeline", "status"],
        ["pipeline", "run"],
        ["rederive"],
    ],
)
def test_a_non_utf8_user_argument_is_an_error_not_a_traceback(
    cli_db: str, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    # The fuzzer found it: a non-UTF-8 argv byte arrives as a lone surrogate.
    with pytest.raises(SystemExit) as exit_info:
        main([*command, "--db", cli_db, "--user", "\udcff"])
    assert exit_info.value.code == 1
    err = capsys.readouterr().err
    assert "lone surrogate" in err and "Traceback" not in err
