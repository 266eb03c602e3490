"""``memstore bench report`` rewrites only its own part of BENCHMARKS.md."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from memstore.bench.report import BEGIN, END, splice
from memstore.cli import cli


def test_splice_replaces_only_between_the_markers() -> None:
    hand = f"# Benchmarks\n\nWritten by hand.\n\n{BEGIN}\n\nold\n\n{END}\n\n## After\n\nKept.\n"
    out = splice(hand, "new figures")
    assert out.startswith("# Benchmarks\n\nWritten by hand.\n\n")
    assert "old" not in out and "new figures" in out
    assert out.endswith(f"{END}\n\n## After\n\nKept.\n")
    assert splice(out, "new figures") == out


def test_a_file_without_markers_keeps_everything_and_gets_them_appended() -> None:
    out = splice("# Mine\n\nprecious\n", "generated")
    assert out.startswith("# Mine\n\nprecious\n\n" + BEGIN)
    assert out.rstrip().endswith(END)
    assert splice(None, "generated").startswith("# memstore benchmarks\n\n" + BEGIN)


def test_report_command_keeps_hand_written_text(tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    md = tmp_path / "BENCHMARKS.md"
    md.write_text(f"# Current results\n\nhand-written summary\n\n{BEGIN}\nstale\n{END}\n")
    r = CliRunner().invoke(
        cli,
        ["bench", "report", "--results", str(results), "--out", str(md),
         "--images", str(tmp_path / "img")],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    text = md.read_text()
    assert "hand-written summary" in text and "stale" not in text
    assert "Not run for this report" in text
    # Nothing to plot: no empty plot folder, and the command names none.
    assert not (tmp_path / "img").exists() and "plots in" not in r.output
