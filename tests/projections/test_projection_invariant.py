"""The one rule: incremental projection state == state rebuilt from the log.

The generator drives every event type the projections read, through the
public API where one exists and as recorded events otherwise (a log may hold
any sequence of outcomes, e.g. failures of the live pipeline around a
generation switch):

- ``l0.captured`` (capture), ``l0.session_ended`` (end), ``test.noted``;
- ``l1.extracted``, ``l2.scenes_updated``, ``l3.persona_updated`` from the
  rule-based deriver (derive), and as raw outcomes, cursors going backwards
  included;
- ``pipeline.run_failed`` for L1/L2/L3, with and without a generation;
- ``l1.memory_written`` (add, update, merge, supersede of existing memories),
  ``l1.memory_forgotten`` (forget, also of unknown ids);
- ``erasure.user`` (forget_user), ``derive.generation_started`` and
  ``derive.generation_activated`` (rederive from each layer, raw switches).

Raw outcomes go in one append of several events now and then, so the
incremental path sees batches in which one projection's input follows
another's — the case the registry's dependency ordering exists for.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from memstore import Settings
from memstore.bench.snapshot import snapshot
from memstore.derive.events import (
    GenerationActivated,
    GenerationStarted,
    L1Extracted,
    MemoryForgotten,
    MemoryWritten,
    PersonaUpdated,
    RunFailed,
    ScenesUpdated,
    derive_stream,
)
from memstore.derive.messages.events import SessionEnded, UserErased, l0_stream
from memstore.errors import MemstoreError
from memstore.events.log import NewEvent
from memstore.events.types import Event
from memstore.store import Store
from tests.backends import Targets
from tests.helpers_events import Noted

pytestmark = pytest.mark.both_backends

USERS = ["alice", "李"]  # few users: their events interleave and interact
SESSIONS = ["s1", "s2"]
TEXTS = [
    "I like tea",
    "my cat is Mochi",
    "I'm vegetarian",
    "I live in Berlin",
    "I moved to Munich",
    "我喜欢咖啡",
    "always answer in French",
    "ok",
    "  ",
    "<memory-context>x</memory-context>hi",
]
MEMORY_IDS = ["m-a", "m-b", "m-c"]  # ids raw outcomes create and target
SCENE_IDS = ["sc-a", "sc-b"]

message = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["user", "assistant"]),
        "content": st.sampled_from(TEXTS) | st.text(max_size=30),
    },
    optional={
        "id": st.sampled_from(["m1", "m2", "m3", "m4"]),
        "timestamp": st.sampled_from(["2023-05-08T10:00:00", 1700000000]),
    },
)
user = st.sampled_from(USERS)
session = st.sampled_from(SESSIONS)
generation = st.sampled_from([0, 1])


def _decision() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {
            "action": st.sampled_from(["store", "update", "merge", "supersede", "skip"]),
            "new_id": st.sampled_from(MEMORY_IDS) | st.uuids().map(str),
            "target_ids": st.lists(st.sampled_from(MEMORY_IDS), max_size=2),
            "content": st.sampled_from(TEXTS[:7]),
            "type": st.sampled_from(["persona", "episodic", "instruction"]),
            "priority": st.sampled_from([-1, 50, 90]),
            "scene_name": st.sampled_from(["Food", "Home"]),
            "source_message_ids": st.lists(st.sampled_from(["m1", "m2"]), max_size=2),
        }
    )


raw_l1 = st.builds(
    lambda s, g, cur, ds: L1Extracted(s, "run", g, "rules", "", "p", cur, [], ds),
    session,
    generation,
    st.integers(0, 40),
    st.lists(_decision(), max_size=2),
)
raw_written = st.builds(
    lambda g, d, origin: MemoryWritten(g, origin, d),
    generation,
    _decision(),
    st.sampled_from(["user_stated", "host"]),
)
raw_forgotten = st.builds(MemoryForgotten, st.sampled_from([*MEMORY_IDS, "unknown"]))
raw_scenes = st.builds(
    lambda g, cur, ops, refresh: ScenesUpdated("run", g, "rules", "", "p", cur, [], ops, refresh),
    generation,
    st.integers(0, 40),
    st.lists(
        st.fixed_dictionaries(
            {
                "op": st.sampled_from(["create", "update", "merge", "delete"]),
                "scene_id": st.sampled_from(SCENE_IDS),
                "source_scene_ids": st.lists(st.sampled_from(SCENE_IDS), max_size=2),
                "name": st.sampled_from(["Food", "Home"]),
                "summary": st.sampled_from(["s", None]),
                "memory_ids": st.lists(st.sampled_from(MEMORY_IDS), max_size=2),
            }
        ),
        max_size=2,
    ),
    st.booleans(),
)
raw_persona = st.builds(
    lambda g, text: PersonaUpdated("run", g, "rules", "", "p", text, "test"),
    generation,
    st.sampled_from(["likes tea", "lives in Munich"]),
)
raw_failed = st.builds(
    lambda stage, s, g: RunFailed(stage, s if stage == "l1" else "", "boom", 1, "run", g),
    st.sampled_from(["l1", "l2", "l3"]),
    session,
    st.sampled_from([None, None, None, 0, 1]),  # mostly the live pipeline's
)
raw_started = st.builds(
    lambda g, layer, base: GenerationStarted(g, layer, base, "run"),
    st.integers(1, 2),
    st.sampled_from(["l1", "l2", "l3"]),
    generation,
)
raw_activated = st.builds(  # mostly a switch away from the default generation
    lambda g, prev: GenerationActivated(g, prev, "activate"), st.sampled_from([1, 2, 0]), generation
)
# Failures and generation switches twice as likely: what a projection reads
# at apply time (the active generation) changes with them.
raw_event = st.one_of(
    raw_l1,
    raw_written,
    raw_forgotten,
    raw_scenes,
    raw_persona,
    raw_failed,
    raw_failed,
    raw_started,
    raw_activated,
    raw_activated,
)

# Events and whether to append them one by one (the finest batching the
# incremental path can see; a rebuild replays them all in one batch).
raw_batch = st.tuples(st.lists(raw_event, min_size=2, max_size=8), st.booleans())

ops = st.lists(
    st.one_of(
        st.tuples(st.just("capture"), user, session, st.lists(message, min_size=1, max_size=4)),
        st.tuples(st.just("note"), user, session, st.integers(0, 9)),
        st.tuples(st.just("derive"), user, session, st.none()),
        st.tuples(st.just("end"), user, session, st.none()),
        st.tuples(st.just("write"), user, session, st.sampled_from(TEXTS[:7])),
        st.tuples(st.just("forget"), user, session, st.none()),
        st.tuples(st.just("forget_user"), user, session, st.none()),
        st.tuples(st.just("rederive"), user, session, st.sampled_from(["l1", "l2", "l3"])),
        # recorded outcomes twice as often: they reach the most branches
        st.tuples(st.just("raw"), user, session, raw_batch),
        st.tuples(st.just("raw"), user, session, raw_batch),
    ),
    min_size=4,  # short plans rarely hold an outcome and what changes its meaning
    max_size=25,
)


def _raw(store: Store, user: str, session: str, batch: tuple[list[Event], bool]) -> None:
    payloads, one_by_one = batch
    evs = [NewEvent(derive_stream(user), p, user_id=user) for p in payloads]
    if len(payloads) > 2:
        evs.append(NewEvent(l0_stream(user, session), SessionEnded(session), user_id=user))
    for chunk in [[e] for e in evs] if one_by_one else [evs]:
        store.append(chunk)


def _run(store: Store, plan: list[tuple[Any, ...]]) -> None:
    for kind, user, session, arg in plan:
        try:
            if kind == "capture":
                store.capture(user, session, arg)
            elif kind == "note":
                store.append([NewEvent(f"note/{session}", Noted("n", arg), user_id=user)])
            elif kind == "derive":
                store.run_pipeline(user)
            elif kind == "end":
                store.end_session(user, session, timeout_s=60)
            elif kind == "write":
                store.write_memory(user, "add", arg)
            elif kind == "forget":
                active = store.list_memories(user)
                if active:
                    store.forget_memory(user, active[0]["memory_id"])
            elif kind == "forget_user":
                store.forget_user(user, wait_s=0)
            elif kind == "rederive":
                store.rederive(user, from_layer=arg)
            else:
                _raw(store, user, session, arg)
        except MemstoreError:
            pass  # refused (nothing to erase, no such session...): the log is unchanged


SETTINGS = Settings().replace(embedder="hashing", scheduler=False, background_indexer=False)


def _incremental_equals_rebuild(module_target: Targets, plan: list[tuple[Any, ...]]) -> None:
    # A new store per example (a file, or a database cloned from the migrated
    # template: tests/backends.py), under a name of its own.
    with Store.open(module_target(f"inv-{uuid.uuid4().hex}.db"), settings=SETTINGS) as store:
        _run(store, plan)
        incremental = snapshot(store)
        store.rebuild()
        rebuilt = snapshot(store)
        assert rebuilt == incremental
        # and rebuilding one projection at a time gives the same state too
        for name in store._projections.names:
            store.rebuild([name])
        assert snapshot(store) == incremental


# Every example opens a store, runs its plan and rebuilds each projection:
# the quick suite draws 10 plans, the slow run (.ci/run) 30 more.
_FIXTURES_OK = [HealthCheck.function_scoped_fixture]


@hsettings(max_examples=10, deadline=None, suppress_health_check=_FIXTURES_OK)
@given(plan=ops)
def test_incremental_equals_rebuild(module_target: Targets, plan: list[tuple[Any, ...]]) -> None:
    _incremental_equals_rebuild(module_target, plan)


@pytest.mark.slow
@hsettings(max_examples=30, deadline=None, suppress_health_check=_FIXTURES_OK)
@given(plan=ops)
def test_incremental_equals_rebuild_more_plans(
    module_target: Targets, plan: list[tuple[Any, ...]]
) -> None:
    _incremental_equals_rebuild(module_target, plan)


def test_the_generator_reaches_every_event_type(target: str) -> None:
    """A fixed plan through the same driver appends every type the
    projections handle: the branches the property above relies on exist."""
    plan: list[tuple[Any, ...]] = [
        ("capture", "alice", "s1", [{"role": "user", "content": "I'm vegetarian"}]),
        ("capture", "alice", "s1", [{"role": "user", "content": "my cat is Mochi"}]),
        ("derive", "alice", "s1", None),
        ("write", "alice", "s1", "I like tea"),
        ("forget", "alice", "s1", None),
        ("end", "alice", "s1", None),
        ("raw", "alice", "s1", ([RunFailed("l1", "s1", "boom", 1, "r", None)], True)),
        ("rederive", "alice", "s1", "l1"),
        ("raw", "alice", "s1", ([GenerationActivated(0, 1, "activate")], False)),
        ("capture", "bob", "s1", [{"role": "user", "content": "hi"}]),
        ("forget_user", "bob", "s1", None),
        ("note", "alice", "s2", 3),
    ]
    with Store.open(target, settings=SETTINGS) as store:
        _run(store, plan)
        types = {e.type for e in store.read_events()}
        handled = {UserErased.TYPE}.union(
            *(store._projections.get(n).handles or () for n in store._projections.names)
        )
    assert handled <= types, sorted(handled - types)
