"""``memstore bench derive-workers``: derivation throughput with N worker processes."""

from __future__ import annotations

from pathlib import Path

import click

from memstore.cli.bench import bench_group, json_opt, log, save, workdir_opt
from memstore.db.target import parse


def _counts(value: str) -> list[int]:
    parts = [v.strip() for v in value.split(",") if v.strip()]
    if not parts or not all(p.isdigit() and int(p) >= 1 for p in parts):
        raise click.BadParameter("worker counts are comma-separated positive integers, e.g. 1,2")
    return [int(p) for p in parts]


@bench_group.command("derive-workers")
@click.option(
    "--db", "db_url", default=None,
    help="Also run on this PostgreSQL server (a fresh database per run; needs CREATEDB).",
)  # fmt: skip
@click.option("--workers", "workers", default="1,2", show_default=True, help="Process counts.")
@click.option(
    "--model", type=click.Choice(["fake", "rules"]), default="fake", show_default=True,
    help="fake: scripted model with --latency-ms per call (source checkout); rules: no model.",
)  # fmt: skip
@click.option(
    "--latency-ms",
    type=click.FloatRange(0, 10_000),
    default=100.0,
    show_default=True,
    help="Delay the fake LLM adds to every answer.",
)
@click.option(
    "--users",
    type=click.IntRange(1, 1000),
    default=4,
    show_default=True,
    help="Users whose sessions are derived.",
)
@click.option(
    "--sessions",
    type=click.IntRange(1, 1000),
    default=6,
    show_default=True,
    help="Sessions per user.",
)
@click.option(
    "--rounds",
    type=click.IntRange(1, 1000),
    default=4,
    show_default=True,
    help="User rounds per session.",
)
@json_opt
@workdir_opt
def bench_derive_workers(
    db_url: str | None,
    workers: str,
    model: str,
    latency_ms: float,
    users: int,
    sessions: int,
    rounds: int,
    json_path: Path | None,
    workdir: Path | None,
) -> None:
    """Derivation throughput with 1, 2, … worker processes on one store: all
    sessions pending, N processes run the pipeline at once; prints wall time,
    derive events/s, each worker's share, whether the result is exact (nothing
    twice, nothing lost) and the load average. SQLite always; PostgreSQL too
    with --db URL.

    \b
    Example:
      memstore bench derive-workers --db postgresql+psycopg://memstore@127.0.0.1:55432/memstore
      memstore bench derive-workers --model rules --workers 1,2,4
    """
    from memstore.bench.derive_workers import format_derive_workers, run_derive_workers

    if db_url is not None and not parse(db_url).is_postgres:
        raise click.BadParameter("--db takes a PostgreSQL URL (SQLite always runs)")
    url = parse(db_url).url if db_url is not None else None
    res = run_derive_workers(
        db_url=url,
        workers=_counts(workers),
        model=model,
        latency_ms=latency_ms,
        users=users,
        sessions=sessions,
        rounds=rounds,
        workdir=workdir,
        log=log,
    )
    click.echo(format_derive_workers(res))
    save(res, "derive_workers", json_path)
