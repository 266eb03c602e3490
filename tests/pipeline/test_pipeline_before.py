"""A capture decides whether its session reached the extraction threshold from
the state read before its writes plus what it writes (memstore.pipeline.before):
the answer must be the one a read after the writes gives, in every case."""

from __future__ import annotations

import random
from typing import Any

import pytest

from memstore.derive.messages import capture as capture_mod
from memstore.pipeline import PipelineService, before, queue
from memstore.pipeline.state import pending_reached
from memstore.store import Store
from tests.backends import Targets
from tests.pipeline_support import FakeClock, FakeDeriver, open_store

pytestmark = pytest.mark.both_backends


@pytest.fixture
def compared(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """Every noted answer, next to what reading the state after the writes
    gives in the same transaction."""
    seen: list[tuple[Any, ...]] = []
    real = before.reached

    def both(conn: Any, user_id: str, session_id: str, threshold: Any) -> Any:
        got = real(conn, user_id, session_id, threshold)
        settings = threshold.__self__.settings
        seen.append(
            (user_id, session_id, got, pending_reached(conn, user_id, session_id, settings))
        )
        return got

    monkeypatch.setattr(before, "reached", both)
    return seen


def _one_transaction(store: Store, captures: list[tuple[str, str, list[dict[str, Any]]]]) -> None:
    """Several captures committed in one transaction, as group commit does."""
    kernel = store.internals.kernel
    plans = [
        capture_mod.plan(kernel, u, s, msgs, agent_id=None, max_bytes=1 << 20)
        for u, s, msgs in captures
    ]
    _, after = kernel._commit_many([p.build for p in plans])
    after()


def test_the_noted_answer_is_the_one_read_after_the_writes(
    new_target: Targets, clock: FakeClock, compared: list[tuple[Any, ...]]
) -> None:
    store = open_store(new_target("m.db"), clock, warmup=(1, 2, 4), extract_every=3)
    worker = PipelineService(store._derivation, deriver=FakeDeriver())
    rng = random.Random(7)
    keys = [("u", "a"), ("u", "b"), ("v", "a")]
    n = 0

    def msgs(rounds: int, assistant: bool = True) -> list[dict[str, Any]]:
        nonlocal n
        out = []
        for _ in range(rounds):
            n += 1
            out.append({"role": "user", "content": f"question {n}", "id": f"q{n}"})
            if assistant:
                out.append({"role": "assistant", "content": f"answer {n}", "id": f"a{n}"})
        return out

    try:
        for _ in range(120):
            u, s = rng.choice(keys)
            r = rng.random()
            if r < 0.45:
                store.capture(u, s, msgs(rng.choice([1, 1, 2, 3])))
            elif r < 0.55:  # a reply alone: no round
                n += 1
                store.capture(u, s, [{"role": "assistant", "content": f"more {n}", "id": f"m{n}"}])
            elif r < 0.7:  # two captures of one session and one of another, one transaction
                u2, s2 = rng.choice(keys)
                _one_transaction(store, [(u, s, msgs(1)), (u, s, msgs(2)), (u2, s2, msgs(1))])
            elif r < 0.8:  # a retry: nothing new, nothing decided
                store.capture(u, s, [{"role": "user", "content": "question 1", "id": "q1"}])
            else:  # extractions move the cursors (and count towards the warm-up)
                worker.drain(stages=("l1",))
    finally:
        worker.stop()
        store.close()

    noted = [c for c in compared if c[2] is not None]
    assert len(noted) == len(compared) > 60
    assert [c for c in compared if c[2] != c[3]] == []
    # Both answers were seen.
    assert {c[2][1] for c in noted} == {True, False}


def test_other_appends_read_the_state_after_their_writes(
    new_target: Targets, clock: FakeClock, compared: list[tuple[Any, ...]]
) -> None:
    # The kernel's append with the pipeline's hook, no capture build before
    # it (as importers append): nothing noted, so the state is read.
    from tests.pipeline_support import capture

    store = open_store(new_target("m.db"), clock, warmup=(2,))
    svc = PipelineService(store._derivation, deriver=FakeDeriver())
    try:
        capture(store, svc, "u", "s")
        capture(store, svc, "u", "s")
        assert [c[2] for c in compared] == [None, None]
        assert [c[3][1] for c in compared] == [False, True]
        with store._db.read() as conn:
            assert [i.stage for i in queue.pending(conn, "u")] == ["l1"]
    finally:
        svc.stop()
        store.close()
