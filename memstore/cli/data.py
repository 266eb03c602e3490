"""Commands that put conversations in and get them out: capture, import, search, reindex."""

from __future__ import annotations

import shlex
import sys
from typing import TYPE_CHECKING

import click

from memstore.cli.app import (
    TEXT,
    Location,
    cli,
    db_option,
    echo_json,
    json_option,
    list_output,
    open_store,
    resolve_db,
    searching,
    shown,
)
from memstore.cli.table import ID_WIDTH, plural, print_table
from memstore.db.compaction import is_pending_at
from memstore.errors import InvalidInputError

if TYPE_CHECKING:
    from memstore.records import MemoryType, SearchStrategy
    from memstore.search import Hit
    from memstore.store import Store


@cli.command()
@db_option
@json_option
@click.option("--user", "user_id", required=True, envvar="MEMSTORE_USER", help="User (tenant) id.")
@click.option("--session", "session_id", required=True, help="Session id.")
@click.option("--user-text", type=TEXT, required=True, help="What the user said; - reads stdin.")
@click.option(
    "--assistant-text", type=TEXT, default=None, help="What the assistant answered; - reads stdin."
)
@click.option("--timestamp", default=None, help="ISO-8601 time of the turn (default: now).")
@click.option(
    "--derive", is_flag=True, help="Derive memories and embed now, instead of leaving it for later."
)
def capture(
    db: Location | None,
    as_json: bool,
    user_id: str,
    session_id: str,
    user_text: str,
    assistant_text: str | None,
    timestamp: str | None,
    derive: bool,
) -> None:
    """Capture one conversation turn into L0.

    A command-line capture only stores the turn: memories are derived by
    `memstore pipeline run` (or a long-running host's scheduler) and vectors
    are made by `memstore reindex`; until then search is by keyword. --derive
    does both right away.

    \b
    Example:
      memstore capture --user alice --session s1 \\
        --user-text "I moved to Lisbon last May" --assistant-text "Nice!"
      echo "I moved to Lisbon" | memstore capture --user alice --session s1 --user-text -
    """
    derived = None
    with open_store(db, background=False) as store:
        res = store.capture_turn(
            user_id, session_id, user_text, assistant_text, timestamp=timestamp
        )
        if derive:
            from memstore.cli.pipeline import derive_now

            derived = derive_now(store, user_id)
    data = {"stored": res.stored, "duplicates": res.duplicates, "position": res.event_position}
    if as_json:
        echo_json(data)
        return
    click.echo(f"stored {plural(len(res.stored), 'message')}, {len(res.duplicates)} already known")
    click.echo(derived or next_step(user_id, db))


def next_step(user_id: str | None, db: Location | None, *, embedded: bool = False) -> str:
    """The line that ends a capture or import without --derive. The commands
    it names take the --db this one was given (before or after its name):
    without it they would open $MEMSTORE_DB or the default store instead."""
    who = f" --user {shlex.quote(user_id)}" if user_id else ""
    ctx = click.get_current_context(silent=True)
    given = db if db is not None else ctx.find_root().params.get("db") if ctx else None
    where = f" --db {shlex.quote(shown(given))}" if given is not None else ""
    who += where
    if embedded:
        return f"next: `memstore pipeline run{who}` derives memories (--derive does it now)"
    return (
        f"next: `memstore pipeline run{who}` derives memories and `memstore reindex{where}` embeds "
        "the messages (search is keyword-only until then); --derive does both now"
    )


@cli.group()
def search() -> None:
    """Search conversations (L0) or memories (L1) of one user.

    \b
    Example:
      memstore search conversations "where did I go hiking" --user alice
      memstore search memories "coffee" --user alice --type persona
    """


def _print_hits(hits: list[Hit], as_json: bool) -> None:
    if as_json:
        echo_json([h.to_dict() for h in hits])
        return
    rows = [
        [f"{h.score:.3f}", h.occurred_at[:19],
         h.session_id if h.kind == "l0" else f"{h.type}/{h.scene or '-'}", h.ref, h.text]
        for h in hits
    ]  # fmt: skip
    # Ids are never shortened: they are what the next command takes.
    print_table(
        ["SCORE", "TIME", "SESSION" if hits and hits[0].kind == "l0" else "TYPE/SCENE", "ID",
         "TEXT"],
        rows, limits=[6, 19, ID_WIDTH, ID_WIDTH, 100], empty="no results",
    )  # fmt: skip


@search.command("conversations")
@db_option
@list_output
@click.argument("query", type=TEXT)
@click.option("--user", "user_id", required=True, envvar="MEMSTORE_USER", help="User id.")
@click.option("--session", "session_id", default=None, help="Only this session's messages.")
@click.option("--limit", type=click.IntRange(1, 20), default=5, show_default=True,
              help="How many results (1-20).")  # fmt: skip
@click.option("--strategy", type=click.Choice(["keyword", "vector", "hybrid"]), default="hybrid",
              show_default=True, help="Keyword (BM25), vector, or both fused.")  # fmt: skip
def search_conversations(
    db: Location | None,
    as_json: bool,
    query: str,
    user_id: str,
    session_id: str | None,
    limit: int,
    strategy: SearchStrategy,
) -> None:
    """Search a user's captured messages.

    \b
    Example:
      memstore search conversations "咖啡" --user alice --strategy keyword --json
    """
    with searching(db) as store:
        hits = store.search_conversations(
            user_id, query, session_id=session_id, limit=limit, strategy=strategy
        )
    _print_hits(hits, as_json)


@search.command("memories")
@db_option
@list_output
@click.argument("query", type=TEXT)
@click.option("--user", "user_id", required=True, envvar="MEMSTORE_USER", help="User id.")
@click.option(
    "--type",
    "type_",
    type=click.Choice(["persona", "episodic", "instruction"]),
    default=None,
    help="Only memories of this type.",
)
@click.option("--scene", default=None, help="Only memories of this scene.")
@click.option("--limit", type=click.IntRange(1, 20), default=5, show_default=True,
              help="How many results (1-20).")  # fmt: skip
def search_memories(
    db: Location | None,
    as_json: bool,
    query: str,
    user_id: str,
    type_: MemoryType | None,
    scene: str | None,
    limit: int,
) -> None:
    """Search a user's active L1 memories.

    \b
    Example:
      memstore search memories "diet" --user alice --type persona
    """
    with searching(db) as store:
        hits = store.search_memories(user_id, query, type=type_, scene=scene, limit=limit)
    _print_hits(hits, as_json)


@cli.command()
@db_option
@click.option(
    "--vector-element",
    type=click.Choice(["int8", "float32"]),
    default=None,
    help="First store every existing vector as this (SQLite; nothing is embedded again). "
    "int8 takes a quarter of float32's bytes; int8 back to float32 cannot restore the "
    "precision int8 dropped.",
)
def reindex(db: Location | None, vector_element: str | None) -> None:
    """Embed every message and memory not yet embedded with the configured model.

    Runs in the foreground with a progress bar (the store does the same in the
    background on its own). After a model change, search is keyword-only until
    this completes. With --vector-element, existing vector spaces are first
    rewritten in that element type (a store from before int8 keeps float32
    until then); the file keeps its size, the freed pages are reused.

    \b
    Example:
      MEMSTORE_EMBEDDER=e5 memstore reindex
      memstore reindex --vector-element int8
    """
    with open_store(db, must_exist=True) as store:
        if store.embedding_model is None:
            raise InvalidInputError("embedder is 'none': nothing to index")
        if vector_element:
            _convert(store, vector_element)
        total = store.pending_embeddings()
        from tqdm import tqdm

        with tqdm(total=total, unit="row", desc="reindex", disable=None) as bar:
            n = store.reindex(progress=bar.update)
    click.echo(f"embedded {n} row(s) with {store.embedding_model or 'none'}")


def _convert(store: Store, element: str) -> None:
    done = store.convert_vectors(element)
    for name, n in done:
        click.echo(f"{name}: {n} vector(s) now stored as {element}")
    if not done:
        click.echo(f"every vector space already stores {element}")


EXIT_NOT_COMPACTED = 3


@cli.group()
def users() -> None:
    """Per-user operations.

    \b
    Example:
      memstore users forget alice --yes
    """


@users.command("forget")
@db_option
@click.argument("user_id")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option(
    "--wait",
    type=click.FloatRange(0, 3600),
    default=10.0,
    show_default=True,
    help="Seconds to wait for other readers before giving up on compaction.",
)
@click.option(
    "--vacuum-full", is_flag=True,
    help="PostgreSQL: rewrite the tables (VACUUM FULL; locks each table while it runs) so no "
    "erased byte stays in a data file. SQLite always rewrites its file.",
)  # fmt: skip
def users_forget(
    db: Location | None, user_id: str, yes: bool, wait: float, vacuum_full: bool
) -> None:
    """Erase a user: their events, memories, vectors and cached embeddings.

    The only operation that deletes events. A content-free tombstone event
    records that it happened; the file is vacuumed so no erased bytes remain.
    If another connection keeps an old snapshot open past --wait, the erased
    bytes are still in the file: the command then exits with status 3, and
    the next open, close or write of the store removes them. On PostgreSQL
    the command exits 3 too unless --vacuum-full: a plain VACUUM leaves the
    erased rows' bytes in the data files until their space is reused.

    \b
    Example:
      memstore users forget alice --yes
    """
    if not yes:
        click.confirm(f"Erase everything of user {user_id!r}? This cannot be undone", abort=True)
    # Nothing to erase in a store that does not exist: never create one.
    with open_store(db, must_exist=True) as store:
        rep = store.forget_user(user_id, wait_s=wait, vacuum_full=vacuum_full)
    click.echo(
        f"erased {rep.events_removed} event(s) and {rep.embeddings_removed} cached embedding(s) "
        f"of {user_id}; tombstone at position {rep.tombstone_position}"
    )

    if not rep.compacted and is_pending_at(resolve_db(db)):
        # The store retried on close; the bytes are still in the file.
        click.echo(f"error: the erased content is still in the file: {rep.detail}", err=True)
        sys.exit(EXIT_NOT_COMPACTED)
    if not rep.compacted:
        # PostgreSQL without --vacuum-full: no query returns the content, but
        # its bytes may remain in the data files until their space is reused.
        click.echo(f"error: erased bytes may remain in the data files: {rep.detail}", err=True)
        sys.exit(EXIT_NOT_COMPACTED)
