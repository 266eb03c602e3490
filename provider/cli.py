"""``memstore hermes``: install memstore as the memory provider of a Hermes agent.

Hermes 0.19.0 finds memory providers only as folders under
``$HERMES_HOME/plugins/`` whose ``__init__.py`` mentions ``MemoryProvider`` and
defines ``register(ctx)``, and activates one with ``memory.provider`` in
``$HERMES_HOME/config.yaml``. The folder written here is a three-line shim:
the provider itself stays in the installed memstore package, so upgrading
memstore upgrades the provider.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import click

from memstore.db.target import parse
from memstore.errors import MemstoreError

from .home import PROVIDER_NAME, hermes_home
from .install import (
    hook_dir,
    install,
    plugin_dir,
    provider_importable,
    uninstall,
)


def _home_option(f: Any) -> Any:
    return click.option(
        "--hermes-home",
        "home",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        envvar="HERMES_HOME",
        show_envvar=True,
        help="The Hermes home directory (default: ~/.hermes).",
    )(f)


def _db_file(ctx: click.Context, param: click.Parameter, value: str | None) -> Path | None:
    """``--db``: a database file. A server is named by the environment Hermes
    runs in, so a URL is not written to a config file."""
    if value is None:
        return None
    if not value:
        raise click.BadParameter("an empty --db names no database", ctx, param)
    try:
        target = parse(value)
    except MemstoreError as exc:
        raise click.BadParameter(str(exc), ctx, param) from exc
    if target.url is not None:
        raise click.BadParameter(
            "hermes install --db takes a file path; for PostgreSQL set MEMSTORE_DB to the URL "
            "in the environment Hermes runs in",
            ctx,
            param,
        )
    assert target.path is not None
    if target.path.is_dir():
        raise click.BadParameter(f"{target.path} is a directory, not a database file", ctx, param)
    return target.path


def status_command(target: Path) -> str:
    """How to ask Hermes about ``target``: Hermes reads $HERMES_HOME (else
    ~/.hermes), so a home given with --hermes-home needs it in the command."""
    if target.expanduser().resolve() == hermes_home().expanduser().resolve():
        return "hermes memory status"
    return f"HERMES_HOME={shlex.quote(str(target))} hermes memory status"


# memstore's CLI adds this group when `memstore hermes` is asked for
# (memstore/cli/commands.py names this module); the provider does not depend
# on memstore's CLI.
@click.group("hermes")
def hermes_group() -> None:
    """Use memstore as the long-term memory of a Hermes agent (hermes-agent).

    \b
    Example:
      memstore hermes install
      hermes memory status
      memstore hermes uninstall
    """


@hermes_group.command("install")
@_home_option
@click.option(
    "--db",
    metavar="PATH",
    default=None,
    callback=_db_file,
    help="Database file (default: memstore.db in the Hermes home; $MEMSTORE_DB wins).",
)
@click.option("--force", is_flag=True, help="Replace a plugins/memstore folder not made by us.")
def install_cmd(home: Path | None, db: Path | None, force: bool) -> None:
    """Install the provider into a Hermes home and make it the active memory provider.

    Writes $HERMES_HOME/plugins/memstore/ (__init__.py and plugin.yaml), a gateway
    hook $HERMES_HOME/hooks/memstore-preload/ that loads the provider before the
    gateway serves requests, and sets memory.provider: memstore in
    $HERMES_HOME/config.yaml, keeping every other setting (and its comments).
    Hermes must run in a Python where memstore is installed.

    \b
    Example:
      memstore hermes install
      memstore hermes install --hermes-home ~/.hermes-work --db ~/memory/work.db
    """
    target = hermes_home(home)
    done = install(target, db=db, force=force)
    click.echo(f"plugin:   {done['plugin']}")
    click.echo(f"hook:     {done['hook']} (loads the provider when the gateway starts)")
    click.echo(f"config:   {done['config']} (memory.provider: {PROVIDER_NAME})")
    problem = provider_importable()
    if problem is not None:
        click.echo(
            f"warning: this Python cannot import the provider ({problem}); install "
            "memstore into the same environment as hermes-agent",
            err=True,
        )
    click.echo(f"check it with: {status_command(target)}")


@hermes_group.command("uninstall")
@_home_option
def uninstall_cmd(home: Path | None) -> None:
    """Remove the provider folder and switch memory.provider back.

    The provider that was active before `install` is restored (else built-in
    memory only). The database is kept.

    \b
    Example:
      memstore hermes uninstall
      memstore hermes uninstall --hermes-home ~/.hermes-work
    """
    target = hermes_home(home)
    done = uninstall(target)
    click.echo(("removed " if done["removed"] else "no plugin at ") + done["plugin"])
    if done["provider"] is not None:
        click.echo(f"memory.provider: {done['provider'] or '(built-in only)'}")


__all__ = ["hermes_group", "hook_dir", "install", "plugin_dir", "uninstall"]


COMMAND = hermes_group
