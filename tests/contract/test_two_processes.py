"""Two processes capture and derive at once on one store: every captured
message is kept, and every one is extracted exactly once."""

from __future__ import annotations

import multiprocessing as mp

import pytest

from memstore import Settings
from memstore.bench.fakeopenai import FakeOpenAI
from memstore.derive.events import L1Extracted
from memstore.store import Store
from tests.contract import derive_workers
from tests.derive_support import ScriptedLLM


@pytest.mark.slow
def test_two_processes_lose_nothing_and_derive_nothing_twice(
    target: str, settings: Settings
) -> None:
    script = ScriptedLLM()
    with FakeOpenAI(chat=script) as fake:
        s = settings.replace(llm_base_url=fake.base_url, llm_model="fake-model")
        Store.open(target, settings=s).close()  # migrate once, up front
        ctx = mp.get_context("spawn")
        start = ctx.Event()
        procs = [
            ctx.Process(
                target=derive_workers.capture_and_derive, args=(target, fake.base_url, p, start)
            )
            for p in range(2)
        ]
        for p in procs:
            p.start()
        start.set()
        for p in procs:
            p.join(300)
            assert p.exitcode == 0
        with Store.open(target, settings=s) as store:
            for user in ("u0", "u1"):
                store.end_session(user, "s")  # extracts whatever is still pending
            with store._db.read() as conn:
                captured = {
                    str(r[0])
                    for r in conn.exec_driver_sql(
                        "SELECT message_id FROM l0_messages WHERE role = 'user'"
                    )
                }
            assert len(captured) == 2 * derive_workers.ROUNDS
            extracted: list[str] = []
            runs = store.read_events(types=[L1Extracted.TYPE])
            assert len(runs) >= 2
            for e in runs:
                assert isinstance(e.payload, L1Extracted)
                extracted += e.payload.message_ids
    assert len(extracted) == len(set(extracted))  # nothing derived twice
    assert captured <= set(extracted)  # nothing lost
