"""Re-derive: build a new derivation generation from the log, then switch to it.

The new generation is built beside the active one (its events carry its
number, the projections keep its rows apart) and becomes visible in one
``derive.generation_activated`` event when every stage succeeded. The old
generation stays readable and can be activated again (rollback).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memstore.derive.events import GenerationActivated, GenerationStarted
from memstore.derive.memories.extract import run_l1
from memstore.derive.persona.write import run_l3_generation
from memstore.derive.queries import (
    DEFAULT_GENERATION,
    active_generation,
    generations,
    next_generation,
    sessions_of,
    users_with_messages,
)
from memstore.derive.runs import append_checked, new_id
from memstore.derive.scenes.build import run_l2_generation
from memstore.errors import InvalidInputError, NotFoundError, PipelineError

if TYPE_CHECKING:
    from memstore.derive.context import DeriveContext

LAYERS = ("l1", "l2", "l3")


def rederive(store: DeriveContext, user_id: str | None = None, from_layer: str = "l1") -> int:
    """Derive ``from_layer`` and everything above it again into a new generation.

    Returns the new generation number (one number for every user re-derived).
    Raises ``PipelineError`` if a stage fails; the half-built generation stays
    inactive and the active one is untouched.
    """
    if from_layer not in LAYERS:
        raise InvalidInputError(f"from_layer must be one of {LAYERS}, got {from_layer!r}")
    with store.db.read() as conn:
        since = store.log.last_position(conn)  # a user erased after this is skipped
        gen = next_generation(conn)
        users = [user_id] if user_id is not None else users_with_messages(conn)
    run_id = new_id()
    for user in users:
        with store.db.read() as conn:
            base = active_generation(conn, user)
            sessions = sessions_of(conn, user)
        if not append_checked(
            store, user, [GenerationStarted(gen, from_layer, base, run_id)], since=since
        ):
            continue  # erased meanwhile
        outcomes = []
        if from_layer == "l1":
            outcomes += [run_l1(store, user, s, generation=gen) for s in sessions]
        if from_layer in ("l1", "l2"):
            outcomes.append(run_l2_generation(store, user, gen))
        outcomes.append(run_l3_generation(store, user, gen))
        failed = [o for o in outcomes if not o.ok]
        if failed:
            raise PipelineError(
                f"re-derive of user {user!r} into generation {gen} failed at "
                f"{failed[0].stage}: {failed[0].error}; generation {base} stays active"
            )
        append_checked(store, user, [GenerationActivated(gen, base, "rederive")], since=since)
    return gen


def activate_generation(store: DeriveContext, user_id: str, generation: int) -> int:
    """Make ``generation`` the one the user's projections show; returns the previous."""
    with store.db.read() as conn:
        since = store.log.last_position(conn)
        known = {g["generation"]: g for g in generations(conn, user_id)}
        previous = active_generation(conn, user_id)
    info = known.get(generation)
    if info is None:
        raise NotFoundError(f"user {user_id!r} has no generation {generation}")
    if not info["complete"] and generation != DEFAULT_GENERATION:
        raise PipelineError(f"generation {generation} of {user_id!r} never completed")
    if generation != previous:
        append_checked(
            store, user_id, [GenerationActivated(generation, previous, "activate")], since=since
        )
    return previous


def list_generations(store: DeriveContext, user_id: str) -> list[dict[str, Any]]:
    with store.db.read() as conn:
        return generations(conn, user_id)
