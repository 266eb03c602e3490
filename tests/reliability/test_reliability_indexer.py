"""One bad embedding never stops vector indexing.

The embedder here wraps the real hashing embedder and misbehaves for texts
whose last line starts with a marker: NaN vectors for ``POISON``, an error
for ``REJECT`` (a model refusing one input)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from click.testing import CliRunner

from memstore.cli import cli
from memstore.cli.core import doctor_report
from memstore.embeddings import Embedder, FloatArray
from memstore.errors import EmbeddingError
from memstore.store import Store
from memstore.timeutil import timedelta
from memstore.vectors import quarantine
from memstore.vectors.indexer import Indexer
from tests.pipeline_support import FakeClock

pytestmark = pytest.mark.both_backends


class Flaky(Embedder):
    kind = "test"

    def __init__(self, inner: Embedder, *, healed: bool = False) -> None:
        self.inner = inner
        self.model_id = inner.model_id
        self.dimensions = inner.dimensions
        self.healed = healed
        self.calls = 0

    def embed_documents(self, texts: Sequence[str]) -> FloatArray:
        self.calls += 1
        last = [t.split("\n")[-1] for t in texts]
        if not self.healed and any(t.startswith("REJECT") for t in last):
            raise EmbeddingError("model refused an input")
        out = np.array(self.inner.embed_documents(texts), dtype=np.float32)
        for i, t in enumerate(last):
            if not self.healed and t.startswith("POISON"):
                out[i, 3] = np.nan
        return out

    def embed_query(self, text: str) -> FloatArray:
        return self.inner.embed_query(text)


def _indexer(store: Store, emb: Embedder, clock: FakeClock) -> Indexer:
    return Indexer(store._db, emb, clock, context_vectors=store.settings.embedding.context_vectors)


def _vector_ids(store: Store, user: str, query: str) -> set[str]:
    return {h.text for h in store.search_conversations(user, query, strategy="vector")}


def index_one_bad_row(store: Store, marker: str, clock: FakeClock) -> Flaky:
    """Alice's first turn is bad, bob's and her second are not; one indexer
    run handles all three (none raises), sets the bad one aside and makes the
    others searchable. Returns the embedder, for the retries that follow."""
    assert store._embedder is not None
    store.capture_turn("alice", "s1", f"{marker} the first words of alice")
    store.capture_turn("bob", "s1", "bob grows tomatoes on his balcony")
    store.capture_turn("alice", "s1", "alice plays the cello every evening")
    flaky = Flaky(store._embedder)
    assert _indexer(store, flaky, clock).run_until_idle() == 3
    status = store.embedding_status()
    assert status["l0"]["ready"] is True
    assert status["l0"]["pending"] == 0 and status["l0"]["quarantined"] == 1
    assert "bob grows tomatoes on his balcony" in _vector_ids(store, "bob", "tomatoes balcony")
    assert "alice plays the cello every evening" in _vector_ids(store, "alice", "cello evening")
    return flaky


@pytest.mark.parametrize("marker", ["POISON", "REJECT"])
def test_one_bad_message_is_quarantined_and_the_rest_indexed(
    store: Store, target: str, marker: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMSTORE_EMBEDDER", "hashing")
    clock = FakeClock()
    flaky = index_one_bad_row(store, marker, clock)
    with store._db.read() as conn:
        held = quarantine.items(conn)
    assert [(q.user_id, q.attempts) for q in held] == [("alice", 1)]
    report, _ = doctor_report(target)
    assert str(report["vector_quarantine"]).startswith("1 row(s) not embedded")
    status = CliRunner().invoke(cli, ["projections", "status", "--db", target])
    assert status.exit_code == 0, status.output
    assert "vector quarantine: 1 row(s) not embedded" in status.output

    # Not retried in every batch: a new capture does not re-embed the bad row.
    store.capture_turn("bob", "s2", "bob adopted a grey cat")
    flaky.calls = 0
    _indexer(store, flaky, clock).run_until_idle()
    assert flaky.calls == 1
    assert store.embedding_status()["l0"]["quarantined"] == 1

    # Retried once its back-off passed; a model that now works clears it.
    clock.advance(quarantine.FIRST_RETRY_S + 1)
    flaky.healed = True
    assert _indexer(store, flaky, clock).run_until_idle() == 1
    assert store.embedding_status()["l0"]["quarantined"] == 0
    assert f"{marker} the first words of alice" in _vector_ids(store, "alice", "first words")


# The retry back-off, a bad memory, a model that is down and erasure run on
# both backends: tests/contract/test_vector_quarantine_contract.py.


def test_backoff_grows_and_is_capped() -> None:
    assert quarantine.backoff_s(1) == quarantine.FIRST_RETRY_S
    assert quarantine.backoff_s(2) == 2 * quarantine.FIRST_RETRY_S
    assert quarantine.backoff_s(50) == quarantine.MAX_RETRY_S
    assert timedelta(seconds=quarantine.MAX_RETRY_S).days == 1
