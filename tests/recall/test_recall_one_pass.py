"""Recall's cheap path: one query embedding, one snapshot, one neighbour query.

No timing assertions (latency is in BENCHMARKS.md, `bench recall-scale`):
these check the properties the latency rests on, on a real store.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from sqlalchemy import event, text

from memstore import Settings, Store
from memstore.embeddings import Embedder, FloatArray
from memstore.errors import EmbeddingError
from memstore.recall import compose
from memstore.recall.rank import collect, neighbours
from tests.backends import Targets

pytestmark = pytest.mark.both_backends

SESSION = [
    ("user", "My sister Jana is getting married in Prague in September."),
    ("assistant", "Noted."),
    ("assistant", "Are you giving a speech at the wedding?"),
    ("user", "Yes, the best man speech."),
    ("user", "I am terrified of public speaking, to be honest."),
]


class Counting(Embedder):
    """The store's own embedder, counting query embeddings; ``gate`` (when
    set) holds each query embedding until released, ``fail`` makes it raise."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.model_id = inner.model_id
        self.dimensions = inner.dimensions
        self.queries = 0
        self.gate: threading.Event | None = None
        self.fail = False

    def embed_documents(self, texts: Sequence[str]) -> FloatArray:
        return self.inner.embed_documents(texts)

    def embed_query(self, text_: str) -> FloatArray:
        self.queries += 1
        if self.gate is not None:
            self.gate.wait(timeout=30)
        if self.fail:
            raise EmbeddingError("the embedder is down")
        return self.inner.embed_query(text_)


@pytest.fixture
def store(new_target: Targets) -> Iterator[Store]:
    settings = Settings().replace(embedder="hashing", scheduler=False, background_indexer=False)
    with Store.open(new_target("r.db"), settings=settings) as s:
        s.capture(
            "u",
            "s1",
            [
                {"role": r, "content": t, "timestamp": f"2024-03-01T10:0{i}:00Z", "id": f"m{i}"}
                for i, (r, t) in enumerate(SESSION)
            ],
        )
        s.end_session("u", "s1")
        s.run_pipeline("u")
        s.reindex()
        yield s


def _counting(store: Store) -> Counting:
    engine = store._search_engine
    assert engine.embedder is not None
    counting = Counting(engine.embedder)
    engine.embedder = counting
    engine.queries.cache.clear()
    return counting


def test_one_recall_embeds_its_query_once(store: Store) -> None:
    counting = _counting(store)
    r = store.recall("u", "Where is Jana getting married?")
    assert "Prague" in r.per_turn
    # The prefetch, the memory search, the conversation search and the gate
    # all use one embedding.
    assert counting.queries == 1


def test_both_keyword_searches_run_before_either_waits_for_the_vector(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    counting = _counting(store)
    counting.gate = threading.Event()
    engine = store._search_engine
    order: list[str] = []
    for name, label in (("keyword_list", "keyword"), ("_vector", "vector")):
        real = getattr(engine, name)

        def traced(conn: Any, ask: Any, *rest: Any, _real: Any = real, _name: str = label) -> Any:
            order.append(f"{_name} {ask.kind}")
            if _name == "keyword" and order.count("keyword l0") and order.count("keyword l1"):
                counting.gate.set()  # type: ignore[union-attr]  # both keyword lists are done
            return _real(conn, ask, *rest)

        monkeypatch.setattr(engine, name, traced)
    r = store.recall("u", "Where is Jana getting married?")
    assert "Prague" in r.per_turn
    # Recall's query embedding is held until both keyword lists exist: had a
    # vector search come first, it would have waited for it (the gate opens
    # only after both) and the order would show it.
    assert order == ["keyword l1", "keyword l0", "vector l1", "vector l0"]


def test_searched_together_equals_searched_apart(store: Store) -> None:
    store.write_memory("u", "add", "Jana is the user's sister; her wedding is in Prague.")
    store.reindex()
    q = "Jana's wedding speech"
    with store._db.read() as conn:
        mem, msg = store._derivation.search_both(conn, q, user_id="u", memories=10, messages=20)
    assert mem == store.search_memories("u", q, limit=10)
    assert msg == store.search_conversations("u", q, limit=20)
    assert mem and msg


def test_a_search_waits_for_the_running_embedding_instead_of_repeating_it(
    store: Store,
) -> None:
    counting = _counting(store)
    counting.gate = threading.Event()
    engine = store._search_engine
    engine.prefetch_query("wedding speech")
    got: list[Any] = []
    searcher = threading.Thread(
        target=lambda: got.append(store.search_conversations("u", "wedding speech"))
    )
    searcher.start()
    searcher.join(timeout=0.5)
    assert searcher.is_alive()  # waiting for the prefetch, not embedding again
    counting.gate.set()
    searcher.join(timeout=30)
    assert got and got[0] and counting.queries == 1


def test_a_failed_prefetch_degrades_to_keyword_and_the_next_call_retries(
    store: Store,
) -> None:
    counting = _counting(store)
    counting.fail = True
    r = store.recall("u", "Where is Jana getting married?")
    assert not r.timed_out
    # Keyword search still finds the turn; the failure was handed to the
    # waiting search (no second embedding), and nothing is left pending.
    assert "Prague" in r.per_turn
    assert store._search_engine.queries.pending == {}
    counting.fail = False
    before = counting.queries
    store.search_conversations("u", "Where is Jana getting married?")
    assert counting.queries == before + 1


def test_collect_reads_in_one_transaction(store: Store) -> None:
    begins: list[object] = []

    def began(*_: object) -> None:
        begins.append(1)

    event.listen(store._db.engine, "begin", began)
    try:
        cands = collect(store._derivation, "Jana wedding Prague", "u", None, set())
    finally:
        event.remove(store._db.engine, "begin", began)
    assert cands and len(begins) == 1


def _rowid(store: Store, message_id: str) -> int:
    with store._db.read() as conn:
        got = conn.execute(
            text("SELECT id FROM l0_messages WHERE message_id = :m"), {"m": message_id}
        ).scalar()
    assert got is not None
    return int(got)


def test_neighbours_skip_content_free_turns_in_one_query(store: Store) -> None:
    with store._db.read() as conn:
        ids = {
            str(r[0]): int(r[1])
            for r in conn.execute(text("SELECT text, id FROM l0_messages ORDER BY position"))
        }
    question = ids["Are you giving a speech at the wedding?"]
    short = ids["Yes, the best man speech."]
    first = ids[SESSION[0][1]]
    with store._db.read() as conn:
        got = neighbours(conn, {question: False, short: True, first: True})
    nxt, prev, none = got[question], got[short], got[first]
    assert nxt is not None and nxt["text"] == "Yes, the best man speech."
    assert prev is not None and prev["text"] == "Are you giving a speech at the wedding?"
    assert none is None  # nothing before the first turn
    # The content-free "Noted." is never the turn shown for context.
    with store._db.read() as conn:
        back = neighbours(conn, {question: True})[question]
    assert back is not None and back["text"] == SESSION[0][1]


def test_a_short_reply_is_shown_with_the_turn_it_answers(store: Store) -> None:
    q = "best man speech"
    cands = collect(store._derivation, q, "u", None, set())
    for c in cands:
        c.relevance = 5.0 if "best man" in c.text else 0.0  # this checks the composition only
    _, _, msgs, _, _ = compose.per_turn_part(store._derivation, q, cands, 4000, 0.9)
    by_id = {m.message_id: m for m in msgs}
    shown = [m for m in msgs if m.text == "Yes, the best man speech."]
    assert shown, [m.text for m in msgs]
    ctx = [m for m in msgs if m.context_for == shown[0].message_id]
    assert [m.text for m in ctx] == ["Are you giving a speech at the wedding?"] or (
        # the question was itself a hit shown earlier: not repeated as context
        "Are you giving a speech at the wedding?" in {m.text for m in by_id.values()}
    )
