"""The one rule: incremental projection state == state rebuilt from the log."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from memstore import Settings
from memstore.events.log import NewEvent
from memstore.store import Store
from tests.helpers_events import Noted
from tests.snapshot import snapshot

USERS = ["alice", "bob", "李"]
SESSIONS = ["s1", "s2"]
TEXTS = [
    "I like tea",
    "my cat is Mochi",
    "我喜欢咖啡",
    "always answer in French",
    "ok",
    "  ",
    "<memory-context>x</memory-context>hi",
]

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
capture_op = st.tuples(
    st.just("capture"),
    st.sampled_from(USERS),
    st.sampled_from(SESSIONS),
    st.lists(message, min_size=1, max_size=4),
)
note_op = st.tuples(
    st.just("note"), st.sampled_from(USERS), st.sampled_from(SESSIONS), st.integers(0, 9)
)
ops = st.lists(st.one_of(capture_op, note_op), min_size=1, max_size=25)


def _run(store: Store, plan: list[tuple[object, ...]]) -> None:
    for op in plan:
        kind, user, session, arg = op
        if kind == "capture":
            store.capture(str(user), str(session), list(arg))  # type: ignore[call-overload]
        elif kind == "derive":
            store.run_pipeline(str(user))
        elif kind == "end":
            store.end_session(str(user), str(session), timeout_s=60)
        elif kind == "write":
            store.write_memory(str(user), "add", str(arg))
        elif kind == "forget":
            active = store.list_memories(str(user))
            if active:
                store.forget_memory(str(user), active[0]["memory_id"])
        else:
            _, user, session, n = op
            store.append([NewEvent(f"note/{session}", Noted("n", int(n)), user_id=str(user))])  # type: ignore[call-overload]


@hsettings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(plan=ops)
def test_incremental_equals_rebuild(
    tmp_path_factory: object, plan: list[tuple[object, ...]]
) -> None:
    path = Path(tmp_path_factory.mktemp("inv")) / "m.db"  # type: ignore[attr-defined]
    settings = Settings().replace(embedder="hashing", scheduler=False, background_indexer=False)
    with Store.open(path, settings=settings) as store:
        _run(store, plan)
        incremental = snapshot(store)
        store.rebuild()
        rebuilt = snapshot(store)
        assert rebuilt == incremental
        # and rebuilding one projection at a time gives the same state too
        for name in store.projections.names:
            store.rebuild([name])
        assert snapshot(store) == incremental
