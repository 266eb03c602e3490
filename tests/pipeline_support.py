"""Shared pieces of the pipeline tests: a controllable clock, a stand-in
deriver that appends real derivation events, and a capture that goes through
the kernel's append like ``Store.capture``, hooked to the test's service."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from memstore.config import Settings
from memstore.derive import derive_projections
from memstore.derive.context import DeriveContext
from memstore.derive.events import (
    L1Extracted,
    PersonaUpdated,
    ScenesUpdated,
    derive_stream,
)
from memstore.derive.messages.events import MessagesCaptured, l0_stream
from memstore.events.log import NewEvent, StoredEvent
from memstore.kernel import Hooks
from memstore.pipeline import PipelineService, PipelineStateProjection
from memstore.pipeline.state import get_session
from memstore.projections.stats import StatsProjection
from memstore.store import Store
from memstore.timeutil import UTC, timedelta, to_iso
from tests.backends import Targets

T0 = datetime(2030, 1, 7, 9, 0, 0, tzinfo=UTC)


class FakeClock:
    def __init__(self, start: datetime = T0) -> None:
        self.now = start
        self._lock = threading.Lock()

    def __call__(self) -> datetime:
        with self._lock:
            return self.now

    def advance(self, seconds: float) -> datetime:
        with self._lock:
            self.now = self.now + timedelta(seconds=seconds)
            return self.now


@dataclass(frozen=True)
class Outcome:
    stage: str
    ok: bool
    run_id: str
    events_appended: int = 0
    new_memories: int = 0
    persona_requested: bool = False
    error: str | None = None


@dataclass
class FakeDeriver:
    """Appends the events a real deriver would; fails ``fail_l1`` times first."""

    fail_l1: int = 0
    fail_l2: int = 0
    persona_requested: bool = False
    persona_is_due: bool = False
    persona_done: set[str] = field(default_factory=set)
    l1_delay_s: float = 0.0
    calls: list[tuple[str, str, str]] = field(default_factory=list)
    overlaps: int = 0
    _active: set[tuple[str, str]] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def run_l1(
        self, store: DeriveContext, user_id: str, session_id: str, *, generation: int | None = None
    ) -> Outcome:
        key = (user_id, session_id)
        with self._lock:
            if key in self._active:
                self.overlaps += 1
            self._active.add(key)
            self.calls.append(("l1", user_id, session_id))
        try:
            if self.l1_delay_s:
                time.sleep(self.l1_delay_s)
            run_id = uuid.uuid4().hex
            if self.fail_l1 > 0:
                self.fail_l1 -= 1
                return Outcome("l1", False, run_id, error="scripted failure")
            with store.db.read() as conn:
                st = get_session(conn, user_id, session_id)
            assert st is not None
            store.append(
                [
                    NewEvent(
                        derive_stream(user_id),
                        L1Extracted(
                            session_id=session_id,
                            run_id=run_id,
                            generation=0,
                            deriver="rules",
                            model="fake",
                            prompt_version="t",
                            cursor_position=st.last_capture_position,
                            message_ids=[],
                            decisions=[],
                        ),
                        user_id=user_id,
                    )
                ]
            )
            return Outcome("l1", True, run_id, events_appended=1)
        finally:
            with self._lock:
                self._active.discard(key)

    def run_l2(self, store: DeriveContext, user_id: str) -> Outcome:
        self.calls.append(("l2", user_id, ""))
        run_id = uuid.uuid4().hex
        if self.fail_l2 > 0:
            self.fail_l2 -= 1
            return Outcome("l2", False, run_id, error="scripted l2 failure")
        store.append(
            [
                NewEvent(
                    derive_stream(user_id),
                    ScenesUpdated(
                        run_id=run_id,
                        generation=0,
                        deriver="rules",
                        model="fake",
                        prompt_version="t",
                        memory_cursor=0,
                        memory_ids=[],
                        operations=[],
                        persona_refresh=self.persona_requested,
                    ),
                    user_id=user_id,
                )
            ]
        )
        return Outcome("l2", True, run_id, persona_requested=self.persona_requested)

    def run_l3(self, store: DeriveContext, user_id: str) -> Outcome:
        self.calls.append(("l3", user_id, ""))
        run_id = uuid.uuid4().hex
        store.append(
            [
                NewEvent(
                    derive_stream(user_id),
                    PersonaUpdated(
                        run_id=run_id,
                        generation=0,
                        deriver="rules",
                        model="fake",
                        prompt_version="t",
                        persona="p",
                        trigger="test",
                    ),
                    user_id=user_id,
                )
            ]
        )
        self.persona_done.add(user_id)
        return Outcome("l3", True, run_id)

    def persona_due(self, store: DeriveContext, user_id: str) -> bool:
        return self.persona_is_due and user_id not in self.persona_done


def open_store(path: Path | str, clock: Any = None, **settings: Any) -> Store:
    s = Settings().replace(embedder="hashing", scheduler=False, **settings)
    kwargs: dict[str, Any] = {} if clock is None else {"clock": clock}
    # The pipeline reads cursors, failures and generations from the derivation
    # projections, so they are registered too (the L0 projection is not needed).
    projections = [StatsProjection(), *derive_projections(), PipelineStateProjection()]
    return Store.open(path, settings=s, projections=projections, **kwargs)


def capture(
    store: Store,
    svc: PipelineService,
    user_id: str,
    session_id: str,
    rounds: int = 1,
    *,
    assistant: bool = True,
    after_commit: bool = True,
) -> list[StoredEvent]:
    """One capture of ``rounds`` user messages (each with a reply), through the
    kernel append as ``Store.capture``, hooked to ``svc``."""
    msgs: list[dict[str, Any]] = []
    now = to_iso(store._clock())
    for _ in range(rounds):
        roles = ["user", "assistant"] if assistant else ["user"]
        for role in roles:
            msgs.append(
                {
                    "id": uuid.uuid4().hex,
                    "role": role,
                    "text": "hello",
                    "occurred_at": now,
                    "truncated": False,
                    "original_bytes": 5,
                }
            )
    # The kernel's one append path, with this test's service as the only hook
    # (in place of the store's own pipeline); its after_commit runs below.
    stored = store._kernel.append(
        [
            NewEvent(
                l0_stream(user_id, session_id),
                MessagesCaptured(session_id=session_id, messages=msgs),
                user_id=user_id,
            )
        ],
        hooks=Hooks(in_transaction=[svc.on_captured]),
    )
    if after_commit:
        svc.after_commit(stored)
        svc.flush()
    return stored


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def env(
    new_target: Targets, clock: FakeClock
) -> Iterator[tuple[Store, PipelineService, FakeDeriver]]:
    """A store with a pipeline service driven by the fake deriver and clock,
    on the test's engine (tests/backends.py)."""
    store = open_store(new_target("m.db"), clock)
    der = FakeDeriver()
    svc = PipelineService(store._derivation, deriver=der)
    try:
        yield store, svc, der
    finally:
        svc.stop()
        store.close()
