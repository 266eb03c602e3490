"""``user_id`` is passed the same way to every public ``Store`` method: first,
positionally or by keyword. The query-first spelling of the search and
recall methods still works for one minor version, with a DeprecationWarning.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memstore.config import Settings
from memstore.store import Store

OLD_QUERY_FIRST = ("search_conversations", "search_memories", "recall", "recall_preview")


def _public_methods() -> dict[str, Any]:
    return {
        name: member
        for name, member in inspect.getmembers(Store, inspect.isfunction)
        if not name.startswith("_")
    }


def test_every_public_method_takes_user_id_first() -> None:
    with_user = {
        name: inspect.signature(fn)
        for name, fn in _public_methods().items()
        if "user_id" in inspect.signature(fn).parameters
    }
    # The list is not empty by accident: the per-user methods are all here.
    assert {"capture", "list_memories", "get_memory", "update_memory", "forget_memory"} <= set(
        with_user
    )
    assert set(OLD_QUERY_FIRST) <= set(with_user)
    wrong = {}
    for name, sig in with_user.items():
        params = list(sig.parameters.values())
        first = params[1]  # after self
        if first.name != "user_id" or first.kind is not inspect.Parameter.POSITIONAL_OR_KEYWORD:
            wrong[name] = str(sig)
    assert not wrong, f"user_id is not the first positional-or-keyword parameter: {wrong}"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Settings().replace(embedder="hashing", scheduler=False, background_indexer=False)
    with Store.open(tmp_path / "m.db", settings=s) as st:
        st.capture_turn("alice", "s1", "My name is Alice. I live in Lisbon.", "Nice!")
        st.run_pipeline("alice")
        st.reindex()
        yield st


# Every per-user reading method, called with the user positionally and by
# keyword: both spellings give the same answer and no warning.
CALLS: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
    ("search_conversations", ("Lisbon",), {"strategy": "keyword"}),
    ("search_memories", ("Lisbon",), {"strategy": "keyword"}),
    ("recall_preview", ("where do I live?",), {}),
    ("list_memories", (), {}),
    ("list_scenes", (), {}),
    ("get_persona", (), {}),
    ("list_sessions", (), {}),
    ("session_messages", ("s1",), {}),
    ("list_generations", (), {}),
    ("scene_navigation", (), {}),
    ("stable_part", (), {}),
    ("pipeline_status", (), {}),
    ("read_events", (), {}),
]


def _comparable(value: Any) -> Any:
    if isinstance(value, list):
        return [_comparable(v) for v in value]
    if hasattr(value, "candidates"):  # a RecallPreview: what a host would receive
        return value.recall.text
    if hasattr(value, "per_turn"):  # a Recall
        return value.text
    return value


@pytest.mark.parametrize(("name", "args", "kwargs"), CALLS, ids=[c[0] for c in CALLS])
def test_user_positional_and_keyword_agree(
    store: Store, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    method = getattr(store, name)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        positional = method("alice", *args, **kwargs)
        names = list(inspect.signature(method).parameters)[1 : 1 + len(args)]
        keyword = method(user_id="alice", **dict(zip(names, args, strict=True)), **kwargs)
    assert _comparable(positional) == _comparable(keyword)


def test_recall_user_first(store: Store) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        a = store.recall("alice", "where do I live?")
        b = store.recall(user_id="alice", query="where do I live?")
    assert "Lisbon" in a.text
    assert a.text == b.text


@pytest.mark.parametrize("name", OLD_QUERY_FIRST)
def test_query_first_spelling_warns_and_still_works(store: Store, name: str) -> None:
    method = getattr(store, name)
    new = method("alice", "where do I live in Lisbon?")
    with pytest.warns(DeprecationWarning, match=rf"{name}\(user_id, query"):
        old = method("where do I live in Lisbon?", user_id="alice")
    assert _comparable(old) == _comparable(new)
    assert _comparable(new)  # something was found, so the comparison means something


def test_query_first_spelling_keeps_the_other_arguments(store: Store) -> None:
    with pytest.warns(DeprecationWarning):
        hits = store.search_conversations("Lisbon", user_id="alice", limit=1, strategy="keyword")
    assert len(hits) == 1 and "Lisbon" in hits[0].text
