"""Equal scores come back in one order: by message id, on every path and every call."""

from __future__ import annotations

import pytest

from memstore import Settings, Store
from tests.backends import Targets

pytestmark = pytest.mark.both_backends


@pytest.mark.parametrize("strategy", ["vector", "keyword", "hybrid"])
def test_equal_scores_are_ordered_by_id(new_target: Targets, strategy: str) -> None:
    settings = Settings().replace(embedder="hashing", scheduler=False, background_indexer=False)
    with Store.open(new_target("m.db"), settings=settings) as store:
        # The same first message of eight sessions: the same vector, the same words.
        for i in range(8):
            store.capture_turn("alice", f"s{i}", "My cat Mochi sleeps all day", "Cute!")
        store.reindex()
        runs = [store.search_conversations("alice", "cat Mochi", limit=5,
                                           strategy=strategy)  # type: ignore[arg-type]
                for _ in range(3)]  # fmt: skip
        store.rebuild()
        runs.append(store.search_conversations("alice", "cat Mochi", limit=5,
                                               strategy=strategy))  # type: ignore[arg-type]  # fmt: skip
    first = [(h.id, h.score) for h in runs[0]]
    assert all([(h.id, h.score) for h in run] == first for run in runs)
    if strategy != "hybrid":  # hybrid's rescoring separates them (by recency)
        assert len(first) == 5 and len({s for _, s in first}) == 1  # all tied
        assert [i for i, _ in first] == sorted(i for i, _ in first)
