"""An LLM outage longer than the retry schedule, through the real stack (the
store's own pipeline, the real ``openai`` client, the fake server): a session
ended during the outage is extracted once the LLM answers again, with no new
capture and no manual run. The clock is the test's; the scheduler's due-job
path runs the timers (no sleeps)."""

from __future__ import annotations

import pytest

from memstore import Settings
from memstore.pipeline import queue
from memstore.store import Store
from memstore.timeutil import from_iso
from tests.backends import Targets
from tests.derive_support import ScriptedLLM
from tests.fakeopenai import FakeOpenAI
from tests.pipeline_support import FakeClock

pytestmark = pytest.mark.both_backends


def _waiting(store: Store) -> list[queue.WorkItem]:
    with store._db.read() as conn:
        return queue.pending(conn)


def test_a_session_ended_in_an_outage_is_extracted_after_it(
    new_target: Targets, settings: Settings
) -> None:
    script = ScriptedLLM()
    clock = FakeClock()
    with FakeOpenAI(chat=script) as fake:
        s = settings.replace(
            llm_base_url=fake.base_url,
            llm_model="fake-model",
            llm_max_retries=0,
            llm_timeout_s=5.0,
            max_retries=2,
            retry_delay_s=30,
            retry_max_delay_s=600,
            # An outage, not a model that cannot write JSON: no rule-deriver fallback.
            llm_fallback_after=0,
        )
        store = Store.open(new_target("m.db"), settings=s, clock=clock)
        try:
            svc = store._pipeline
            assert svc is not None
            script.override["extract"] = "the model is overloaded"  # unusable: every run fails
            store.capture("alice", "s1", [{"role": "user", "content": "I am vegetarian."}])
            report = store.end_session("alice", "s1", timeout_s=30)
            assert report["pending_after"] == 1 and not report["ran"][0]["ok"]
            for _ in range(6):  # past max_retries: still waiting, never dropped
                (item,) = _waiting(store)
                clock.now = from_iso(item.run_after)
                svc.timers.run_due(clock())
            (item,) = _waiting(store)
            assert item.attempts == 7
            assert store.list_memories("alice") == []

            del script.override["extract"]  # the LLM is back
            clock.now = from_iso(item.run_after)
            svc.timers.run_due(clock())
            assert [m["content"] for m in store.list_memories("alice")] == [
                "The user is vegetarian."
            ]
            assert store.pipeline_status("alice")[0]["sessions"][0]["messages_pending"] == 0
        finally:
            store.close()
