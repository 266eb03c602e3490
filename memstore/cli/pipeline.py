"""``memstore pipeline status|run``: when derivation runs, and running it now."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click

from memstore.cli.app import (
    Location,
    cli,
    db_option,
    echo_json,
    existing_db,
    list_output,
)
from memstore.cli.table import plural
from memstore.config import Settings
from memstore.store import Store
from memstore.validate import opt_id


def _opt_user(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    # Checked as the command line is read, so a bad id is a usage error.
    return opt_id("user_id", value)


@contextmanager
def _store(db: Location | None) -> Iterator[Store]:
    """The store for one pipeline command; closed after it."""
    # A one-shot command never competes for the scheduler lease.
    store = Store.open(existing_db(db), settings=Settings.load(scheduler=False))
    try:
        yield store
    finally:
        store.close()


def summary(outcomes: list[Any]) -> str:
    """One line on what a pipeline run did."""
    failed = [o for o in outcomes if not o.ok]
    new = sum(int(getattr(o, "new_memories", 0) or 0) for o in outcomes)
    if not outcomes:
        return "nothing due: no pending messages"
    text = f"{len(outcomes)} run(s): {len(outcomes) - len(failed)} ok, {len(failed)} failed"
    text += f"; {plural(new, 'new memory', 'new memories')}"
    if failed:
        text += " (failed work stays queued and is retried; `memstore pipeline status` shows why)"
    return text


def derive_now(store: Store, user_id: str | None) -> str:
    """What ``--derive`` does after capture or import: run due derivation, then embed
    what is pending, so memories and vector search are there at once."""
    click.echo("deriving memories…", err=True)
    outcomes = store.run_pipeline(user_id, wait=True)
    embedded = store.reindex()
    return f"derived: {summary(outcomes)}; embedded {embedded} row(s)"


_user_option = click.option(
    "--user", "user_id", default=None, help="Only this user.", callback=_opt_user
)


@cli.group("pipeline")
def pipeline_group() -> None:
    """The derivation pipeline: pending work, timers, failures; run it now.

    \b
    Example:
      memstore pipeline status
      memstore pipeline run --user alice
    """


@pipeline_group.command("status")
@db_option
@list_output
@_user_option
def pipeline_status(db: Location | None, as_json: bool, user_id: str | None) -> None:
    """Show per user and session: pending rounds, threshold, queued work, timers, failures.

    Failed work is retried by itself on a growing back-off (up to
    retry_max_delay_s); "next run" says when this user's work runs next.

    \b
    Example:
      memstore pipeline status --user alice
      memstore pipeline status --json
    """
    with _store(db) as store:
        rows = store.pipeline_status(user_id)
    if as_json:
        echo_json(rows)
        return
    if not rows:
        click.echo("no pipeline state yet (nothing captured)")
    for u in rows:
        click.echo(
            f"user {u['user_id']}: last L1 {u['last_l1_at'] or '-'}, L2 {u['last_l2_at'] or '-'}, "
            f"L3 {u['last_l3_at'] or '-'}; L2 timer {u['l2_timer'] or '-'}; "
            f"next run {u['next_run_at'] or '-'}"
        )
        for q in u["queued"]:
            state = "running" if q["running"] else f"after {q['run_after']}"
            line = f"  queued {q['stage']} {q['session_id'] or ''} {state} attempts {q['attempts']}"
            if q["attempts"] and q["last_error"]:
                line += f" (retrying: {q['last_error']})"
            click.echo(line)
        for s in u["sessions"]:
            line = (
                f"  session {s['session_id']}: {s['rounds_pending']}/{s['threshold']} rounds, "
                f"{s['messages_pending']} messages pending, idle timer {s['idle_timer'] or '-'}"
            )
            if s["failures"]:
                line += f", {s['failures']} failures ({s['last_error']})"
            if s["ended_at"]:
                line += ", ended"
            click.echo(line)


@pipeline_group.command("run")
@db_option
@list_output
@_user_option
def pipeline_run(db: Location | None, as_json: bool, user_id: str | None) -> None:
    """Run due derivation now: L1 for pending sessions, then L2, then L3 when due.

    Waiting retries run now too. Only work queued when the command starts
    runs; messages captured meanwhile are left to the scheduler.

    \b
    Example:
      memstore pipeline run
      memstore pipeline run --user alice --json
    """
    with _store(db) as store:
        pending = sum(
            1
            for u in store.pipeline_status(user_id)
            for s in u["sessions"]
            if s["messages_pending"]
        )
        if not as_json:
            click.echo(f"deriving: {pending} session(s) with pending messages…", err=True)
        outcomes = store.run_pipeline(user_id, wait=True)
    rows: list[dict[str, Any]] = [
        {"stage": o.stage, "ok": o.ok, "run_id": o.run_id, "error": o.error} for o in outcomes
    ]
    if as_json:
        echo_json(rows)
        return
    for r in rows:
        click.echo(
            f"{r['stage']} {'ok' if r['ok'] else 'FAILED: ' + str(r['error'])} ({r['run_id']})"
        )
    click.echo(summary(outcomes))
