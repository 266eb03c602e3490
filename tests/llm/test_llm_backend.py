"""The backend seam: who derives for a store, and what the events record."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from memstore import Settings
from memstore.bench.fakeopenai import FakeOpenAI
from memstore.derive import api
from memstore.derive.events import L1Extracted
from memstore.derive.prompts import validate_extract
from memstore.derive.runs import describe_derivation, last_derivation, llm_description
from memstore.errors import InvalidInputError
from memstore.llm import ChatAnswer, ChatBackend, LLMClient
from tests.derive_support import ScriptedLLM, open_store, say


class ScriptedBackend:
    """A host's model in miniature: answers memstore's prompts from the script."""

    deriver = "host-model"
    model = "scripted-1"

    def __init__(self) -> None:
        self.script = ScriptedLLM()

    def describe(self) -> str:
        return "a scripted host model"

    def chat(self, kind: str, messages: Sequence[Mapping[str, str]]) -> ChatAnswer:
        text = self.script({"messages": [dict(m) for m in messages]})
        return ChatAnswer(text, "scripted-1-0613", {"total_tokens": 7}, "stop")

    def close(self) -> None:
        pass


def test_scripted_backend_is_a_chat_backend() -> None:
    assert isinstance(ScriptedBackend(), ChatBackend)


def test_host_backend_derives_when_memstore_has_no_llm(tmp_path: Path, settings: Settings) -> None:
    backend = ScriptedBackend()
    with open_store(tmp_path / "m.db", settings) as store:
        assert llm_description(store._derivation).startswith("rules")
        store.use_host_llm(backend)
        assert llm_description(store._derivation) == "host-model: a scripted host model"
        say(store, "alice", "s1", "Hi, my name is Alice.")
        assert api.run_l1(store._derivation, "alice", "s1").ok
        [event] = store.read_events(types=[L1Extracted.TYPE])
        assert event.payload.deriver == "host-model"  # type: ignore[attr-defined]
        assert event.payload.model == "scripted-1-0613"  # what the answer says it was
        assert [m["content"] for m in api.list_memories(store._derivation, "alice")] == [
            "The user's name is Alice."
        ]
        with store._db.read() as conn:
            last = last_derivation(conn)
        assert last is not None and (last["deriver"], last["stage"]) == ("host-model", "l1")
        assert describe_derivation(last).startswith("host-model, model scripted-1-0613 (l1, ")
        assert backend.script.calls == ["extract"]


def test_memstore_endpoint_wins_over_a_host_backend(tmp_path: Path, settings: Settings) -> None:
    backend = ScriptedBackend()
    script = ScriptedLLM()
    with FakeOpenAI(chat=script) as fake:
        s = settings.replace(llm_base_url=fake.base_url, llm_model="own-model", llm_max_retries=0)
        with open_store(tmp_path / "m.db", s) as store:
            store.use_host_llm(backend)
            say(store, "alice", "s1", "Hi, my name is Alice.")
            assert api.run_l1(store._derivation, "alice", "s1").ok
            [event] = store.read_events(types=[L1Extracted.TYPE])
            assert (event.payload.deriver, event.payload.model) == ("llm", "own-model")  # type: ignore[attr-defined]
    assert backend.script.calls == [] and script.calls == ["extract"]


def test_registration_is_per_store_and_dies_with_it(tmp_path: Path, settings: Settings) -> None:
    with open_store(tmp_path / "a.db", settings) as a, open_store(tmp_path / "b.db", settings) as b:
        a.use_host_llm(ScriptedBackend())
        assert a.host_llm is not None and b.host_llm is None
        say(b, "bob", "s1", "Hi, my name is Alice.")
        assert api.run_l1(b._derivation, "bob", "s1").ok
        [event] = b.read_events(types=[L1Extracted.TYPE])
        assert event.payload.deriver == "rules"  # type: ignore[attr-defined]
        a.use_host_llm(None)
        assert a.host_llm is None
    # The registration does not keep a closed store alive (no leak per store).
    store = open_store(tmp_path / "c.db", settings)
    store.use_host_llm(ScriptedBackend())
    store.close()
    ref = weakref.ref(store)
    del store
    gc.collect()
    assert ref() is None


def test_llm_client_over_a_backend_keeps_the_corrective_retry() -> None:
    class Sloppy(ScriptedBackend):
        def __init__(self) -> None:
            super().__init__()
            self.answers = ['{"memories": [{"fact": "x"}]}', '{"memories": []}']

        def chat(self, kind: str, messages: Sequence[Mapping[str, str]]) -> ChatAnswer:
            self.seen = [dict(m) for m in messages]
            return ChatAnswer(self.answers.pop(0), "m", None, "stop")

    sloppy = Sloppy()
    result = LLMClient(sloppy).complete_json(
        kind="t", system="s", user="u", validate=lambda obj: validate_extract(obj, set(), 20)
    )
    assert result.attempts == 2 and result.value == []
    assert "could not be used" in sloppy.seen[-1]["content"]


@pytest.mark.parametrize("limit", [0, -5])
def test_answer_cap_must_be_positive(limit: int) -> None:
    from memstore.errors import ConfigError

    with pytest.raises(ConfigError, match="llm_max_answer_bytes"):
        LLMClient(
            Settings()
            .replace(llm_base_url="http://127.0.0.1:1/v1", llm_model="m")
            .replace(llm_max_answer_bytes=limit)
        )


def test_doctor_names_the_configured_and_the_last_deriver(
    tmp_path: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memstore.cli.core import doctor_report

    for key in ("MEMSTORE_LLM_BASE_URL", "MEMSTORE_LLM_MODEL"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("MEMSTORE_CONFIG", str(tmp_path / "none.toml"))
    monkeypatch.setenv("MEMSTORE_EMBEDDER", "hashing")
    db = tmp_path / "m.db"
    with open_store(db, settings) as store:
        report, _ = doctor_report(db)
        assert report["llm"].startswith("rules:") and report["last_derivation"] == "none yet"
        store.use_host_llm(ScriptedBackend())
        say(store, "alice", "s1", "Hi, my name is Alice.")
        assert api.run_l1(store._derivation, "alice", "s1").ok
    report, problems = doctor_report(db)
    assert problems == []
    assert report["last_derivation"].startswith("host-model, model scripted-1-0613 (l1, ")
    monkeypatch.setenv("MEMSTORE_LLM_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("MEMSTORE_LLM_MODEL", "own-model")
    report, _ = doctor_report(db)
    assert report["llm"] == "llm: http://127.0.0.1:9/v1 (model own-model)"


def test_a_host_llm_that_is_not_a_chat_backend_is_refused(
    tmp_path: Path, settings: Settings
) -> None:
    with open_store(tmp_path / "m.db", settings) as store:
        with pytest.raises(InvalidInputError, match="ChatBackend"):
            store.use_host_llm(object())  # type: ignore[arg-type]
        assert store.host_llm is None
