"""``memstore users list``: who is in the database."""

from __future__ import annotations

import click

from memstore.cli.app import Location, db_option, echo_json, list_output, read_database
from memstore.cli.data import users
from memstore.cli.table import ID_WIDTH, print_table


@users.command("list")
@db_option
@list_output
def users_list(db: Location | None, as_json: bool) -> None:
    """List users with their sessions, messages, live memories and last activity.

    \b
    Example:
      memstore users list
      memstore users list --json
    """
    from memstore.porting.inventory import users_in

    with read_database(db) as database:
        rows = users_in(database)
    if as_json:
        echo_json(rows)
        return
    print_table(
        ["USER", "SESSIONS", "MESSAGES", "MEMORIES", "LAST MESSAGE"],
        [
            [
                u["user_id"],
                u["sessions"],
                u["messages"],
                u["memories"],
                (u["last_message_at"] or "")[:19],
            ]
            for u in rows
        ],
        limits=[ID_WIDTH, 8, 8, 8, 19],
        empty="no users",
    )
    if rows:
        click.echo(f"{len(rows)} user(s)", err=True)
