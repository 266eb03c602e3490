"""Derivation commands: memories, scenes, persona, recall, rederive, generations."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, cast

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
    read_database,
)
from memstore.cli.table import ID_WIDTH, plural, print_table
from memstore.records import Layer, MemoryType
from memstore.validate import check_id, opt_id

if TYPE_CHECKING:
    from memstore.store import Store


def _open(db: Location | None, *, must_exist: bool = True) -> Store:
    # Reading commands never create a database; only adding a memory may.
    return open_store(db, must_exist=must_exist)


def _checked_user(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    # These commands call memstore.derive.api directly, past Store's own checks:
    # a lone surrogate (a non-UTF-8 argv byte) used to reach SQLite as a traceback.
    return check_id("user_id", value)


def user_option(f: Any) -> Any:
    return click.option(
        "--user", "user", required=True, envvar="MEMSTORE_USER", show_envvar=True,
        help="User id.", callback=_checked_user,
    )(f)  # fmt: skip


def generation_option(f: Any) -> Any:
    return click.option(
        "--generation",
        type=click.IntRange(0, 2**63 - 1),
        default=None,
        help="Show this derivation generation.",
    )(f)


@cli.group("memories")
def memories_group() -> None:
    """L1 atomic memories: list, history, forget, add.

    \b
    Example:
      memstore memories list --user alice
      memstore memories history --user alice 3f2a...
    """


@memories_group.command("list")
@db_option
@list_output
@user_option
@click.option(
    "--type",
    "type_",
    type=click.Choice(["persona", "episodic", "instruction"]),
    help="Only memories of this type.",
)
@generation_option
@click.option("--all", "include_retired", is_flag=True, help="Include retired memories.")
def memories_list(
    db: Location | None,
    as_json: bool,
    user: str,
    type_: str | None,
    generation: int | None,
    include_retired: bool,
) -> None:
    """List a user's memories (active generation unless --generation).

    \b
    Example:
      memstore memories list --user alice --type persona
      memstore memories list --user alice --all --json
    """
    # The bare database, not a Store: a listing needs none of the engine
    # (docs/cli.md: data commands load only what they use).
    from memstore.reads import memories_in

    with read_database(db) as database:
        rows = [
            m.to_dict()
            for m in memories_in(
                database,
                user,
                type=cast(MemoryType | None, type_),
                generation=generation,
                include_retired=include_retired,
            )
        ]
    if as_json:
        echo_json(rows)
        return
    print_table(
        ["ID", "TYPE", "PRIORITY", "SCENE", "CONTENT"],
        [
            [m["memory_id"], m["type"], m["priority"], m["scene_name"],
             m["content"] + ("" if m["status"] == "active" else f" [retired: {m['retired_by']}]")]
            for m in rows
        ],
        limits=[ID_WIDTH, 11, 8, 24, 200], empty="no memories",
    )  # fmt: skip


@memories_group.command("history")
@db_option
@list_output
@user_option
@click.argument("memory_id")
def memories_history(db: Location | None, as_json: bool, user: str, memory_id: str) -> None:
    """Show the events that created, changed or retired one of a user's memories.

    \b
    Example:
      memstore memories history --user alice 3f2a9c...
    """
    with _open(db) as store:
        rows = store.memory_history(user, memory_id)
    if as_json:
        echo_json(rows)
        return
    for h in rows:
        detail = h.get("content") or h.get("scene") or h.get("reason") or ""
        click.echo(f"#{h['position']} {h['recorded_at']} {h['action']}: {detail}")
        if h.get("source_message_ids"):
            click.echo(f"    from messages {', '.join(h['source_message_ids'])}")


@memories_group.command("forget")
@db_option
@json_option
@user_option
@click.argument("memory_id")
@click.option("--reason", default="user_request", show_default=True, help="Recorded in the event.")
@click.option(
    "--with-sources",
    is_flag=True,
    help="Erase it and the messages it came from (and what else came from them).",
)
@click.option(
    "--wait",
    type=click.FloatRange(0, 3600),
    default=10.0,
    show_default=True,
    help="With --with-sources: seconds to wait for readers before compaction.",
)
def memories_forget(
    db: Location | None, as_json: bool, user: str, memory_id: str, reason: str,
    with_sources: bool, wait: float,
) -> None:  # fmt: skip
    """Retire a memory: it and the scene and persona text built from it leave
    every read path at once (its history stays in the log). With
    --with-sources it is erased instead, with its source messages.

    \b
    Example:
      memstore memories forget --user alice 3f2a9c...
      memstore memories forget --user alice 3f2a9c... --with-sources
    """
    with _open(db) as store:
        rep = store.forget_memory(user, memory_id, reason, with_sources=with_sources, wait_s=wait)
    if rep is None:
        if as_json:
            echo_json({"forgotten": memory_id, "user_id": user})
        else:
            click.echo(f"forgot {memory_id}")
        return
    from memstore.cli.forget import echo_report

    echo_report(rep, db, as_json)


@memories_group.command("add")
@db_option
@user_option
@click.argument("content", type=TEXT)
@click.option("--type", "type_", default="persona", show_default=True,
              type=click.Choice(["persona", "episodic", "instruction"]),
              help="Kind of memory.")  # fmt: skip
@click.option("--scene", default="", help="Scene name.")
def memories_add(db: Location | None, user: str, content: str, type_: str, scene: str) -> None:
    """Add a memory the user stated directly.

    \b
    Example:
      memstore memories add --user alice "Alice is vegetarian."
    """
    with _open(db, must_exist=False) as store:
        mid = store.write_memory(user, "add", content, type=cast(MemoryType, type_), scene=scene)
    click.echo(f"stored {mid}")


@cli.group("scenes")
def scenes_group() -> None:
    """L2 scene blocks.

    \b
    Example:
      memstore scenes list --user alice
      memstore scenes show --user alice Travel
    """


@scenes_group.command("list")
@db_option
@list_output
@user_option
@generation_option
def scenes_list(db: Location | None, as_json: bool, user: str, generation: int | None) -> None:
    """List a user's scenes, hottest first.

    \b
    Example:
      memstore scenes list --user alice --json
    """
    with _open(db) as store:
        rows = [s.to_dict() for s in store.list_scenes(user, generation=generation)]
    if as_json:
        echo_json(rows)
        return
    print_table(
        ["ID", "HEAT", "NAME", "SUMMARY"],
        [[s["scene_id"], s["heat"], s["name"], s["summary"]] for s in rows],
        limits=[ID_WIDTH, 5, 30, 120],
        empty="no scenes",
    )


@scenes_group.command("show")
@db_option
@json_option
@user_option
@generation_option
@click.argument("scene")
def scenes_show(
    db: Location | None, as_json: bool, user: str, generation: int | None, scene: str
) -> None:
    """Show one scene (by id or name) with its body.

    \b
    Example:
      memstore scenes show --user alice Travel
    """
    with _open(db) as store:
        rows = [s.to_dict() for s in store.list_scenes(user, generation=generation)]
    found = [s for s in rows if scene in (s["scene_id"], s["name"])]
    if not found:
        raise click.ClickException(f"user {user!r} has no scene {scene!r}")
    s = found[0]
    if as_json:
        echo_json(s)
        return
    count = plural(len(s["memory_ids"]), "memory", "memories")
    click.echo(f"# {s['name']}  (heat {s['heat']}, {count})")
    click.echo(s["summary"])
    click.echo("")
    click.echo(s["body"])


@cli.group("persona")
def persona_group() -> None:
    """L3 persona.

    \b
    Example:
      memstore persona show --user alice
    """


@persona_group.command("show")
@db_option
@json_option
@user_option
@generation_option
def persona_show(db: Location | None, as_json: bool, user: str, generation: int | None) -> None:
    """Show the user's persona and the scene navigation.

    \b
    Example:
      memstore persona show --user alice
    """
    with _open(db) as store:
        text = store.get_persona(user, generation=generation)
        nav = store.scene_navigation(user, generation=generation)
    if as_json:
        echo_json({"persona": text, "navigation": nav})
        return
    click.echo(text or "(no persona yet)")
    if nav:
        click.echo("\nScenes:\n" + nav)


@cli.command("recall")
@db_option
@json_option
@user_option
@click.option("--session", default=None, help="Session id (accepted; memories are per user).")
@click.option("--budget", type=int, default=None, help="Character budget.")
@click.argument("query", type=TEXT)
def recall_cmd(
    db: Location | None,
    as_json: bool,
    user: str,
    session: str | None,
    budget: int | None,
    query: str,
) -> None:
    """Show what would be injected before a turn for QUERY.

    \b
    Example:
      memstore recall --user alice "where should we eat tonight?"
    """
    with _open(db) as store:
        r = store.recall(user, query, session_id=session, budget_chars=budget)
    if as_json:
        echo_json(
            {
                "text": r.text,
                "stable": r.stable,
                "per_turn": r.per_turn,
                "persona": r.persona,
                "navigation": r.navigation,
                "memories": [dataclasses.asdict(m) for m in r.memories],
                "messages": [dataclasses.asdict(m) for m in r.messages],
                "truncated": r.truncated,
                "timed_out": r.timed_out,
            }
        )
        return
    click.echo(r.text or "(nothing to recall)")


@cli.command("rederive")
@db_option
@click.option("--user", "user", default=None, help="Only this user (default: every user).",
              callback=lambda _c, _p, u: opt_id("user_id", u))  # fmt: skip
@click.option("--from", "from_layer", type=click.Choice(["l1", "l2", "l3"]), default="l1",
              show_default=True, help="Lowest layer to derive again.")  # fmt: skip
@click.option("--activate", type=int, default=None,
              help="Make this generation active again instead (needs --user).")  # fmt: skip
def rederive_cmd(
    db: Location | None, user: str | None, from_layer: str, activate: int | None
) -> None:
    """Derive memories again from the captured conversations into a new generation.

    Uses the configured LLM (or the offline rules). The new generation becomes
    active when it is complete; the previous one stays readable with
    --generation and can be re-activated with --activate.

    \b
    Example:
      memstore rederive --user alice
      memstore rederive --from l2
      memstore rederive --user alice --activate 0
    """
    with _open(db) as store:
        if activate is not None:
            if user is None:
                raise click.UsageError("--activate needs --user")
            previous = store.activate_generation(user, activate)
            click.echo(f"{user}: generation {activate} active (was {previous})")
            return
        gen = store.rederive(user, from_layer=cast(Layer, from_layer))  # a click.Choice
    click.echo(f"generation {gen} built and active")


@cli.command("generations")
@db_option
@list_output
@user_option
def generations_cmd(db: Location | None, as_json: bool, user: str) -> None:
    """List a user's derivation generations.

    \b
    Example:
      memstore generations --user alice
    """
    with _open(db) as store:
        rows = store.list_generations(user)
    if as_json:
        echo_json(rows)
        return
    for g in rows:
        mark = "*" if g["active"] else " "
        click.echo(
            f"{mark} {g['generation']:<4} {g['memories']} memories, from {g['from_layer']}"
            f"{'' if g['complete'] else ' (incomplete)'}"
        )
