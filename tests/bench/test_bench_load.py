"""``memstore bench load`` on a tiny budget: every phase runs, nothing fails,
and the many-client library phase commits captures in shared transactions."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from memstore.bench.chattext import ChatText
from memstore.bench.load import drive, format_load, run_load
from memstore.cli import cli


def test_chat_text_is_long_and_varied() -> None:
    gen = ChatText(3)
    msgs = [gen.message() for _ in range(2000)]
    mean = sum(len(m.encode()) for m in msgs) / len(msgs)
    words = {w.strip(".,?!").lower() for m in msgs for w in m.split()}
    assert 180 < mean < 320
    assert len(words) > 2000
    assert ChatText(3).message() == msgs[0]  # deterministic by seed


def test_drive_stops_at_the_capture_budget() -> None:
    seen: list[tuple[int, int]] = []
    lock = threading.Lock()

    def call(c: int, i: int) -> None:
        with lock:
            seen.append((c, i))

    res = drive(4, 60.0, 25, call)
    assert res["captures"] == len(seen) == 25
    assert res["errors"] == 0


def test_drive_counts_errors_apart_from_latencies() -> None:
    def call(_c: int, i: int) -> None:
        if i % 2:
            raise RuntimeError("boom")

    res = drive(2, 60.0, 10, call)
    assert res["captures"] + res["errors"] == 10
    assert res["errors"] > 0 and "boom" in res["first_error"]


@pytest.mark.slow
def test_run_load_library_and_gateway(tmp_path: Path) -> None:
    res = run_load(threads=4, clients=4, seconds=20.0, max_captures=40, workdir=tmp_path)
    for setup in ("library", "gateway"):
        for key in ("one", "many"):
            r = res[setup][key]
            assert r["captures"] == 40 and r["errors"] == 0, (setup, key, r)
            # 41 turns with the warm-up, two messages each (the gateway's
            # count read from the server's file while it runs).
            assert r["messages"] == 82 and 0 <= r["embedded"] <= 82, (setup, key, r)
        assert res[setup]["many"]["throughput_vs_one"] > 0
    assert res["library"]["many"]["captures_in_shared"] <= 40
    table = format_load(res)
    assert "library" in table and "gateway" in table and "target" in table


def test_cli_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "load.json"
    got = CliRunner().invoke(
        cli,
        ["bench", "load", "--setup", "library", "--threads", "2", "--seconds", "5",
         "--max-captures", "10", "--json", str(out), "--workdir", str(tmp_path)],
    )  # fmt: skip
    assert got.exit_code == 0, got.output
    data = json.loads(out.read_text())
    assert data["library"]["many"]["captures"] == 10
    assert "gateway" not in data
    # How far the indexer kept up: a count of the phase's own messages (a
    # warm-up turn and ten turns), at most all of them.
    for key in ("one", "many"):
        phase = data["library"][key]
        assert phase["messages"] == 22 and 0 <= phase["embedded"] <= 22
        assert "memories" not in phase  # no timers, no derivation to count
    assert "messages had their vectors when the phase ended" in got.output


def test_cli_refuses_one_thread() -> None:
    got = CliRunner().invoke(cli, ["bench", "load", "--threads", "1"])
    assert got.exit_code == 2


def test_cli_pipeline_derives_while_capturing(tmp_path: Path) -> None:
    out = tmp_path / "load.json"
    got = CliRunner().invoke(
        cli,
        ["bench", "load", "--setup", "library", "--threads", "2", "--seconds", "5",
         "--max-captures", "10", "--pipeline", "--json", str(out), "--workdir", str(tmp_path)],
    )  # fmt: skip
    assert got.exit_code == 0, got.output
    data = json.loads(out.read_text())
    assert data["pipeline"] is True
    assert "pipeline timers on" in got.output
    for key in ("one", "many"):
        # A count read from the phase's own store when it ended (derivation
        # runs on the timers, so it may not have come round yet).
        assert data["library"][key]["memories"] >= 0
    assert "memories derived" in got.output


def test_without_pipeline_no_memory_count() -> None:
    res = {"backend": "sqlite", "embedder": "hashing", "seconds": 1, "max_captures": 1,
           "load_before": (0.0,), "load_after": (0.0,), "pipeline": False}  # fmt: skip
    assert "pipeline timers off" in format_load(res)


def test_cli_processes_capture_beside_the_threads(tmp_path: Path) -> None:
    out = tmp_path / "load.json"
    got = CliRunner().invoke(
        cli,
        ["bench", "load", "--setup", "library", "--threads", "2", "--seconds", "5",
         "--max-captures", "10", "--processes", "2", "--json", str(out),
         "--workdir", str(tmp_path)],
    )  # fmt: skip
    assert got.exit_code == 0, got.output
    data = json.loads(out.read_text())
    assert data["processes"] == 2
    for key in ("one", "many"):
        phase = data["library"][key]
        beside = phase["beside"]
        assert beside["processes"] == 2 and beside["errors"] == 0
        assert beside["first_error"] is None
        assert beside["captures"] >= 0
        # The threads' own turns plus the processes' (each a warm-up turn
        # and its captures): all in the phase's one store.
        assert phase["messages"] == 22 + 2 * (2 + beside["captures"])
    assert "beside 2 thread(s): 2 processes captured" in got.output
