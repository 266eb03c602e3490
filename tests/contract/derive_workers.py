"""Child process of test_two_processes: captures and derives on a shared store."""

from __future__ import annotations

from typing import Any

from memstore import Settings
from memstore.store import Store

ROUNDS = 6


def _settings(llm_url: str, *, timeout_s: float) -> Settings:
    """A worker's settings: the fake model, no timers, no indexer."""
    return Settings().replace(
        embedder="hashing",
        scheduler=False,
        background_indexer=False,
        llm_base_url=llm_url,
        llm_model="fake-model",
        llm_max_retries=1,
        llm_timeout_s=timeout_s,
    )


def capture_and_derive(target: str, llm_url: str, proc: int, start: Any) -> None:
    settings = _settings(llm_url, timeout_s=10.0)
    start.wait(120)
    with Store.open(target, settings=settings) as store:
        for r in range(ROUNDS):
            # Both processes talk to the same two users and sessions.
            user = f"u{r % 2}"
            store.capture_turn(
                user, "s", f"p{proc} round {r}: I live in Berlin", "ok", turn_id=f"p{proc}-{r}"
            )
            store.run_pipeline(user, wait=True)


def drain_worker(target: str, llm_url: str, ready: Any, start: Any, done: Any) -> None:
    """A worker process: derive whatever is queued on the shared store, then
    report how many runs it made (``done`` is a multiprocessing queue)."""
    settings = _settings(llm_url, timeout_s=30.0)
    with Store.open(target, settings=settings) as store:
        ready.set()
        start.wait(120)
        outcomes = store.run_pipeline(wait=True)
        done.put(sum(1 for o in outcomes if o.ok))
