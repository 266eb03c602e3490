"""``memstore bench durability`` on tiny stores: every configuration
captures, searches, reindexes and measures its raw-commit floor; the
PostgreSQL ones need the shared test server (MEMSTORE_TEST_PG_URL)."""

from __future__ import annotations

import os

import pytest

from memstore.bench.probe_durability import CONFIGS, main, measure, measure_all

_PG = os.environ.get("MEMSTORE_TEST_PG_URL", "")


@pytest.mark.parametrize("config", CONFIGS)
def test_each_configuration_measures_all_figures(config: str) -> None:
    if config.startswith("pg") and not _PG:
        pytest.skip("needs MEMSTORE_TEST_PG_URL")
    res = measure(config, _PG, turns=6, n_queries=3)
    assert res["capture_turn"]["n"] == res["raw_commit"]["n"] == 6
    assert res["keyword"]["n"] == 3
    assert res["reindexed"] == 12  # every message of the six turns embedded


def test_configurations_are_measured_side_by_side() -> None:
    # Interleaved: every store gets every turn and query, each its own copy.
    configs = [c for c in CONFIGS if _PG or c.startswith("sqlite")]
    rows = measure_all(configs, _PG, turns=5, n_queries=4)
    assert [r["config"] for r in rows] == configs
    for r in rows:
        assert r["capture_turn"]["n"] == r["raw_commit"]["n"] == 5
        assert r["keyword"]["n"] == 4
        assert r["reindexed"] == 10


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        ([], "usage: memstore bench durability"),
        (["u", "abc"], "whole numbers"),
        (["u", "5", "0"], "at least 1"),
        (["postgresql+psycopg://nobody@127.0.0.1:1/none", "2", "1"], "PostgreSQL at "),
    ],
)
def test_bad_arguments_and_an_unreachable_server_are_one_line(argv: list[str], said: str) -> None:
    with pytest.raises(SystemExit) as ended:
        main(argv)
    message = str(ended.value.code)
    assert said in message
    assert "\n" not in message
