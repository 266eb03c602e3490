"""The ``memstore`` command line: groups by noun, ``--db`` everywhere, ``--json`` on lists.

``main`` imports a command's module only when it runs (see ``commands.py``);
``from memstore.cli import cli`` gives the group with every command loaded.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from memstore.cli.app import cli as _group
from memstore.cli.app import load_commands
from memstore.errors import MemstoreError
from memstore.redact import redact


def load_all() -> click.Group:
    """The root group with every command module imported."""
    from memstore.cli.commands import MODULES

    for module in MODULES:
        load_commands(_group, module)
    return _group


def main(argv: list[str] | None = None) -> None:
    try:
        _group.main(args=argv, prog_name="memstore", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.exceptions.UsageError as e:
        # click's own "Error:" line, in memstore's one error style; usage first.
        if e.ctx is not None:
            click.echo(e.ctx.get_usage(), err=True)
            click.echo(f"Try '{e.ctx.command_path} --help' for help.", err=True)
        click.echo(f"error: {e.format_message()}", err=True)
        sys.exit(e.exit_code)
    except click.ClickException as e:
        click.echo(f"error: {e.format_message()}", err=True)
        sys.exit(e.exit_code)
    except MemstoreError as e:
        click.echo(f"error: {redact(str(e))}", err=True)
        sys.exit(1)
    except OSError as e:
        # A file or pipe the command was given failed (a full disk, a closed
        # pipe): one line, never a traceback.
        where = f" ({e.filename})" if e.filename else ""
        click.echo(f"error: {e.strerror or e}{where}", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)


def __getattr__(name: str) -> Any:
    if name == "cli":
        return load_all()
    raise AttributeError(f"module 'memstore.cli' has no attribute {name!r}")


__all__ = ["cli", "load_all", "main"]
