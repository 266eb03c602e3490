"""Keyword search folds Latin diacritics alike on SQLite and PostgreSQL.

FTS5 folds "crème" to "creme" itself, PostgreSQL's ``simple`` configuration
does not; memstore writes and queries the full-text columns folded
(memstore.text.fold), and a store indexed before that is re-indexed on open.
Real stores on both engines.
"""

from __future__ import annotations

import pytest

from memstore import Settings
from memstore.derive.memories.projection import L1Projection
from memstore.derive.messages.projection import L0Projection
from memstore.store import Store

pytestmark = pytest.mark.both_backends

MESSAGE = "Caroline's café serves crème brûlée."
MEMORY = "Loves the crème brûlée at Café Müller"


def _found(store: Store, query: str) -> tuple[list[str], list[str]]:
    messages = store.search_conversations("u", query, strategy="keyword")
    memories = store.search_memories("u", query, strategy="keyword")
    return [h.text for h in messages], [h.text for h in memories]


def test_plain_and_accented_queries_find_each_other(store: Store) -> None:
    store.capture("u", "s", [{"role": "user", "content": MESSAGE, "id": "m0"}])
    store.capture("u", "s", [{"role": "user", "content": "Plain creme for the cafe", "id": "m1"}])
    store.write_memory("u", "add", MEMORY)
    assert _found(store, "creme brulee") == (
        [MESSAGE, "Plain creme for the cafe"],
        [MEMORY],
    )
    assert _found(store, "mueller muller")[1] == [MEMORY]
    # The accented query finds the plain text too.
    assert set(_found(store, "crème")[0]) == {MESSAGE, "Plain creme for the cafe"}
    # Greek keeps its accents, on both engines (as FTS5 does).
    store.capture("u", "s", [{"role": "user", "content": "Καλημέρα φίλε", "id": "m2"}])
    assert _found(store, "Καλημέρα")[0] == ["Καλημέρα φίλε"]


def test_store_indexed_before_folding_is_reindexed_on_open(
    target: str, settings: Settings, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The code before folding: columns written as captured, older projection versions.
    with monkeypatch.context() as old:
        for module in ("memstore.text.fts", "memstore.text.stem", "memstore.search.keyword_pg"):
            old.setattr(f"{module}.fold_diacritics", lambda s: s)
        # The versions before folding: a store left at them is re-indexed on open.
        old.setattr(L0Projection, "version", 2)
        old.setattr(L1Projection, "version", 1)
        with Store.open(target, settings=settings) as s:
            s.capture("u", "s", [{"role": "user", "content": MESSAGE, "id": "m0"}])
            s.write_memory("u", "add", MEMORY)
            before = _found(s, "creme brulee")
    if backend == "postgresql":
        assert before == ([], [])  # what the upgrade fixes
    with Store.open(target, settings=settings) as s:
        assert _found(s, "creme brulee") == ([MESSAGE], [MEMORY])
        assert _found(s, "crème brûlée") == ([MESSAGE], [MEMORY])
