"""``import`` and ``export``: bringing data in (memstore JSONL, the upstream's
data directory, its seed files) and taking it out (JSONL, Markdown)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from tqdm import tqdm

from memstore.cli.app import Location, cli, db_option, open_store, user_option_optional
from memstore.errors import InvalidInputError, StorageError

FORMATS = ["jsonl", "upstream", "seed", "memstore"]


def is_export(text: str) -> bool:
    """Whether ``text`` starts with the header line ``memstore export`` writes."""
    from memstore.porting.events_io import EXPORT_FORMAT

    first = text.lstrip("\ufeff").split("\n", 1)[0].strip()
    try:
        head = json.loads(first)
    except ValueError:
        return False
    return isinstance(head, dict) and head.get("format") == EXPORT_FORMAT and "type" not in head


@cli.command("import")
@db_option
@click.argument("path", type=click.Path(path_type=Path, allow_dash=True))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default=None,
    help="What PATH holds (below). Default: a directory is upstream, a file whose "
    "first line is a memstore export header is memstore, else jsonl.",
)
@user_option_optional
@click.option("--session-key", default="", help="seed: session for entries without sessionKey.")
@click.option("--no-embed", is_flag=True, help="Leave embedding to the background indexer.")
@click.option("--derive", is_flag=True, help="Derive memories from imported messages now.")
@click.option(
    "--allow-erased", is_flag=True,
    help="Import data of users erased before (by default it is skipped: an import must not "
    "undo an erasure).",
)  # fmt: skip
def import_(
    db: Location | None,
    path: Path,
    fmt: str | None,
    user: str | None,
    session_key: str,
    no_embed: bool,
    derive: bool,
    allow_erased: bool,
) -> None:
    """Import conversations or a whole memory, checking every line.

    \b
    Formats:
      jsonl     one message per line: {"user", "session", "role", "content",
                "timestamp"?, "id"?}; PATH "-" reads standard input
      upstream  a TencentDB Agent Memory data directory (conversations/,
                records/, scene_blocks/, persona.md) into --user: L0 to L3
      seed      the upstream's seed JSON (format A {"sessions": [...]} or B
                [...]) into --user
      memstore  a `memstore export` file: restores the events exactly

    An upstream directory's vectors.db, when present, says which L1 records
    the upstream still serves: records it merged or deleted are not brought
    back (the summary counts live, merged and deleted ones). Data of a user
    erased here before (memstore users forget) is skipped and reported,
    unless --allow-erased.

    Bad lines are reported with their line number and skipped; every good one
    is imported, and the command exits 1 if anything was skipped. Importing
    the same input again stores nothing twice. A longer line than 16 MiB is
    reported and skipped as it is read. One import reads at most 512 MiB (a
    directory's files together): larger or endless input (a pipe that never
    ends, /dev/zero) stops at once with the line it reached, nothing
    imported. Two lines giving one message id with different content: the
    second is reported and skipped.

    \b
    Example:
      memstore import chats.jsonl
      memstore import ~/.memory-tencentdb/memory-tdai --format upstream --user alice
      memstore import history.json --format seed --user alice
      memstore export --user alice | memstore import - --db copy.db
    """
    from memstore.porting.report import ImportReport, read_text

    if fmt is None and str(path) != "-" and path.is_dir():
        fmt = "upstream"

    if fmt in ("upstream", "seed") and not user:
        raise click.UsageError(f"--format {fmt} needs --user (or MEMSTORE_USER)")
    if user is not None:
        from memstore.porting.report import strict_id

        user = strict_id("--user", user)
    if fmt == "upstream" and str(path) == "-":
        raise click.UsageError("--format upstream reads a directory, not standard input")
    if str(path) != "-" and not path.exists():
        raise InvalidInputError(f"{path} does not exist")
    report = ImportReport()
    name = "<stdin>" if str(path) == "-" else str(path)
    text = None
    if fmt != "upstream":
        if str(path) != "-" and path.is_dir():
            raise InvalidInputError(f"{path} is a directory; --format {fmt} reads a file")
        # Line by line formats skip an over-long line; a seed is one document.
        text = read_text(
            sys.stdin.buffer if str(path) == "-" else path,
            name,
            report=report if fmt in (None, "jsonl", "memstore") else None,
        )
        if not text.strip():
            raise InvalidInputError(f"{name} is empty: nothing to import")
        if fmt is None:
            fmt = "memstore" if is_export(text) else "jsonl"
    assert fmt is not None
    from memstore.porting.upstream_env import settings_fallbacks

    # The upstream's data comes with the upstream's environment (its LLM variables).
    upstream = fmt in ("upstream", "seed")
    with open_store(db, fallbacks=settings_fallbacks() if upstream else None) as store:
        from memstore.porting.erased import Erased

        erased = Erased(store, allow=allow_erased)
        if fmt in ("upstream", "seed") and (why := erased.covers(user or "")) is not None:
            raise InvalidInputError(why)
        if fmt == "upstream":
            from memstore.porting.upstream import read_upstream
            from memstore.porting.upstream_apply import import_upstream

            data = read_upstream(path, report)
            with tqdm(total=data.size, unit="item", desc="import", disable=None) as bar:
                import_upstream(store, data, user or "", report, bar.update, erased)
        elif fmt == "seed":
            from memstore.porting.seed import parse_seed, seed_store

            try:
                raw = json.loads(text or "")
            except ValueError as exc:
                raise InvalidInputError(f"{name} is not JSON: {exc}") from None
            sessions = parse_seed(raw, fallback_session_key=session_key)
            summary = seed_store(store, sessions, user or "")
            report.add("sessions", summary.sessions_processed)
            report.add("messages stored", summary.l0_recorded)
            report.add("already known", summary.already_known)
        else:
            # A final newline starts no line; blank lines and a header are read but not
            # counted by the importers, so the bar is completed once they return.
            total = len((text or "").splitlines())
            with tqdm(total=total, unit="line", desc="import", disable=None) as bar:
                if fmt == "jsonl":
                    from memstore.porting.jsonl import import_messages

                    import_messages(store, text or "", name, report, bar.update, erased)
                else:
                    from memstore.porting.export import restore_events

                    restore_events(store, text or "", name, report, bar.update, erased)
                bar.update(max(0, total - bar.n))
        derived = None
        if derive and fmt in ("jsonl", "seed") and report.counts.get("messages stored"):
            from memstore.cli.pipeline import derive_now

            derived = derive_now(store, user)
        if not no_embed and store.embedding_model is not None:
            pending = store.pending_embeddings()
            if pending:
                with tqdm(total=pending, unit="row", desc="embed", disable=None) as bar:
                    store.reindex(progress=bar.update)
    for p in report.problems:
        click.echo(f"skipped {p}", err=True)
    counts = ", ".join(_count(n, what) for what, n in report.counts.items()) or "nothing"
    click.echo(f"imported: {counts}; {len(report.problems)} problem(s)")
    if fmt in ("jsonl", "seed") and report.counts.get("messages stored"):
        from memstore.cli.data import next_step

        click.echo(derived or next_step(user, db, embedded=not no_embed))
    if report.problems:
        # One closing error line, as every other failing command prints.
        click.echo(
            f"error: {len(report.problems)} line(s) or file(s) skipped; "
            "fix them and run the import again (it is idempotent)",
            err=True,
        )
        sys.exit(1)


@cli.command("export")
@db_option
@user_option_optional
@click.option("--all", "all_", is_flag=True, help="Every user (and events of no user).")
@click.option("--markdown", is_flag=True, help="A readable copy of memories, scenes, persona.")
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
    help="Write here instead of standard output.",
)  # fmt: skip
def export(
    db: Location | None, user: str | None, all_: bool, markdown: bool, output: Path | None
) -> None:
    """Export a user's data (or everyone's) as JSONL events or Markdown.

    The JSONL is the user's part of the event log; `memstore import FILE`
    restores it exactly (the format is recognised), into this or another
    database.

    \b
    Example:
      memstore export --user alice -o alice.jsonl
      memstore export --all -o everything.jsonl
      memstore export --user alice --markdown
    """
    from memstore.porting.export import export_events, export_markdown
    from memstore.porting.inventory import user_ids

    if bool(user) == all_:
        raise click.UsageError("give --user USER or --all")
    with open_store(db, must_exist=True) as store:
        if markdown:
            chunks = [export_markdown(store, user_ids(store) if all_ else [user or ""])]
        else:
            chunks = [
                json.dumps(e, ensure_ascii=False) + "\n"
                for e in export_events(store, None if all_ else user)
            ]
    if output is None:
        click.echo("".join(chunks), nl=False)
    else:
        try:
            output.write_text("".join(chunks), encoding="utf-8")
        except OSError as e:
            raise StorageError(f"cannot write {output}: {e.strerror or e}") from None
        click.echo(f"wrote {output}", err=True)


# The importers name their counts in the plural ("messages stored"); one of a
# kind reads "1 message stored".
_SINGULAR = {"messages": "message", "events": "event", "memories": "memory",
             "scenes": "scene", "records": "record", "sessions": "session"}  # fmt: skip


def _count(n: int, what: str) -> str:
    head, _, rest = what.partition(" ")
    if n == 1 and head in _SINGULAR:
        what = " ".join(filter(None, (_SINGULAR[head], rest)))
    return f"{n} {what}"
