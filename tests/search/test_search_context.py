"""Conversation-aware search: neighbouring turns, speaker names, context vectors."""

from __future__ import annotations

from pathlib import Path

import pytest

from memstore import Settings
from memstore.store import Store

pytestmark = pytest.mark.both_backends


def _open(path: Path, **kw: object) -> Store:
    settings = Settings().replace(
        embedder="hashing", scheduler=False, background_indexer=False, **kw
    )  # type: ignore[arg-type]
    return Store.open(path, settings=settings)


def test_the_turn_after_a_match_is_found(target: str) -> None:
    with _open(target) as s:
        s.capture(
            "u",
            "s1",
            [
                {"role": "user", "content": "What instrument did you pick up last year?"},
                {"role": "assistant", "content": "The cello, and I practise every evening."},
                {"role": "user", "content": "Unrelated: the weather is grey today."},
            ],
        )
        s.capture("u", "s2", [{"role": "user", "content": "Nothing about music here at all."}])
        s.reindex()
        hits = s.search_conversations("u", "which instrument", limit=3)
        texts = [h.text for h in hits]
        assert texts[0].startswith("What instrument")
        assert "The cello, and I practise every evening." in texts
        with_nb = {h.text: h.score for h in hits}
        # the pure strategies are not rescored
        kw = s.search_conversations("u", "which instrument", strategy="keyword")
        assert [h.text for h in kw] == ["What instrument did you pick up last year?"]
    with _open(target, neighbour_weight=0.0) as s:
        hits = s.search_conversations("u", "which instrument", limit=3)
        without = {h.text: h.score for h in hits}
    answer = "The cello, and I practise every evening."
    assert with_nb[answer] > without.get(answer, 0.0)
    # the match itself lends its score; it does not gain from a weak neighbour more
    question = "What instrument did you pick up last year?"
    assert with_nb[question] - without[question] < with_nb[answer] - without.get(answer, 0.0)


def test_neighbours_never_cross_sessions_or_users(target: str) -> None:
    with _open(target) as s:
        s.capture("u", "a", [{"role": "user", "content": "zebra crossing near the school"}])
        s.capture("u", "b", [{"role": "user", "content": "completely different topic"}])
        s.capture("other", "a", [{"role": "user", "content": "secret of the other user"}])
        s.reindex()
        hits = s.search_conversations("u", "zebra", limit=5)
        assert hits[0].session_id == "a"
        assert all(h.user_id == "u" for h in hits)
        assert all(h.session_id == "a" or h.score < hits[0].score for h in hits)


def test_speaker_named_in_the_query_is_preferred(target: str) -> None:
    with _open(target) as s:
        s.capture(
            "conv",
            "s1",
            [
                {"role": "user", "name": "Caroline", "content": "I went to a pottery class"},
                {
                    "role": "assistant",
                    "name": "Melanie",
                    "content": "I went to a pottery class too",
                },
            ],
        )
        s.reindex()
        hits = s.search_conversations("conv", "What class did Melanie go to?", limit=2)
        assert hits[0].text == "I went to a pottery class too"
        hits = s.search_conversations("conv", "What class did Caroline go to?", limit=2)
        assert hits[0].text == "I went to a pottery class"


def test_context_vectors_live_in_their_own_space(target: str) -> None:
    with _open(target) as s:
        s.capture_turn("u", "s", "first", "second")
        s.reindex()
        assert s._indexer is not None
        assert s._indexer.model_for("l0") == "hashing-v1-384+ctx1"
        assert s._indexer.model_for("l1") == "hashing-v1-384"
    with _open(target, context_vectors=False) as s:
        assert s._indexer is not None and s._indexer.model_for("l0") == "hashing-v1-384"
        # a different space: keyword-only until it is filled, never mixed
        assert not s._search_engine.vector_ready("l0")
        s.reindex()
        assert s._search_engine.vector_ready("l0")
