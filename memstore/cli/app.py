"""The root click group and options shared by every command."""

from __future__ import annotations

import functools
import importlib
import json
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from memstore import __version__
from memstore.config import Settings, default_db_path
from memstore.errors import MemstoreError, NotFoundError

if TYPE_CHECKING:
    from memstore.db.engine import Database
    from memstore.search_reader import SearchReader
    from memstore.store import Store

F = TypeVar("F", bound=Callable[..., Any])

# Where a command's store lives: a SQLite file, or a PostgreSQL URL (a str,
# normalised to the driver's scheme by memstore.db.target.parse).
Location = Path | str


class DbLocation(click.ParamType):  # type: ignore[type-arg]
    """``--db``: a file path or a database URL. A URL is checked here, so an
    unsupported one is a usage error, never a file or folder named after it
    (click.Path would fold ``postgresql://h/db`` into ``postgresql:/h/db``)."""

    name = "PATH|URL"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> Location:
        if isinstance(value, Path):
            return value
        # Here, not at the top: `memstore --help` must not import SQLAlchemy
        # (memstore.db's package imports it).
        from memstore.db.target import parse

        raw = str(value)
        if not raw:
            self.fail("an empty --db names no database", param, ctx)
        try:
            target = parse(raw)
        except MemstoreError as e:
            self.fail(str(e), param, ctx)
        if target.url is not None:
            return target.url
        assert target.path is not None
        if target.path.is_dir():
            self.fail(f"{target.path} is a directory, not a database file", param, ctx)
        return target.path


DB = DbLocation()


class InputText(click.ParamType):  # type: ignore[type-arg]
    """Text a command stores or searches for: ``-`` reads standard input, and
    empty (or blank) text is a usage error rather than something stored."""

    name = "TEXT"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value)
        if text == "-":
            if ctx is not None:
                if ctx.meta.get("memstore.stdin"):
                    self.fail("only one option can read standard input ('-')", param, ctx)
                ctx.meta["memstore.stdin"] = True
            text = sys.stdin.read()
            # What echo or a here-document adds, not part of the text.
            text = text.removesuffix("\n").removesuffix("\r")
        if not text.strip():
            self.fail("empty text (nothing to store or search for)", param, ctx)
        return text


TEXT = InputText()


def shown(location: Location) -> str:
    """A location for messages (a URL's password hidden)."""
    from memstore.db.target import safe_url

    return safe_url(location) if isinstance(location, str) else str(location)


def load_commands(group: click.Group, module: str) -> None:
    """Import a command module. memstore's own modules add their commands to
    ``cli`` as they are defined; a host's module (the Hermes provider's, which
    must not depend on memstore's CLI) hands its command over as ``COMMAND``."""
    command = getattr(importlib.import_module(module), "COMMAND", None)
    if isinstance(command, click.Command) and command.name not in group.commands:
        group.add_command(command)


class LazyGroup(click.Group):
    """Imports a command's module only when that command runs."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        from memstore.cli.commands import COMMANDS

        return sorted(set(COMMANDS) | set(self.commands))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        from memstore.cli.commands import COMMANDS, MODULES

        if cmd_name not in self.commands:
            modules = COMMANDS[cmd_name][0] if cmd_name in COMMANDS else MODULES
            for module in modules:
                load_commands(self, module)
        elif cmd_name in COMMANDS:  # a group whose subcommands live in several modules
            for module in COMMANDS[cmd_name][0]:
                load_commands(self, module)
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        from memstore.cli.commands import COMMANDS

        rows = [(name, COMMANDS[name][1]) for name in sorted(COMMANDS)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(
    cls=LazyGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(version=__version__, prog_name="memstore")
@click.option(
    "--db", "db", type=DB, default=None,
    help="Database file or PostgreSQL URL for every command (default: $MEMSTORE_DB, else the "
    "user data directory).",
)  # fmt: skip
def cli(db: Location | None) -> None:
    """memstore: event-sourced long-term memory for LLM agents, on one SQLite file.

    --db PATH goes before the command or after it (default: $MEMSTORE_DB,
    else the user data directory); a postgresql:// URL opens PostgreSQL
    instead. --user defaults to $MEMSTORE_USER.
    Commands that list data take --json, --nl, --csv or --tsv; text
    arguments take - to read standard input.

    \b
    Example:
      memstore doctor
      memstore --db ./agent.db memories list --user alice
      memstore demo
    """


def db_option(f: F) -> F:
    return click.option(
        "--db",
        "db",
        type=DB,
        default=None,
        help="Database file or PostgreSQL URL (default: memstore --db, $MEMSTORE_DB, the user "
        "data directory).",
    )(f)


def json_option(f: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON.")(f)


_OUTPUT = "memstore.output"
OUTPUT_FORMATS = {
    "json": "Print a JSON array.",
    "nl": "Print one JSON object per line (newline-delimited JSON).",
    "csv": "Print CSV with a header row (nested values as JSON).",
    "tsv": "Print tab-separated values with a header row (nested values as JSON).",
}


def _choose_output(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    if value:
        name = "json" if param.name == "as_json" else param.name
        chosen = ctx.meta.get(_OUTPUT)
        if chosen is not None and chosen != name:
            raise click.UsageError("choose one of --json, --nl, --csv, --tsv")
        ctx.meta[_OUTPUT] = name
    return value


def list_output(f: F) -> F:
    """--json, --nl, --csv, --tsv for a command that lists rows.

    The command sees ``as_json`` (True for any of them) and prints its rows
    with ``echo_json``, which writes them in the chosen format."""

    @functools.wraps(f)
    def run(*args: Any, **kwargs: Any) -> Any:
        kwargs["as_json"] = click.get_current_context().meta.get(_OUTPUT) is not None
        return f(*args, **kwargs)

    for name in reversed(OUTPUT_FORMATS):
        run = click.option(
            f"--{name}",
            name if name != "json" else "as_json",
            is_flag=True,
            callback=_choose_output,
            expose_value=name == "json",
            help=OUTPUT_FORMATS[name],
        )(run)
    return run  # type: ignore[return-value]


def resolve_db(db: Location | None) -> Location:
    """The command's --db, else the one given before the command, else
    $MEMSTORE_DB (a path or URL), else the user data directory's file."""
    if db is not None:
        return db
    ctx = click.get_current_context(silent=True)
    root = ctx.find_root().params.get("db") if ctx is not None else None
    if root is not None:
        return root if isinstance(root, str) else Path(root)
    from memstore.db.target import looks_like_url, parse

    env = os.environ.get("MEMSTORE_DB", "")
    if env and looks_like_url(env):
        url = parse(env).url
        assert url is not None  # a URL scheme that parses is PostgreSQL's
        return url
    return default_db_path()


def user_option_optional(f: F) -> F:
    return click.option(
        "--user", "user", default=None, envvar="MEMSTORE_USER", show_envvar=True,
        help="User id.",
    )(f)  # fmt: skip


def existing_db(db: Location | None) -> Location:
    """The database location, which must exist: a reading command never
    creates a file (a PostgreSQL database must exist on its server anyway)."""
    path = resolve_db(db)
    if isinstance(path, Path) and not path.is_file():
        raise NotFoundError(
            f"no database at {path}: check --db / $MEMSTORE_DB (nothing was created)"
        )
    return path


def open_store(
    db: Location | None,
    *,
    background: bool = False,
    must_exist: bool = False,
    fallbacks: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> Store:
    """Open the store for one command; background threads only when asked.

    Commands that only read pass ``must_exist``: a mistyped path is an error
    naming it, not a new empty database (and folders) created in passing.
    ``fallbacks`` go to ``Settings.load`` (the upstream's names, on the paths
    that speak its language)."""
    path = existing_db(db) if must_exist else resolve_db(db)
    from memstore.store import Store

    settings = Settings.load(fallbacks=fallbacks)
    if not background:
        settings = settings.replace(background_indexer=False, scheduler=False)
    return Store.open(path, settings=settings, **kwargs)


@contextmanager
def read_database(db: Location | None) -> Iterator[Database]:
    """The database of an existing store, without the engine around it.

    For commands that only read a few rows (``users list``): no search, no
    derivation, no LLM client and no migration code is imported, so they start in
    a fraction of the time a whole ``Store`` takes. The schema is not upgraded:
    an out-of-date store answers the query it can, or the error names it."""
    path = existing_db(db)
    from memstore.db.connect import open_database

    settings = Settings.load()
    database = open_database(
        path,
        busy_timeout_ms=settings.storage.busy_timeout_ms,
        durability=settings.storage.durability,
    )
    try:
        yield database
    finally:
        database.close()


@contextmanager
def searching(db: Location | None) -> Iterator[SearchReader | Store]:
    """What ``memstore search`` searches: the database itself while it is
    current, without the migration code, the pipeline or its scheduler
    (``memstore.search_reader``); else a whole ``Store``, which brings it
    current first. The hits are the same either way."""
    from memstore.search_reader import open_reader

    with read_database(db) as database, open_reader(database, Settings.load()) as reader:
        if reader is not None:
            yield reader
            return
    with open_store(db, must_exist=True) as store:
        yield store


def echo_json(data: Any) -> None:
    """``data`` as JSON, or, for a list under --nl/--csv/--tsv, in that format."""
    ctx = click.get_current_context(silent=True)
    fmt = ctx.meta.get(_OUTPUT) if ctx is not None else None
    if fmt in ("nl", "csv", "tsv"):
        rows = data if isinstance(data, list) else [data]
        if fmt == "nl":
            for row in rows:
                click.echo(json.dumps(row, ensure_ascii=False, default=str))
        else:
            _echo_delimited(rows, "," if fmt == "csv" else "\t")
        return
    click.echo(json.dumps(data, ensure_ascii=False, indent=2, default=str))


def _echo_delimited(rows: list[Any], delimiter: str) -> None:
    import csv
    import io

    dicts = [r if isinstance(r, dict) else {"value": r} for r in rows]
    columns: dict[str, None] = {}
    for r in dicts:
        columns.update(dict.fromkeys(r))

    def cell(value: Any) -> Any:
        if isinstance(value, dict | list | tuple):
            return json.dumps(value, ensure_ascii=False, default=str)
        return "" if value is None else value

    out = io.StringIO()
    writer = csv.writer(out, delimiter=delimiter, lineterminator="\n")
    writer.writerow(columns)
    for r in dicts:
        writer.writerow([cell(r.get(c)) for c in columns])
    click.echo(out.getvalue(), nl=False)
