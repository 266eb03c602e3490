"""``memstore bench load``: capture throughput and latency with many concurrent clients."""

from __future__ import annotations

from pathlib import Path

import click

from memstore.cli.bench import bench_group, json_opt, log, save, workdir_opt


@bench_group.command("load")
@click.option("--threads", type=click.IntRange(2, 256), default=8, show_default=True,
              help="Library threads in the many-client phase.")  # fmt: skip
@click.option("--clients", type=click.IntRange(2, 500), default=50, show_default=True,
              help="HTTP clients of `memstore serve` in the many-client phase.")  # fmt: skip
@click.option("--seconds", type=click.FloatRange(0.5, 600), default=10.0, show_default=True,
              help="Longest time per phase.")  # fmt: skip
@click.option("--max-captures", type=click.IntRange(10, 1_000_000), default=4000,
              show_default=True, help="Most captures per phase.")  # fmt: skip
@click.option("--setup", "setups", type=click.Choice(["library", "gateway"]), multiple=True,
              help="Only these setups (repeatable)  [default: both]")  # fmt: skip
@click.option("--embedder", type=click.Choice(["hashing", "e5", "none"]), default="hashing",
              show_default=True,
              help="The stores' embedder (its indexer runs meanwhile).")  # fmt: skip
@click.option("--pipeline", is_flag=True,
              help="Run the pipeline's timers: memories are derived while the captures "
              "arrive (with --embedder e5, every default a store opens with).")  # fmt: skip
@click.option("--processes", type=click.IntRange(0, 64), default=0, show_default=True,
              help="Library phases run beside this many processes capturing into the same "
              "store (each its own Store), as on a host with several processes.")  # fmt: skip
@click.option("--db", "db_url", default=None,
              help="Run on this PostgreSQL server instead (a new database per phase; "
              "needs CREATEDB).")  # fmt: skip
@json_opt
@workdir_opt
def bench_load(
    threads: int,
    clients: int,
    seconds: float,
    max_captures: int,
    setups: tuple[str, ...],
    embedder: str,
    pipeline: bool,
    processes: int,
    db_url: str | None,
    json_path: Path | None,
    workdir: Path | None,
) -> None:
    """Concurrent capture: N clients against the library (threads) and against
    `memstore serve` (HTTP), each next to one client alone in the same run.

    One conversation turn per call, conversation-like text (~245 B messages,
    ~8k distinct words). Prints captures/s and p50/p99 latency per phase.
    Targets: 50 gateway clients >= 2x one client, 8 threads >= 1.5x, p99 <= 4x p50.

    \b
    Example:
      memstore bench load
      memstore bench load --setup library --threads 8 --seconds 5
      memstore bench load --pipeline --embedder e5
      memstore bench load --setup library --processes 3 --seconds 60
      memstore bench load --db postgresql+psycopg://memstore@127.0.0.1:55432/memstore
    """
    from memstore.bench.load import format_load, run_load

    res = run_load(
        threads=threads,
        clients=clients,
        seconds=seconds,
        max_captures=max_captures,
        setups=setups or ("library", "gateway"),
        embedder=embedder,
        pipeline=pipeline,
        processes=processes,
        db_url=db_url,
        workdir=workdir,
        log=log,
    )
    click.echo(format_load(res))
    save(res, "load", json_path)
