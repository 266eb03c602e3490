"""Forgetting commands: messages, a session, a time range, retention.

``memstore memories forget --with-sources`` (memstore/cli/derive.py) and
``memstore users forget`` (memstore/cli/data.py) are the other grains; all
print the same report (``echo_report``). docs/forgetting.md says what each
guarantees.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import click

from memstore.cli.app import (
    Location,
    cli,
    db_option,
    echo_json,
    json_option,
    open_store,
    resolve_db,
)
from memstore.cli.data import EXIT_NOT_COMPACTED

_WAIT = click.option(
    "--wait", type=click.FloatRange(0, 3600), default=10.0, show_default=True,
    help="Seconds to wait for other readers before giving up on compaction.",
)  # fmt: skip
_VACUUM_FULL = click.option(
    "--vacuum-full", is_flag=True,
    help="PostgreSQL: rewrite the tables (VACUUM FULL) so no erased byte stays in a data file.",
)  # fmt: skip
_USER = click.option("--user", "user_id", required=True, envvar="MEMSTORE_USER", help="User id.")


def echo_report(reports: Any, db: Location | None, as_json: bool) -> None:
    """Print one or more ``ForgetReport``s; exit 3 when erased bytes remain."""
    many = reports if isinstance(reports, list) else [reports]
    if as_json:
        echo_json([dataclasses.asdict(r) for r in many] if isinstance(reports, list)
                  else dataclasses.asdict(reports))  # fmt: skip
    for r in [] if as_json else many:
        verb = "would erase" if r.dry_run else "erased"
        click.echo(
            f"{r.user_id}: {verb} {r.messages_removed} message(s), {r.memories_removed} "
            f"memory(ies), {r.scenes_removed} scene(s), {r.personas_removed} persona version(s) "
            f"({r.events_removed} event(s) deleted, {r.events_rewritten} rewritten)"
        )
    if any(not r.dry_run and not r.compacted for r in many):
        from memstore.db.compaction import is_pending_at

        if is_pending_at(resolve_db(db)):
            detail = next(r.detail for r in many if not r.compacted)
            click.echo(f"error: the erased content is still in the file: {detail}", err=True)
            sys.exit(EXIT_NOT_COMPACTED)


@cli.group("messages")
def messages_group() -> None:
    """L0 messages: erase some.

    \b
    Example:
      memstore messages forget --user alice m-17 m-18
    """


@messages_group.command("forget")
@db_option
@json_option
@_USER
@click.argument("message_ids", nargs=-1, required=True)
@_WAIT
@_VACUUM_FULL
def messages_forget(
    db: Location | None,
    as_json: bool,
    user_id: str,
    message_ids: tuple[str, ...],
    wait: float,
    vacuum_full: bool,
) -> None:
    """Erase messages, the memories extracted from them, and the scene and
    persona text built from those (rebuilt from what is left).

    \b
    Example:
      memstore messages forget --user alice 3f2a9c0d 77b1e2aa
    """
    with open_store(db, must_exist=True) as store:
        rep = store.forget_messages(user_id, list(message_ids), wait_s=wait,
                                    vacuum_full=vacuum_full)  # fmt: skip
    echo_report(rep, db, as_json)


@cli.group("sessions")
def sessions_group() -> None:
    """Sessions: erase one.

    \b
    Example:
      memstore sessions forget --user alice session-1
    """


@sessions_group.command("forget")
@db_option
@json_option
@_USER
@click.argument("session_id")
@_WAIT
@_VACUUM_FULL
def sessions_forget(
    db: Location | None, as_json: bool, user_id: str, session_id: str, wait: float,
    vacuum_full: bool,
) -> None:  # fmt: skip
    """Erase a session: its messages and everything derived from them.

    \b
    Example:
      memstore sessions forget --user alice s1
    """
    with open_store(db, must_exist=True) as store:
        rep = store.forget_session(user_id, session_id, wait_s=wait, vacuum_full=vacuum_full)
    echo_report(rep, db, as_json)


@cli.group("retention")
def retention_group() -> None:
    """Erase what is older than the retention limits (MEMSTORE_RETENTION_DAYS).

    \b
    Example:
      memstore retention run --dry-run --days 30
    """


@retention_group.command("run")
@db_option
@json_option
@click.option("--days", type=click.FloatRange(min=0), default=None,
              help="This limit instead of the retention_days setting.")  # fmt: skip
@click.option("--dry-run", is_flag=True, help="Only report what would be erased.")
@_WAIT
def retention_run(
    db: Location | None, as_json: bool, days: float | None, dry_run: bool, wait: float
) -> None:
    """Erase, for every user, what was said more than the retention limit ago,
    with everything derived from it.

    \b
    Example:
      MEMSTORE_RETENTION_DAYS=365 memstore retention run --dry-run
    """
    from memstore.forgetting.retention import Policy

    with open_store(db, must_exist=True) as store:
        if days is None and not Policy.of(store.settings).active:
            click.echo("retention is off (no retention_* limit is set): nothing to do")
            return
        reps = store.apply_retention(days=days, dry_run=dry_run, wait_s=wait)
    if not reps and not as_json:
        click.echo("nothing is past the retention limits")
    echo_report(reps, db, as_json)
