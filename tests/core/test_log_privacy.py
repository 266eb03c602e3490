"""No user text in logs above DEBUG: the whole pipeline (capture, L1, L2, L3,
end of session, recall, search) against a fake LLM that answers garbage
quoting the prompt, error bodies and HTTP errors echoing it, and timeouts;
every record at INFO and above, with its traceback, is searched for what the
user said, what was remembered and what was asked."""

from __future__ import annotations

import json
import logging
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from memstore import Settings
from memstore.derive import api
from memstore.derive.events import RunFailed
from memstore.store import Store
from tests.derive_support import ScriptedLLM
from tests.fakeopenai import FakeOpenAI

SAID = [
    "My name is Alice and my diagnosis is Zebrafever.",
    "I live in Berlin, next to the Quokkaplatz clinic.",
    "I am vegetarian since the Zebrafever started.",
]
ASKED = "what do you know about Wombatquery and Zebrafever?"
# What the user said, what was derived from it, what was asked.
USER_TEXT = ("Zebrafever", "Quokkaplatz", "Wombatquery", "name is Alice", "lives in Berlin",
             "vegetarian")  # fmt: skip


class Faulty:
    """The scripted model, with a queue of faults served first."""

    def __init__(self) -> None:
        self.script = ScriptedLLM()
        self.faults: list[Callable[[dict[str, Any]], str | dict[str, Any]]] = []

    def __call__(self, request: dict[str, Any]) -> str | dict[str, Any]:
        if self.faults:
            return self.faults.pop(0)(request)
        return self.script(request)


def _prompt(request: dict[str, Any]) -> str:
    return str(request["messages"][-1]["content"])


def echo_garbage(request: dict[str, Any]) -> str:
    # Not JSON, and it begins with the user's own words.
    return "Sure! Here is what I found: " + _prompt(request)[-600:]


def wrong_shape(request: dict[str, Any]) -> str:
    return json.dumps({"facts": [_prompt(request)[-300:]]})


def server_error(request: dict[str, Any]) -> str:
    # The fake answers HTTP 500 with this message in its error body.
    raise RuntimeError("cannot process: " + _prompt(request)[-400:])


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[tuple[Store, FakeOpenAI, Faulty]]:
    model = Faulty()
    with FakeOpenAI(chat=model) as fake:
        settings = Settings().replace(
            embedder="hashing", scheduler=False, background_indexer=False,
            llm_base_url=fake.base_url, llm_model="fake-model", llm_max_retries=0,
            llm_timeout_s=1.0,
        )  # fmt: skip
        store = Store.open(tmp_path / "p.db", settings=settings)
        try:
            yield store, fake, model
        finally:
            store.close()


def _user_text_in(records: list[logging.LogRecord]) -> list[str]:
    found = []
    for r in records:
        if r.levelno < logging.INFO:
            continue
        text = r.getMessage()
        if r.exc_info:
            text += "".join(traceback.format_exception(*r.exc_info))
        found += [f"{r.levelname} {r.name}: {text[:300]}" for t in USER_TEXT if t in text]
    return found


def test_no_user_text_in_logs_at_info_through_a_faulty_pipeline(
    setup: tuple[Store, FakeOpenAI, Faulty], caplog: pytest.LogCaptureFixture
) -> None:
    store, fake, model = setup
    caplog.set_level(logging.DEBUG)  # everything is emitted; INFO+ is what is checked
    store.capture("alice", "s1", [{"role": "user", "content": t} for t in SAID])

    # Garbage quoting the prompt, twice (the corrective retry too): the run fails.
    model.faults += [echo_garbage, echo_garbage]
    assert not api.run_l1(store._derivation, "alice", "s1").ok
    # A wrong shape quoting the prompt, then valid JSON that fails validation.
    model.faults += [wrong_shape, wrong_shape]
    assert not api.run_l1(store._derivation, "alice", "s1").ok
    # A server error whose body echoes the prompt, and an HTTP 400 echoing it.
    model.faults.append(server_error)
    assert not api.run_l1(store._derivation, "alice", "s1").ok
    fake.fail_next(400, message="invalid input: " + " ".join(SAID))
    assert not api.run_l1(store._derivation, "alice", "s1").ok
    # A timeout.
    fake.delay_next(3.0)
    assert not api.run_l1(store._derivation, "alice", "s1").ok

    # Now the model behaves: the whole pipeline runs, through scenes and persona,
    # with garbage once more at the scene step.
    assert api.run_l1(store._derivation, "alice", "s1").ok
    model.faults += [echo_garbage, echo_garbage]
    assert not api.run_l2(store._derivation, "alice").ok
    store.end_session("alice", "s1")
    store.run_pipeline("alice", wait=True)
    assert api.list_memories(store._derivation, "alice"), "nothing was derived"
    store.recall("alice", ASKED, session_id="s1")
    store.search_memories("alice", ASKED)
    store.search_conversations("alice", ASKED)

    # The faults happened and quoted the user where they are kept (the failure
    # records, DEBUG), which is what makes the INFO check below meaningful.
    failures = [e.payload for e in store.read_events(types=[RunFailed.TYPE])]
    assert len(failures) >= 6
    assert any("Zebrafever" in f.error for f in failures)  # type: ignore[attr-defined]
    debug = [r for r in caplog.records if r.levelno == logging.DEBUG]
    assert any("Zebrafever" in r.getMessage() for r in debug)
    assert any(r.levelno >= logging.INFO and r.name.startswith("memstore") for r in caplog.records)

    assert _user_text_in(caplog.records) == []
