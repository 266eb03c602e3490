"""The ``memstore`` command line: groups by noun, ``--db`` everywhere, ``--json`` on lists."""

from __future__ import annotations

import sys

import click

from memstore.cli.app import cli
from memstore.errors import MemstoreError

# Each module registers its commands on ``cli`` when imported.
from memstore.cli import core as _core  # noqa: F401  isort: skip
from memstore.cli import bench as _bench  # noqa: F401  isort: skip
from memstore.cli import data as _data  # noqa: F401  isort: skip
from memstore.cli import demo as _demo  # noqa: F401  isort: skip
from memstore.cli import derive as _derive  # noqa: F401  isort: skip
from memstore.cli import hermes as _hermes  # noqa: F401  isort: skip
from memstore.cli import pipeline as _pipeline  # noqa: F401  isort: skip
from memstore.cli import serve as _serve  # noqa: F401  isort: skip
from memstore.cli import porting as _porting  # noqa: F401  isort: skip
from memstore.cli import users as _users  # noqa: F401  isort: skip
from memstore.cli import doctor_view  # isort: skip

doctor_view.register()


def main(argv: list[str] | None = None) -> None:
    try:
        cli.main(args=argv, prog_name="memstore", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except MemstoreError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)


__all__ = ["cli", "main"]
