"""Many processes appending to one log: positions stay dense, unique and in
commit order (a reader never sees position N before N-1), on both backends."""

from __future__ import annotations

import multiprocessing as mp

import pytest

from memstore import Settings
from memstore.store import Store
from tests.contract import log_workers

WRITERS = 3


def _settings() -> Settings:
    return Settings().replace(embedder="hashing", scheduler=False, background_indexer=False)


@pytest.mark.slow
def test_many_processes_append_without_gaps_or_duplicates(target: str) -> None:
    Store.open(target, settings=_settings()).close()  # migrate once, up front
    ctx = mp.get_context("spawn")
    start, stop, out = ctx.Event(), ctx.Event(), ctx.Queue()
    writers = [
        ctx.Process(target=log_workers.writer, args=(target, w, start)) for w in range(WRITERS)
    ]
    reader = ctx.Process(target=log_workers.reader, args=(target, stop, out))
    for p in [*writers, reader]:
        p.start()
    start.set()
    for p in writers:
        p.join(300)
        assert p.exitcode == 0
    stop.set()
    holes, reads = out.get(timeout=60)
    reader.join(60)
    assert reads > 0 and holes == 0
    with Store.open(target, settings=_settings()) as s:
        events = s.read_events()
        positions = [e.position for e in events]
        assert positions == list(range(1, len(events) + 1))
        # Retried keys were stored once.
        keys = [e.idempotency_key for e in events if e.idempotency_key]
        assert len(keys) == len(set(keys)) == WRITERS * 20  # 30 appends, every third a retry
        per_stream: dict[str, list[int]] = {}
        for e in events:
            per_stream.setdefault(e.stream, []).append(e.seq)
        for seqs in per_stream.values():
            assert seqs == list(range(1, len(seqs) + 1))
