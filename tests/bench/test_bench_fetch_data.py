"""bench fetch-data: downloads from a local HTTP server laid out like
raw.githubusercontent.com (no network here), serving hand-made samples."""

from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

import memstore.cli.bench  # noqa: F401  registers the group on cli
from memstore.bench.datasets import load_bench_data
from memstore.bench.fetch_data import SOURCES, FetchError, fetch_dataset
from memstore.cli.app import cli
from tests.bench_data_support import write_beam, write_plus


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def mirror(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A server on 127.0.0.1 serving ``<root>/<owner>/<repo>/<commit>/<path>``."""
    root = tmp_path / "mirror"
    beam = SOURCES["beam"]
    write_beam(root / beam.repo / beam.commit / "chats", (1, 2))
    plus = SOURCES["locomo-plus"]
    write_plus(root / plus.repo / plus.commit / "data")
    handler = functools.partial(_Quiet, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", root
    finally:
        server.shutdown()
        server.server_close()


def test_beam_chats_download_into_the_layout_the_bench_reads(
    mirror: tuple[str, Path], tmp_path: Path
) -> None:
    base, _ = mirror
    out = tmp_path / "beam"
    res = CliRunner().invoke(
        cli,
        ["bench", "fetch-data", "beam", "--to", str(out), "--chats", "2,1", "--base-url", base],
    )
    assert res.exit_code == 0, res.output
    assert "4 files written" in res.output
    data = load_bench_data(out / "100K")
    assert data.dataset == "beam"
    assert [c.sample_id for c in data.conversations] == ["beam-1", "beam-2"]


def test_locomo_plus_downloads_with_its_hosts_only_when_asked(
    mirror: tuple[str, Path], tmp_path: Path
) -> None:
    base, _ = mirror
    out = tmp_path / "plus"
    fetch_dataset("locomo-plus", out, base_url=base)
    assert sorted(p.name for p in out.iterdir()) == ["locomo_plus.json"]
    fetch_dataset("locomo-plus", out, hosts=True, base_url=base)
    assert len(load_bench_data(out).conversations) == 2


def test_a_missing_file_or_a_non_json_answer_writes_nothing(
    mirror: tuple[str, Path], tmp_path: Path
) -> None:
    base, root = mirror
    out = tmp_path / "beam"
    with pytest.raises(FetchError, match="HTTP 404"):
        fetch_dataset("beam", out, chats=[3], base_url=base)
    plus = SOURCES["locomo-plus"]
    (root / plus.repo / plus.commit / "data" / "locomo_plus.json").write_text(
        "version https://git-lfs.github.com/spec/v1\n"
    )
    with pytest.raises(FetchError, match="did not return JSON"):
        fetch_dataset("locomo-plus", tmp_path / "plus", base_url=base)
    assert not (tmp_path / "plus" / "locomo_plus.json").exists()
    assert not out.exists()


def test_bad_options_are_refused(mirror: tuple[str, Path], tmp_path: Path) -> None:
    base, _ = mirror
    runner = CliRunner()
    for args in (
        ["beam", "--chats", "21"],
        ["beam", "--chats", "x"],
        ["beam", "--hosts"],
        ["locomo-plus", "--chats", "1"],
    ):
        res = runner.invoke(
            cli, ["bench", "fetch-data", *args, "--to", str(tmp_path / "o"), "--base-url", base]
        )
        assert res.exit_code != 0, args
        assert "Traceback" not in res.output
    unreachable = runner.invoke(
        cli,
        [
            "bench",
            "fetch-data",
            "beam",
            "--to",
            str(tmp_path / "o"),
            "--base-url",
            "http://127.0.0.1:9",
        ],
    )
    # The memstore entry point prints a FetchError as a one-line error.
    assert isinstance(unreachable.exception, FetchError)
    assert "cannot download" in str(unreachable.exception)
