"""Recall composes memories and conversation excerpts in one budget, behind a gate."""

from __future__ import annotations

import unicodedata
from collections.abc import Iterator

import pytest

from memstore import Recall, RecalledMemory, RecalledMessage, Settings, Store
from memstore import recall as recall_api
from memstore.recall.text import ELLIPSIS, clip_around, safe_cut
from memstore.text import strip_injected
from tests.backends import Targets

pytestmark = pytest.mark.both_backends

PAST = [
    ("s1", "user", "I adopted a golden retriever puppy named Biscuit last spring."),
    ("s1", "assistant", "That is lovely! How is Biscuit settling in?"),
    ("s1", "user", "Great, though he chews every shoe in the flat."),
    ("s2", "user", "My sister Jana is getting married in Prague in September."),
    ("s2", "assistant", "Congratulations to Jana! Are you giving a speech at the wedding?"),
    ("s2", "user", "Yes, and I am terrified of public speaking."),
    ("s3", "user", "Please always answer me in British English."),
    ("s3", "user", "I started learning the cello in January with a teacher called Mrs Okafor."),
]

OFF_TOPIC = (
    "What is the capital of Australia?",
    "Write a haiku about autumn.",
    "How do I reverse a list in Python?",
    "What is 17 times 23?",
)


def _capture(store: Store, user: str = "u") -> None:
    for i, (session, role, text) in enumerate(PAST):
        store.capture(
            user,
            session,
            [
                {
                    "role": role,
                    "content": text,
                    "timestamp": f"2024-0{1 + i // 3}-1{i % 3}T10:00:00Z",
                    "id": f"m{i}",
                }
            ],
        )


@pytest.fixture(params=["hashing", "none"], scope="module")
def cstore(request: pytest.FixtureRequest, module_target: Targets) -> Iterator[Store]:
    """A user with three past sessions, derived (offline rules) and indexed; once
    with vectors (hashing embedder) and once keyword-only (no embedder). Built
    once per module: recall only reads, so the tests cannot disturb each other."""
    settings = Settings().replace(embedder=request.param, scheduler=False, background_indexer=False)
    path = module_target("c.db")
    with Store.open(path, settings=settings) as store:
        _capture(store)
        for s in ("s1", "s2", "s3"):
            store.end_session("u", s)
        store.run_pipeline("u")
        store.reindex()
        yield store


def test_recall_composes_memories_and_excerpts_with_typed_records(cstore: Store) -> None:
    r = cstore.recall("u", "Which shoes does Biscuit chew?", session_id="s9")
    assert isinstance(r, Recall)
    assert "<conversation-excerpts>" in r.per_turn
    assert r.text == f"{r.stable}\n{r.per_turn}"
    assert "chews every shoe" in r.per_turn
    got = {m.message_id: m for m in r.messages}
    assert "m2" in got
    msg = got["m2"]
    assert isinstance(msg, RecalledMessage)
    assert (msg.session_id, msg.role) == ("s1", "user")
    assert msg.occurred_at.startswith("2024-01-12")
    assert "[2024-01-12 10:00 · user]" in r.per_turn  # date and role with the excerpt
    for m in r.memories:
        assert isinstance(m, RecalledMemory) and m.memory_id
    # Standing instructions are in the stable part, whatever the query.
    assert "British English" in r.stable and "British English" not in r.per_turn
    assert [m.standing for m in r.memories if "British" in m.content] == [True]
    assert strip_injected(r.text).strip() == ""  # everything sits inside a block


def test_a_turn_behind_a_recalled_memory_is_not_repeated(cstore: Store) -> None:
    r = cstore.recall("u", "When does Jana get married in Prague?")
    sources = {s for m in r.memories if not m.standing for s in m.source_message_ids}
    excerpts = {m.message_id for m in r.messages}
    assert not sources & excerpts
    assert r.text.count("getting married in Prague") + r.text.count("married in Prague") >= 1
    assert r.text.count("My sister Jana is getting married") <= 1


def test_an_off_topic_question_injects_nothing_but_the_stable_part(cstore: Store) -> None:
    for q in OFF_TOPIC:
        r = cstore.recall("u", q)
        assert r.per_turn == "", (q, r.per_turn)
        assert r.messages == [] and all(m.standing for m in r.memories), q
        assert "British English" in r.text  # the stable part stays
        # With vectors there are always candidates: the gate dropped them.
        assert r.gated > 0 or cstore._embedder is None


def test_the_gate_threshold_decides(cstore: Store) -> None:
    q = "Tell me about the cello lessons with Mrs Okafor"
    assert cstore.recall("u", q, threshold=0.0).messages
    assert not cstore.recall("u", q, threshold=1e9).messages


def test_messages_of_the_current_session_are_not_excerpted(cstore: Store) -> None:
    r = cstore.recall("u", "the cello teacher Mrs Okafor", session_id="s3")
    assert all(m.session_id != "s3" for m in r.messages)


@pytest.mark.parametrize("budget", [0, 1, 59])
def test_a_zero_or_tiny_budget_injects_at_most_the_budget(cstore: Store, budget: int) -> None:
    r = cstore.recall("u", "Biscuit chews shoes", budget_chars=budget)
    assert len(r.text) <= budget
    if budget == 0:
        assert r.text == "" and r.messages == []


def test_a_small_budget_still_carries_the_best_item(cstore: Store) -> None:
    full = cstore.recall("u", "Biscuit chews every shoe", budget_chars=100_000)
    best = (full.memories[1:] or full.messages)[0]  # [0] is the standing instruction
    small = cstore.recall("u", "Biscuit chews every shoe", budget_chars=300)
    assert len(small.text) <= 300
    assert small.per_turn, small.text
    first = (small.memories[1:] or small.messages)[0]
    assert type(first) is type(best)
    assert getattr(first, "memory_id", None) == getattr(best, "memory_id", None)
    assert getattr(first, "message_id", None) == getattr(best, "message_id", None)


def test_a_huge_budget_is_not_filled_with_noise(cstore: Store) -> None:
    r = cstore.recall("u", "How is Biscuit?", budget_chars=10_000_000)
    assert not r.truncated
    assert "cello" not in r.per_turn and "public speaking" not in r.per_turn


def test_long_messages_are_clipped_around_the_match(
    new_target: Targets, settings: Settings
) -> None:
    filler = "We talked about many unrelated things that afternoon. " * 40
    text = filler + "The combination for the bike lock is written under the blue vase. " + filler
    with Store.open(new_target("l.db"), settings=settings) as store:
        store.capture("u", "old", [{"role": "user", "content": text, "id": "long"}])
        store.reindex()
        r = store.recall("u", "where is the bike lock combination written")
    (msg,) = [m for m in r.messages if m.message_id == "long"]
    assert msg.clipped and len(msg.text) < len(text)
    assert "bike lock is written under the blue vase" in msg.text
    assert msg.text.startswith(ELLIPSIS) and msg.text.endswith(ELLIPSIS)
    assert msg.text.strip(ELLIPSIS).strip() in text


CLUSTERS = ["👩‍👩‍👧‍👦", "🇨🇿", "é", "👍🏽", "ё", "❤️", "ﷺ", "字"]


@pytest.mark.parametrize("cap", [2, 5, 17, 40, 61, 100])
def test_clipping_never_splits_a_character(cap: int) -> None:
    body = " ".join(CLUSTERS[i % len(CLUSTERS)] * (1 + i % 3) for i in range(120))
    text = body + " needle here " + body
    out, cut = clip_around(text, "needle", cap)
    assert cut and len(out) <= cap
    inner = out.strip(ELLIPSIS)
    assert inner in text
    start = text.index(inner)
    for edge in (start, start + len(inner)):
        assert safe_cut(text, edge) == edge, (edge, text[edge - 3 : edge + 3])
        if 0 < edge < len(text):
            assert not unicodedata.combining(text[edge])
            assert text[edge] not in "\u200d\ufe0f" and text[edge - 1] != "\u200d"
    if cap >= 40:
        assert "needle" in out


def test_safe_cut_keeps_flags_and_zwj_sequences_whole() -> None:
    flags = "🇨🇿🇩🇪🇫🇷"
    assert [safe_cut(flags, i) for i in range(7)] == [0, 0, 2, 2, 4, 4, 6]
    family = "a👩‍👧b"
    assert safe_cut(family, 3) == 1 and safe_cut(family, 2) == 1
    assert safe_cut("e\u0301x", 1) == 0


def test_recall_records_are_exported() -> None:
    import memstore

    for name in ("Recall", "RecalledMemory", "RecalledMessage"):
        assert name in memstore.__all__ and hasattr(memstore, name)


def test_standing_instructions_survive_an_empty_query(cstore: Store) -> None:
    r = recall_api.recall(cstore._derivation, "   ", user_id="u")
    assert "British English" in r.stable and r.per_turn == ""
