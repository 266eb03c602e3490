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

from memstore.cli.app import DB, Location, cli
from memstore.hermes_home import PROVIDER_NAME, hermes_home
from memstore.hermes_install import (
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


def status_command(target: Path) -> str:
    """How to ask Hermes about ``target``: Hermes reads $HERMES_HOME (else
    ~/.hermes), so a home given with --hermes-home needs it in the command."""
    if target.expanduser().resolve() == hermes_home().expanduser().resolve():
        return "hermes memory status"
    return f"HERMES_HOME={shlex.quote(str(target))} hermes memory status"


@cli.group("hermes")
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
    type=DB,
    default=None,
    help="Database file (default: memstore.db in the Hermes home; $MEMSTORE_DB wins).",
)
@click.option("--force", is_flag=True, help="Replace a plugins/memstore folder not made by us.")
def install_cmd(home: Path | None, db: Location | None, force: bool) -> None:
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
    if isinstance(db, str):
        # The provider's db_path setting is a file; a server is named by the
        # environment Hermes runs in, so the URL is not written to a config file.
        raise click.BadParameter(
            "hermes install --db takes a file path; for PostgreSQL set MEMSTORE_DB to the URL "
            "in the environment Hermes runs in",
            param_hint="--db",
        )
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
