"""Retention removes exactly what is older than its limit, and nothing else:
the messages said before the cutoff (by their own time, to the second), the
memories extracted from them or stated before it, and the scene and persona
text built from those. The pipeline's durable timer enforces it; a dry run
changes nothing."""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import timedelta

import pytest
from click.testing import CliRunner
from sqlalchemy import text

from memstore import Settings
from memstore.cli import cli
from memstore.derive.messages.events import ContentErased
from memstore.forgetting.retention import CHECK_EVERY_S, Policy, cutoff, run_retention
from memstore.pipeline.scheduler import RETENTION_JOB_ID
from memstore.store import Store
from memstore.timeutil import to_iso
from tests.backends import Targets
from tests.pipeline_support import T0, FakeClock

pytestmark = pytest.mark.both_backends

DAYS = 30
GONE = ["Porto", "Yolanda", "vegetarian"]
KEPT = ["peanuts", "green tea", "chess"]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0 - timedelta(days=40))


@pytest.fixture
def rstore(new_target: Targets, settings: Settings, clock: FakeClock) -> Iterator[Store]:
    store = Store.open(
        new_target("r.db"), settings=settings.replace(retention_days=DAYS), clock=clock
    )
    cut = T0 - timedelta(days=DAYS)
    said = [
        ("s1", "I live in Porto.", cut - timedelta(days=1)),
        ("s2", "My sister is called Yolanda.", cut - timedelta(seconds=1)),
        ("s3", "I am allergic to peanuts.", cut),  # not older than the limit
        ("s4", "I like green tea.", cut + timedelta(seconds=1)),
    ]
    try:
        store.write_memory("alice", "add", "Alice is vegetarian.")  # stated 40 days ago
        clock.advance(timedelta(days=40).total_seconds())
        store.write_memory("alice", "add", "Alice plays chess.")  # stated now
        for session, content, when in said:
            store.capture("alice", session, [{"role": "user", "content": content,
                                               "timestamp": to_iso(when)}])  # fmt: skip
            store.end_session("alice", session)
        store.capture_turn("bob", "b1", "I live in Porto too.", "ok")  # said now: stays
        old = to_iso(cut - timedelta(days=2))
        store.capture("carol", "c1", [{"role": "user", "content": "I live in Lima.",
                                       "timestamp": old}])  # fmt: skip
        store.run_pipeline()
        yield store
    finally:
        store.close()


def _alice(store: Store) -> str:
    with store._db.read() as conn:
        msgs = [
            r[0] for r in conn.execute(text("SELECT text FROM l0_messages WHERE user_id = 'alice'"))
        ]
    mems = [m["content"] for m in store.list_memories("alice", include_retired=True)]
    scenes = [f"{s['summary']} {s['body']}" for s in store.list_scenes("alice")]
    recall = store.recall("alice", "where do I live, who is my sister, what do I eat?")
    return "\n".join([*msgs, *mems, *scenes, store.get_persona("alice") or "", recall.text])


def test_retention_removes_exactly_what_is_older_than_the_limit(
    rstore: Store, clock: FakeClock
) -> None:
    before = _alice(rstore)
    assert all(w in before for w in GONE + KEPT)
    head = rstore.event_count()

    dry, carol = rstore.apply_retention(dry_run=True)
    assert (dry.user_id, carol.user_id) == ("alice", "carol")
    assert dry.dry_run and dry.messages_removed == 2 and dry.memories_removed == 3
    assert rstore.event_count() == head and _alice(rstore) == before

    # The pipeline's durable timer enforces the setting.
    assert rstore._pipeline.reconcile()["timers_armed"] >= 1
    assert rstore._pipeline.timers.get(RETENTION_JOB_ID) == clock()
    assert RETENTION_JOB_ID in rstore._pipeline.timers.run_due(clock())
    after = _alice(rstore)
    assert [w for w in GONE if w in after] == []
    assert [w for w in KEPT if w not in after] == []
    assert "Porto" in "\n".join(
        h.text for h in rstore.search_conversations("bob", "Porto", strategy="keyword")
    )
    # Both users in one erasure: a tombstone each.
    tombs = [e.payload for e in rstore.read_events(types=[ContentErased.TYPE])]
    assert [(t.erased_user_id, t.reason, t.messages_removed) for t in tombs] == [  # type: ignore[attr-defined]
        ("alice", "retention", 2), ("carol", "retention", 1)
    ]  # fmt: skip
    assert rstore.search_conversations("carol", "Lima", strategy="keyword") == []
    # Armed again for the next check; nothing more to erase until time passes.
    assert rstore._pipeline.timers.get(RETENTION_JOB_ID) == clock() + timedelta(
        seconds=CHECK_EVERY_S
    )
    assert rstore.apply_retention() == []
    # A day later the message said at the cutoff is past the limit too.
    clock.advance(timedelta(days=1).total_seconds())
    [rep] = rstore.apply_retention()
    assert rep.messages_removed == 2 and rep.compacted  # peanuts and green tea
    assert "chess" in _alice(rstore)


def test_retention_is_off_by_default_and_the_cli_dry_run_changes_nothing(
    new_target: Targets, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = new_target("c.db")
    with Store.open(path, settings=settings) as store:
        store.capture("alice", "s1", [{"role": "user", "content": "I live in Porto.",
                                       "timestamp": "2001-01-01T00:00:00Z"}])  # fmt: skip
        assert store.apply_retention() == []
        assert store._pipeline.reconcile() is not None
        assert store._pipeline.timers.get(RETENTION_JOB_ID) is None
        head = store.event_count()
    runner = CliRunner()
    monkeypatch.setenv("MEMSTORE_EMBEDDER", "hashing")
    out = runner.invoke(cli, ["retention", "run", "--db", str(path)])
    assert out.exit_code == 0 and "retention is off" in out.output
    out = runner.invoke(cli, ["retention", "run", "--db", str(path), "--days", "365", "--dry-run"])
    assert out.exit_code == 0, out.output
    assert "alice: would erase 1 message(s)" in out.output
    with Store.open(path, settings=settings) as store:
        assert store.event_count() == head
    out = runner.invoke(cli, ["retention", "run", "--db", str(path), "--days", "365"])
    assert out.exit_code == 0 and "alice: erased 1 message(s)" in out.output
    with Store.open(path, settings=settings) as store:
        assert store.search_conversations("alice", "Porto", strategy="keyword") == []


def _messages(store: Store, user: str = "alice") -> list[str]:
    with store._db.read() as conn:
        q = text("SELECT text FROM l0_messages WHERE user_id = :u ORDER BY id")
        return [str(r[0]) for r in conn.execute(q, {"u": user})]


def test_messages_alone_past_their_limit_keep_their_memories(rstore: Store) -> None:
    mems = sorted(m["content"] for m in rstore.list_memories("alice"))
    [rep] = [r for r in run_retention(rstore._kernel, Policy(messages_days=DAYS), llm=False)
             if r.user_id == "alice"]  # fmt: skip
    assert rep.messages_removed == 2 and rep.memories_removed == 0
    assert _messages(rstore) == ["I am allergic to peanuts.", "I like green tea."]
    assert sorted(m["content"] for m in rstore.list_memories("alice")) == mems
    assert "Porto" in (rstore.get_persona("alice") or "")  # the memory's text stays
    assert rstore.search_conversations("alice", "Porto", strategy="keyword") == []


def test_memories_of_one_type_past_their_limit_go_with_their_derived_text(
    rstore: Store,
) -> None:
    assert Policy.of(Settings().replace(retention_persona_days=DAYS)).memory_days["persona"] == DAYS
    msgs = _messages(rstore)
    old = [m for m in rstore.list_memories("alice") if any(w in m["content"] for w in GONE)]
    assert {m["type"] for m in old} == {"persona"}
    reps = run_retention(rstore._kernel, Policy(memory_days={"persona": DAYS}), llm=False)
    assert [(r.user_id, r.memories_removed, r.messages_removed) for r in reps] == [
        ("alice", 3, 0), ("carol", 1, 0)
    ]  # fmt: skip
    assert _messages(rstore) == msgs  # messages stay
    left = "\n".join(
        [*(m["content"] for m in rstore.list_memories("alice", include_retired=True)),
         rstore.get_persona("alice") or "", *(s["body"] for s in rstore.list_scenes("alice"))]
    )  # fmt: skip
    assert [w for w in GONE if w in left] == []
    assert [w for w in KEPT if w not in left] == []
    # Another type's limit leaves persona memories alone.
    assert run_retention(rstore._kernel, Policy(memory_days={"episodic": 1}), llm=False) == []


@pytest.mark.parametrize("days", [1e9, 9e8, math.inf])
def test_a_limit_longer_than_the_calendar_erases_nothing(
    new_target: Targets, settings: Settings, monkeypatch: pytest.MonkeyPatch, days: float
) -> None:
    # 1e9 days is past timedelta's bound, 9e8 days before now is before year 1:
    # no time is that long ago, so nothing is old enough to go.
    assert cutoff(days, T0) is None and cutoff(DAYS, T0) == to_iso(T0 - timedelta(days=DAYS))
    path = new_target("h.db")
    with Store.open(path, settings=settings.replace(retention_days=days)) as store:
        store.capture("alice", "s1", [{"role": "user", "content": "I live in Porto.",
                                       "timestamp": "1000-01-02T00:00:00Z"}])  # fmt: skip
        assert store.apply_retention() == [] and store.apply_retention(days=days) == []
        assert store._pipeline.reconcile()["timers_armed"] >= 1
        due = store._pipeline.timers.get(RETENTION_JOB_ID)
        assert due is not None and RETENTION_JOB_ID in store._pipeline.timers.run_due(due)
        assert store.read_events(types=[ContentErased.TYPE]) == []
    monkeypatch.setenv("MEMSTORE_EMBEDDER", "hashing")
    runner = CliRunner()
    out = runner.invoke(cli, ["retention", "run", "--db", path, "--days", str(days)])
    assert out.exit_code == 0 and "nothing is past the retention limits" in out.output, out.output
    monkeypatch.setenv("MEMSTORE_RETENTION_DAYS", str(days))
    out = runner.invoke(cli, ["retention", "run", "--db", path])
    assert out.exit_code == 0 and "nothing is past the retention limits" in out.output, out.output
    with Store.open(path, settings=settings) as store:
        assert store.search_conversations("alice", "Porto", strategy="keyword")
