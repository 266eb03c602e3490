"""Plain-text tables with a header row, for the listing commands."""

from __future__ import annotations

from collections.abc import Sequence

import click

# Ids are at most 256 characters (memstore.validate): a table shows them whole.
ID_WIDTH = 256


def plural(n: int, one: str, many: str | None = None) -> str:
    """``1 memory``, ``2 memories``: a count with its noun in the right number."""
    return f"{n} {one if n == 1 else many or one + 's'}"


def _cell(value: object, limit: int) -> str:
    text = "-" if value is None or value == "" else str(value).replace("\n", " ")
    return text if len(text) <= limit else text[: max(limit - 1, 1)] + "…"


def print_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[object]],
    *,
    limits: Sequence[int] | None = None,
    empty: str = "nothing to show",
) -> None:
    """Columns as wide as their widest cell (cut at ``limits``); the last one ragged."""
    if not rows:
        click.echo(empty)
        return
    caps = list(limits or [80] * len(headers))
    cells = [[_cell(v, caps[i]) for i, v in enumerate(r)] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    for line in [list(headers), *cells]:
        padded = [c.ljust(widths[i]) for i, c in enumerate(line[:-1])] + [line[-1]]
        click.echo("  ".join(padded).rstrip())


__all__ = ["ID_WIDTH", "plural", "print_table"]
