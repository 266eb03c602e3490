"""Every public entry of ``Store`` checks its arguments: bad input raises a
``MemstoreError`` and stores nothing."""

from __future__ import annotations

import contextlib
import inspect
import math
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memstore import Settings
from memstore.cli import main
from memstore.derive.messages.events import SessionEnded
from memstore.errors import InvalidIdError, InvalidInputError, MemstoreError, NotFoundError
from memstore.events.log import NewEvent
from memstore.store import Store
from tests.backends import Targets

pytestmark = pytest.mark.both_backends

# --- the cases that were found ---------------------------------------------------

BAD_CALLS: list[tuple[str, Callable[[Store], object]]] = [
    ("capture None", lambda s: s.capture("u", "s", None)),  # type: ignore[arg-type]
    ("capture 42", lambda s: s.capture("u", "s", 42)),  # type: ignore[arg-type]
    ("capture generator", lambda s: s.capture("u", "s", iter([]))),  # type: ignore[arg-type]
    (
        "timestamp past year 9999 in UTC",
        lambda s: s.capture_turn("u", "s", "hi", timestamp="9999-12-31T23:00:00-05:00"),
    ),
    ("timestamp huge int", lambda s: s.capture_turn("u", "s", "hi", timestamp=10**400)),
    ("limit inf", lambda s: s.search_conversations("u", "x", limit=float("inf"))),
    ("limit nan", lambda s: s.search_memories("u", "x", limit=math.nan)),
    ("limit huge", lambda s: s.search_conversations("u", "x", limit=10**30)),
    ("recall None", lambda s: s.recall("u", None)),  # type: ignore[arg-type]
    ("budget x", lambda s: s.recall("u", "x", budget_chars="x")),  # type: ignore[arg-type]
    ("timeout inf", lambda s: s.recall("u", "x", timeout_s=math.inf)),
    ("generation x", lambda s: s.list_memories("u", generation="x")),  # type: ignore[arg-type]
    ("generation x scenes", lambda s: s.list_scenes("u", generation="x")),  # type: ignore[arg-type]
    ("generation x persona", lambda s: s.get_persona("u", generation="x")),  # type: ignore[arg-type]
    ("scene name None", lambda s: s.get_scene("u", None)),  # type: ignore[arg-type]
    ("generation x scene", lambda s: s.get_scene("u", "Work", generation="x")),  # type: ignore[arg-type]
    ("write empty user", lambda s: s.write_memory("", "add", "likes tea")),
    ("write int user", lambda s: s.write_memory(42, "add", "likes tea")),  # type: ignore[arg-type]
    ("write None content", lambda s: s.write_memory("u", "add", None)),  # type: ignore[arg-type]
    ("read_events huge after", lambda s: s.read_events(after=2**70)),
    ("read_events types str", lambda s: s.read_events(types="l0.captured")),
    ("tail -1", lambda s: s.tail(-1)),
    ("read_stream None", lambda s: s.read_stream(None)),  # type: ignore[arg-type]
    ("append junk", lambda s: s.append([42])),  # type: ignore[list-item]
    ("rebuild names str", lambda s: s.rebuild("l0_messages")),
    ("end_session timeout nan", lambda s: s.end_session("u", "s", math.nan)),
    ("run_pipeline wait str", lambda s: s.run_pipeline("u", wait="no")),  # type: ignore[arg-type]
    ("forget_user unknown", lambda s: s.forget_user("nobody")),
]


@pytest.mark.parametrize("call", [c for _, c in BAD_CALLS], ids=[n for n, _ in BAD_CALLS])
def test_bad_input_raises_a_memstore_error_and_stores_nothing(
    store: Store, call: Callable[[Store], object]
) -> None:
    store.capture_turn("u", "s", "I like green tea", "ok")
    head = store.event_count()
    with pytest.raises(MemstoreError):
        call(store)
    assert store.event_count() == head


def test_write_memory_refuses_what_it_used_to_store(store: Store) -> None:
    with pytest.raises(InvalidIdError):
        store.write_memory("", "add", "likes tea")
    with pytest.raises(InvalidIdError):
        store.write_memory(42, "add", "likes tea")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="content"):
        store.write_memory("u", "add", None)  # type: ignore[arg-type]
    assert store.event_count() == 0
    assert store.list_memories("u") == []


def test_unknown_user_is_not_erased(store: Store) -> None:
    with pytest.raises(NotFoundError):
        store.forget_user("ghost")
    assert store.read_events(types=["erasure.user"]) == []


def test_cli_out_of_range_timestamp_is_an_error_not_a_traceback(
    target: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMSTORE_EMBEDDER", "hashing")
    args = ["capture", "--db", target, "--user", "u", "--session", "s"]
    args += ["--user-text", "hi", "--timestamp", "9999-12-31T23:00:00-05:00"]
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 1
    err = capsys.readouterr().err
    assert "out of range" in err and "Traceback" not in err


# --- fuzzing every public method ---------------------------------------------------

LIFECYCLE = {"close", "open", "start_background"}
# Methods the fuzzer must know exist (it fuzzes whatever public methods Store has).
EXPECTED = {
    "append", "capture", "capture_turn", "catch_up", "embedding_status", "end_session",
    "event_count", "forget_memory", "forget_user", "get_persona", "info", "list_memories",
    "list_scenes", "memory_history", "pipeline_status", "projection_status", "read_events",
    "read_stream", "rebuild", "recall", "rederive", "reindex", "run_pipeline",
    "search_conversations", "search_memories", "tail", "write_memory", "get_scene",
}  # fmt: skip


def public_methods() -> list[str]:
    return sorted(
        name
        for name, fn in inspect.getmembers(Store, inspect.isfunction)
        if not name.startswith("_") and name not in LIFECYCLE
    )


# Strings that broke things before, then any code point (lone surrogates and
# control characters included).
NASTY = ["\ud800", "x\udc00y", "a\x00b", "' OR 1=1 --", '"', "AND(", "*", "%", "/", " ", "𝄞"]
JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(NASTY),
    st.text(st.characters(exclude_categories=()), max_size=12),
    st.binary(max_size=8),
    st.lists(st.one_of(st.none(), st.integers(), st.text(max_size=4)), max_size=3),
    st.dictionaries(st.text(max_size=4), st.one_of(st.none(), st.text(max_size=4)), max_size=2),
    st.just(object()),
)
IDS = st.sampled_from(["alice", "bob", "a/b", "50%", " alice", "a\x00lice", "\ud800x", ""])
TEXT = st.one_of(
    st.sampled_from(NASTY),
    st.text(max_size=40),
    st.text(st.characters(exclude_categories=()), max_size=10),
)
MESSAGE = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["user", "assistant", "wizard", None]),
        "content": st.one_of(TEXT, JUNK),
    },
    optional={
        "timestamp": st.one_of(
            st.sampled_from(["2023-05-08T10:00:00Z", "9999-12-31T23:00:00-05:00", "0001-01-01"]),
            st.datetimes(timezones=st.just(UTC)),
            JUNK,
        ),
        "id": st.one_of(IDS, JUNK),
        "name": JUNK,
    },
)
VALID: dict[str, st.SearchStrategy[Any]] = {
    "user_id": IDS,
    "session_id": IDS,
    "agent_id": IDS,
    "turn_id": IDS,
    "memory_id": st.sampled_from(["m1", "nope@3"]),
    "messages": st.lists(MESSAGE, max_size=3),
    "user_text": TEXT,
    "assistant_text": TEXT,
    "query": TEXT,
    "content": TEXT,
    "old_content": TEXT,
    "reason": TEXT,
    "scene": TEXT,
    "origin": st.sampled_from(["user_stated", "host", "x"]),
    "stream": st.one_of(TEXT, st.sampled_from(["l0/alice/s1", "derive/alice"])),
    "action": st.sampled_from(["add", "replace", "remove", "delete"]),
    "type": st.sampled_from(["persona", "episodic", "instruction", "other"]),
    "strategy": st.sampled_from(["keyword", "vector", "hybrid", "magic"]),
    "from_layer": st.sampled_from(["l1", "l2", "l3", "l9"]),
    "limit": st.one_of(st.integers(-5, 50), st.sampled_from(["3", "x"]), st.floats()),
    "generation": st.one_of(st.none(), st.integers(-2, 3)),
    "budget_chars": st.one_of(st.none(), st.integers(0, 5000)),
    "timeout_s": st.floats(0, 2),
    "wait_s": st.floats(0, 1),
    "wait": st.booleans(),
    "n": st.integers(-2, 30),
    "after": st.integers(-2, 30),
    "after_seq": st.integers(-2, 30),
    "timestamp": st.one_of(st.none(), st.datetimes(min_value=datetime(1, 1, 2))),
    "names": st.one_of(st.none(), st.lists(st.sampled_from(["l0_messages", "nope"]), max_size=2)),
    "types": st.one_of(st.none(), st.lists(st.sampled_from(["l0.captured", "x"]), max_size=2)),
    "events": st.lists(
        st.builds(
            NewEvent,
            stream=st.sampled_from(["fuzz/1", ""]),
            payload=st.builds(SessionEnded, session_id=TEXT),
            user_id=IDS,
        ),
        max_size=2,
    ),
}


@pytest.fixture(scope="module")
def fuzz_store(module_target: Targets) -> Iterator[Store]:
    path = module_target("fuzz.db")
    cfg = Settings().replace(embedder="hashing", scheduler=False, background_indexer=False)
    store = Store.open(path, settings=cfg)
    for user in ("alice", "bob"):
        store.capture_turn(user, "s1", f"{user} likes green tea and hiking", "ok")
        store.write_memory(user, "add", f"{user} likes green tea")
    try:
        yield store
    finally:
        store.close()


def test_the_fuzzer_sees_every_public_method() -> None:
    assert set(public_methods()) >= EXPECTED


@pytest.mark.parametrize("name", public_methods())
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_fuzz_public_method_succeeds_or_raises_memstore_error(
    fuzz_store: Store, name: str, data: st.DataObject
) -> None:
    method = getattr(fuzz_store, name)
    kwargs: dict[str, Any] = {}
    for p in inspect.signature(method).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        optional = p.default is not inspect.Parameter.empty
        if optional and data.draw(st.booleans(), label=f"omit {p.name}"):
            continue
        strategy = st.one_of(VALID[p.name], JUNK) if p.name in VALID else JUNK
        if p.name == "progress":
            strategy = st.one_of(st.none(), st.just(lambda _n: None), JUNK)
        kwargs[p.name] = data.draw(strategy, label=p.name)
    with contextlib.suppress(MemstoreError):
        method(**kwargs)
