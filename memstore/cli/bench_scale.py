"""``memstore bench scale --db URL`` / ``--backends``: the per-layout run (``bench/scale_db``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from memstore.bench.scale_db import BACKENDS, parse_layouts, run_backends
from memstore.bench.scale_db_report import format_backends
from memstore.db.target import looks_like_url, parse


def scale_backends(
    url: str | None,
    backends: str | None,
    layout: str,
    *,
    embedder: str,
    queries: int,
    turns: int,
    sessions: int,
    keep: Path | None,
    workdir: Path | None,
    log: Callable[[str], None],
    done: Callable[[dict[str, Any]], None],
) -> dict[str, Any]:
    """Check the options, run, print the tables; the results for ``--json``."""
    chosen = [b.strip() for b in (backends or ",".join(BACKENDS)).split(",") if b.strip()]
    if not chosen or any(b not in BACKENDS for b in chosen):
        raise click.BadParameter(
            f"{backends!r}: one or both of sqlite,postgresql", param_hint="--backends"
        )
    if "postgresql" in chosen and (
        url is None or not looks_like_url(url) or parse(url).url is None
    ):
        raise click.BadParameter("a PostgreSQL URL (SQLite runs beside it)", param_hint="--db")
    try:
        layouts = parse_layouts(layout)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--layout") from None
    if queries < 1 or turns < 1:
        raise click.BadParameter("--queries and --turns must be positive")
    res = run_backends(
        url if "postgresql" in chosen else None,
        layouts=layouts,
        backends=[b for b in BACKENDS if b in chosen],
        embedder=embedder,
        turns=turns,
        n_queries=queries,
        sessions=sessions,
        keep=keep,
        workdir=workdir,
        log=log,
        done=done,
    )
    click.echo(format_backends(res))
    return res
