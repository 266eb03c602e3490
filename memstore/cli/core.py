"""Core commands: doctor, db, events, projections."""

from __future__ import annotations

import platform
import sys
from pathlib import Path
from typing import Any

import click
from tqdm import tqdm

from memstore.cli import doctor_view
from memstore.cli.app import (
    Location,
    cli,
    db_option,
    echo_json,
    existing_db,
    json_option,
    list_output,
    open_store,
    resolve_db,
    shown,
)
from memstore.cli.table import ID_WIDTH, print_table
from memstore.db import migrate, presence
from memstore.db.connect import open_database
from memstore.db.driver import module_name, sqlite_module
from memstore.errors import MemstoreError, NotFoundError
from memstore.redact import redact, strip_credentials


def doctor_report(db: Location) -> tuple[dict[str, Any], list[str]]:
    """Collect what doctor shows; returns (report, problems)."""
    problems: list[str] = []
    report: dict[str, Any] = {"python": sys.version.split()[0], "platform": platform.platform()}
    try:
        mod = sqlite_module()
        report["sqlite_module"] = module_name(mod)
        report["sqlite_version"] = mod.sqlite_version
    except MemstoreError as e:
        problems.append(str(e))
        return report, problems
    if isinstance(db, str):
        _doctor_database(db, report, problems)
    else:
        db = _doctor_file(db, report, problems)
    if report.get("schema_revision") not in (None, report.get("schema_head")):
        problems.append(
            f"schema at {report['schema_revision']}, code expects {report['schema_head']}: "
            "run `memstore db upgrade`"
        )
    _doctor_llm(db, report, problems)
    revision = report.get("schema_revision")
    if revision is not None and revision == report.get("schema_head"):
        report["vector_quarantine"] = _quarantine_line(db)
        report["pipeline_waiting"] = _waiting_line(db)
    from memstore.cli import doctor_extra

    for check in doctor_extra.CHECKS:
        check(db, report, problems)
    doctor_view.check_spaces(db, report, problems)
    return report, problems


def _doctor_file(db: Path, report: dict[str, Any], problems: list[str]) -> Path:
    """SQLite's abilities, on the file or (when it does not exist) a scratch one."""
    report["database"] = str(db)
    if not db.is_file():
        # Doctor only reads: check SQLite's abilities on a scratch file instead.
        report["database"] = f"{db} (does not exist yet: the first capture or import creates it)"
        db = doctor_view.scratch_db()
    _doctor_database(db, report, problems)
    return db


def _doctor_database(db: Location, report: dict[str, Any], problems: list[str]) -> None:
    """The engine's abilities (SQLite: sqlite-vec, FTS5; PostgreSQL: server and
    pgvector versions) and the schema revision."""
    try:
        database = open_database(db)
        try:
            if isinstance(db, str):
                report["database"] = shown(db)
            report.update(database.backend.versions(database))
            report["schema_revision"] = migrate.current_revision(database)
            report["schema_head"] = migrate.head_revision()
        finally:
            database.close()
    except MemstoreError as e:
        problems.append(str(e))


def _doctor_llm(db: Location, report: dict[str, Any], problems: list[str]) -> None:
    """Who derives with this configuration, and who did last (from the log)."""
    from memstore.config import Settings
    from memstore.derive.fallback import describe_failures, output_failures
    from memstore.derive.runs import describe_derivation, last_derivation

    try:
        settings = Settings.load()
    except MemstoreError as e:
        problems.append(f"llm: {e}")
        return
    if settings.llm.deriver == "rules":
        report["llm"] = 'rules: offline rule-based deriver (forced by deriver = "rules")'
    elif settings.llm.configured:
        where = strip_credentials(settings.llm.base_url)
        report["llm"] = f"llm: {where} (model {settings.llm.model})"
    else:
        report["llm"] = (
            "rules: offline rule-based deriver (no MEMSTORE_LLM_BASE_URL / MEMSTORE_LLM_MODEL;"
            " inside Hermes, Hermes' own model derives)"
        )
    if report.get("schema_revision") is None:
        return
    try:
        database = open_database(db)
        try:
            with database.read() as conn:
                report["last_derivation"] = describe_derivation(last_derivation(conn))
                line = describe_failures(*output_failures(conn), settings.llm.fallback_after)
            if line is not None:
                report["llm_output"] = line
        finally:
            database.close()
    except MemstoreError as e:
        problems.append(f"llm: cannot read the last derivation: {e}")


def _waiting_line(db: Location) -> str:
    """What the derivation pipeline has queued, and when it runs next."""
    from memstore.pipeline.status import waiting

    database = open_database(db)
    try:
        with database.read() as conn:
            total, retrying, next_at = waiting(conn)
    finally:
        database.close()
    if not total:
        return "nothing queued"
    line = f"{total} item(s) queued"
    if retrying:
        line += f", {retrying} retrying after failures (they run by themselves)"
    return line + (f"; next run at {next_at}" if next_at else "; running now")


def _quarantine_line(db: Location) -> str:
    """Rows the indexer set aside (their vectors are missing until a retry works)."""
    from memstore.vectors import quarantine

    database = open_database(db)
    try:
        with database.read() as conn:
            held = quarantine.items(conn, limit=3)
            total = sum(quarantine.counts(conn).values())
    finally:
        database.close()
    if not total:
        return "none"
    shown = "; ".join(
        f"{q.space} #{q.source_id} (user {q.user_id}, {q.attempts} attempt(s), "
        f"retry after {q.retry_after}): {q.error}"
        for q in held
    )
    return f"{total} row(s) not embedded, retried later: {shown}"


@cli.command()
@db_option
@json_option
def doctor(db: Location | None, as_json: bool) -> None:
    """Check the installation: Python, SQLite, sqlite-vec, FTS5, schema, embedder, LLM.

    Exits non-zero with a clear message when something essential is missing.

    \b
    Example:
      memstore doctor
      memstore doctor --db ./agent.db --json
    """
    report, found = doctor_report(resolve_db(db))
    # Problems quote what failed, which may be a URL with its credentials.
    problems = [redact(p) for p in found]
    report["problems"] = problems
    if as_json:
        echo_json(report)
    else:
        for line in doctor_view.lines({k: v for k, v in report.items() if k != "problems"}):
            click.echo(line)
        for p in problems:
            click.echo(f"problem: {p}", err=True)
        if not problems:
            click.echo("ok")
    if problems:
        sys.exit(1)


@cli.group("db")
def db_group() -> None:
    """Schema migrations of the database file.

    \b
    Example:
      memstore db current
      memstore db upgrade
    """


@db_group.command("upgrade")
@db_option
@click.argument("revision", default="head")
def db_upgrade(db: Location | None, revision: str) -> None:
    """Upgrade the schema (default: to the newest revision).

    Projections whose tables changed are rebuilt from the log on the next open.
    Refused, with nothing changed, while any process has the store open
    (memstore serve, an agent, another command): close them first.

    \b
    Example:
      memstore db upgrade --db ./agent.db
    """
    database = open_database(resolve_db(db))
    try:
        with presence.exclusive(database):
            stale = migrate.upgrade(database, revision, owners=_owners())
        click.echo(f"at {migrate.current_revision(database)}")
        _echo_stale(stale)
    finally:
        database.close()


@db_group.command("downgrade")
@db_option
@click.argument("revision")
@click.option(
    "--yes", is_flag=True, help="Confirm a downgrade that deletes data (e.g. the event log)."
)
def db_downgrade(db: Location | None, revision: str, yes: bool) -> None:
    """Downgrade the schema to REVISION.

    A downgrade that would drop data the log cannot give back ("base" drops
    the event log itself) changes nothing and exits non-zero unless --yes is
    given. Projections whose tables changed are rebuilt on the next open.
    Refused, with nothing changed, while any process has the store open.

    \b
    Example:
      memstore db downgrade 0005
      memstore db downgrade base --yes
    """
    database = open_database(existing_db(db))
    try:
        with presence.exclusive(database):
            stale = migrate.downgrade(database, revision, allow_data_loss=yes, owners=_owners())
        click.echo(f"at {migrate.current_revision(database) or 'base'}")
        _echo_stale(stale)
    finally:
        database.close()


def _owners() -> dict[str, str]:
    from memstore.assembly import default_projections

    return migrate.projection_tables(default_projections())


def _echo_stale(stale: list[str]) -> None:
    if stale:
        click.echo(f"projections to rebuild from the log on next open: {', '.join(stale)}")


@db_group.command("current")
@db_option
def db_current(db: Location | None) -> None:
    """Show the schema revision of the database and the newest one this code knows.

    \b
    Example:
      memstore db current
    """
    database = open_database(existing_db(db))  # reading: a wrong path creates nothing
    try:
        cur = migrate.current_revision(database)
        click.echo(f"current: {cur or 'none'}\nhead:    {migrate.head_revision()}")
    finally:
        database.close()


@cli.group("events")
def events_group() -> None:
    """Read the event log (the only source of truth).

    \b
    Example:
      memstore events tail -n 5
    """


@events_group.command("tail")
@db_option
@list_output
@click.option("-n", "n", type=click.IntRange(min=1), default=20, show_default=True,
              help="How many events.")  # fmt: skip
def events_tail(db: Location | None, as_json: bool, n: int) -> None:
    """Show the newest N events.

    \b
    Example:
      memstore events tail -n 50 --json
    """
    with open_store(db, must_exist=True) as store:
        rows = store.tail(n)
    if as_json:
        from memstore.porting.events_io import event_to_dict

        echo_json([event_to_dict(e) for e in rows])
        return
    print_table(
        ["POSITION", "OCCURRED", "TYPE", "USER", "STREAM"],
        [[e.position, e.occurred_at[:19], e.type, e.user_id, e.stream] for e in rows],
        limits=[10, 19, 28, ID_WIDTH, ID_WIDTH],
        empty="the log is empty",
    )


@cli.group("projections")
def projections_group() -> None:
    """Projections: tables derived from the log, rebuildable at any time.

    \b
    Example:
      memstore projections status
      memstore projections rebuild --all
    """


@projections_group.command("status")
@db_option
@list_output
def projections_status(db: Location | None, as_json: bool) -> None:
    """Show each projection's checkpoint and lag behind the log.

    \b
    Example:
      memstore projections status --json
    """
    with open_store(db, must_exist=True) as store:
        rows = store.projection_status()
    data = [
        {
            "name": s.name,
            "inline": s.inline,
            "position": s.position,
            "head": s.head,
            "lag": s.lag,
            "version": s.code_version,
        }
        for s in rows
    ]
    if as_json:
        echo_json(data)
        return
    print_table(
        ["PROJECTION", "APPLIED", "POSITION", "HEAD", "LAG"],
        [[d["name"], "inline" if d["inline"] else "background", d["position"], d["head"],
          d["lag"]] for d in data],
    )  # fmt: skip
    held = _quarantine_line(resolve_db(db))
    if held != "none":
        click.echo(f"vector quarantine: {held}")


@projections_group.command("rebuild")
@db_option
@click.argument("name", required=False)
@click.option("--all", "all_", is_flag=True, help="Rebuild every projection.")
def projections_rebuild(db: Location | None, name: str | None, all_: bool) -> None:
    """Empty a projection (or all) and replay the log into it, with a progress bar.

    \b
    Example:
      memstore projections rebuild --all
      memstore projections rebuild l1_memories
    """
    if not name and not all_:
        raise click.UsageError("give a projection NAME or --all")
    with open_store(db, must_exist=True) as store:
        names = None if all_ else [name or ""]
        if names and names[0] not in store.projection_names:
            known = ", ".join(sorted(store.projection_names))
            raise NotFoundError(f"no projection named {names[0]!r}; known: {known}")
        total = store.event_count()
        with tqdm(total=total, unit="ev", desc="rebuild", disable=None) as bar:
            n = store.rebuild(names, progress=bar.update)
    click.echo(f"replayed {n} events into {'all projections' if all_ else name}")
