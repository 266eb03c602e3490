"""A model that cannot produce JSON: a bounded number of failed runs, then the
rule deriver, reported by doctor and by Hermes' status; ``deriver = "rules"``
forces the rules from the start."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from memstore import Settings
from memstore.derive import api
from memstore.derive.events import L1Extracted, RunFailed
from memstore.derive.fallback import describe_failures, output_failures
from memstore.store import Store
from tests.derive_support import ScriptedLLM, open_store, say
from tests.fakeopenai import FakeOpenAI
from tests.porting_support import run_cli

PROSE = "Sure! The user is called Alice and seems friendly."


@pytest.fixture
def llm() -> Iterator[tuple[FakeOpenAI, ScriptedLLM]]:
    script = ScriptedLLM()
    with FakeOpenAI(chat=script) as fake:
        yield fake, script


def _settings(settings: Settings, fake: FakeOpenAI, **kw: object) -> Settings:
    return settings.replace(
        llm_base_url=fake.base_url, llm_model="fake-model", llm_max_retries=1, **kw
    )


def _fail_three_runs(db: Path, settings: Settings) -> None:
    with open_store(db, settings) as store:
        say(store, "alice", "s1", "Hi, my name is Alice.")
        for _ in range(3):
            api.run_l1(store._derivation, "alice", "s1")


def _derivers(store: Store) -> list[str]:
    return [e.payload.deriver for e in store.read_events(types=[L1Extracted.TYPE])]


def test_three_unusable_answers_then_the_rules(
    tmp_path: Path, settings: Settings, llm: tuple[FakeOpenAI, ScriptedLLM]
) -> None:
    fake, script = llm
    script.override["extract"] = PROSE
    db = tmp_path / "m.db"
    with open_store(db, _settings(settings, fake)) as store:
        say(store, "alice", "s1", "Hi, my name is Alice.")
        for _ in range(3):
            out = api.run_l1(store._derivation, "alice", "s1")
            assert not out.ok and "LLMOutputError" in (out.error or "")
        assert len(script.calls) == 6  # each run: the answer and its corrective retry
        out = api.run_l1(store._derivation, "alice", "s1")
        assert out.ok
        assert len(script.calls) == 6  # the model was not asked again
        assert _derivers(store) == ["rules"]
        assert [m["content"] for m in api.list_memories(store._derivation, "alice")]
        with store._db.read() as conn:
            streak, newest = output_failures(conn)
        assert streak == 3 and "no usable JSON" in newest
        line = describe_failures(streak, newest, 3)
        assert line is not None and "deriving with the offline rules" in line

    # A restart does not spend another round of failures on the same model.
    with open_store(db, _settings(settings, fake)) as store:
        assert store._derivation.llm_client() is None
        say(store, "alice", "s2", "I have a dog.")
        assert api.run_l1(store._derivation, "alice", "s2").ok
        assert len(script.calls) == 6

    # Another model starts from zero.
    with open_store(db, _settings(settings, fake).replace(llm_model="other")) as store:
        assert store._derivation.llm_client() is not None


def test_a_usable_answer_resets_the_count(
    tmp_path: Path, settings: Settings, llm: tuple[FakeOpenAI, ScriptedLLM]
) -> None:
    fake, script = llm
    with open_store(tmp_path / "m.db", _settings(settings, fake)) as store:
        for round_ in range(2):
            script.override["extract"] = PROSE
            for i in range(2):
                say(store, "alice", f"s{round_}{i}", "Hi, my name is Alice.")
                assert not api.run_l1(store._derivation, "alice", f"s{round_}{i}").ok
            del script.override["extract"]
            assert api.run_l1(store._derivation, "alice", f"s{round_}0").ok
        assert store._derivation.llm_client() is not None
        assert set(_derivers(store)) == {"llm"}


def test_fallback_after_zero_never_falls_back(
    tmp_path: Path, settings: Settings, llm: tuple[FakeOpenAI, ScriptedLLM]
) -> None:
    fake, script = llm
    script.override["extract"] = PROSE
    with open_store(tmp_path / "m.db", _settings(settings, fake, llm_fallback_after=0)) as store:
        say(store, "alice", "s1", "Hi, my name is Alice.")
        for _ in range(4):
            assert not api.run_l1(store._derivation, "alice", "s1").ok
        assert len(store.read_events(types=[RunFailed.TYPE])) == 4


def test_deriver_rules_never_asks_the_model(
    tmp_path: Path, settings: Settings, llm: tuple[FakeOpenAI, ScriptedLLM]
) -> None:
    fake, script = llm
    with open_store(tmp_path / "m.db", _settings(settings, fake, deriver="rules")) as store:
        say(store, "alice", "s1", "Hi, my name is Alice.")
        assert api.run_l1(store._derivation, "alice", "s1").ok
        assert script.calls == [] and _derivers(store) == ["rules"]


def test_doctor_reports_the_unusable_model(
    tmp_path: Path, settings: Settings, llm: tuple[FakeOpenAI, ScriptedLLM],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    fake, script = llm
    script.override["extract"] = PROSE
    db = tmp_path / "m.db"
    _fail_three_runs(db, _settings(settings, fake))
    monkeypatch.setenv("MEMSTORE_EMBEDDER", "hashing")
    monkeypatch.setenv("MEMSTORE_CONFIG", str(tmp_path / "none.toml"))
    out = run_cli("doctor", "--db", str(db))
    assert "3 LLM run(s) in a row without usable JSON" in out.output
    monkeypatch.setenv("MEMSTORE_DERIVER", "rules")
    out = run_cli("doctor", "--db", str(db))
    assert 'forced by deriver = "rules"' in out.output


def test_hermes_status_reports_it(
    tmp_path: Path, settings: Settings, llm: tuple[FakeOpenAI, ScriptedLLM]
) -> None:
    from provider import hermes_llm

    fake, script = llm
    script.override["extract"] = PROSE
    db = tmp_path / "m.db"
    _fail_three_runs(db, _settings(settings, fake))
    shown = hermes_llm.status(_settings(settings, fake), tmp_path, db)
    assert "deriving with the offline rules" in shown["llm output"]
    forced = hermes_llm.status(settings.replace(deriver="rules"), tmp_path, db)
    assert forced["derivation"].startswith("rules:")
