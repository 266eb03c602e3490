"""The offline rule-based deriver: English and Chinese, dedup, scenes, persona, replay."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from memstore import Settings
from memstore.derive import api
from memstore.derive.events import L1Extracted
from memstore.derive.rules import clauses, decide, extract
from memstore.derive.state import L0Message
from memstore.store import Store
from tests.derive_support import open_store, say, snapshot


@pytest.fixture
def rstore(tmp_path: Path, settings: Settings) -> Iterator[Store]:
    store = open_store(tmp_path / "r.db", settings)
    try:
        yield store
    finally:
        store.close()


def _msg(text: str, role: str = "user") -> L0Message:
    return L0Message(1, "m1", role, text, "2023-05-08T13:56:00.000000Z", 1)


def _contents(store: Store, user: str = "u", **kw: object) -> list[str]:
    return [m["content"] for m in api.list_memories(store, user, **kw)]  # type: ignore[arg-type]


def test_english_statements() -> None:
    got = {
        m.content: m
        for m in extract(
            [
                _msg("Hi! My name is Alice and I love hiking in the Alps."),
                _msg("I'm a data engineer. Yesterday I went to the Louvre with my sister."),
                _msg("Please always answer in English. I'm allergic to peanuts."),
                _msg("Do you know what I like? If I were rich I would travel."),
                _msg("I love talking to you", role="assistant"),
            ],
            20,
        )
    }
    assert set(got) == {
        "The user's name is Alice.",
        "The user likes hiking in the Alps.",
        "The user is a data engineer.",
        "On 2023-05-07, the user went to the Louvre with the user's sister.",
        "Instruction from the user: Always answer in English.",
        "The user is allergic to peanuts.",
    }
    event = got["On 2023-05-07, the user went to the Louvre with the user's sister."]
    assert event.type == "episodic" and event.activity_start == "2023-05-07"
    assert got["Instruction from the user: Always answer in English."].priority == -1


def test_chinese_statements() -> None:
    got = [
        m.content
        for m in extract(
            [
                _msg(
                    "我叫小明，我喜欢喝咖啡。我不喜欢下雨天。昨天我去了北京。请记住我的生日是五月三日。以后总是用中文回答我。"
                )
            ],
            20,
        )
    ]
    assert got == [
        "用户的名字是小明。",
        "用户喜欢喝咖啡。",
        "用户不喜欢下雨天。",
        "2023-05-07，用户去了北京。",
        "用户的生日是五月三日。",  # a recognised fact needs no "remember" wrapper
        "用户要求助手：总是用中文回答用户。",
    ]


def test_questions_and_conditionals_are_not_statements() -> None:
    assert clauses("Do I like tea? If I move to Paris I'll learn French.") == []


def test_rules_dedup_skip_supersede_store() -> None:
    cand = extract([_msg("I live in Munich.")], 5)[0]
    assert decide(cand, [("a", "The user lives in Munich.")]).action == "skip"
    sup = decide(cand, [("a", "The user lives in Berlin."), ("b", "The user likes tea.")])
    assert sup.action == "supersede" and sup.target_ids == ("a",)
    flip = decide(extract([_msg("I hate coffee.")], 5)[0], [("c", "The user likes coffee.")])
    assert flip.action == "supersede"
    assert decide(cand, [("b", "The user likes tea.")]).action == "store"


def test_pipeline_offline_in_english(rstore: Store) -> None:
    say(rstore, "u", "s1", "My name is Alice and I live in Berlin.", "I love coffee.")
    first = api.run_l1(rstore, "u", "s1")
    assert first.ok and first.new_memories == 3
    assert api.run_l1(rstore, "u", "s1").events_appended == 0  # cursor: nothing new
    say(
        rstore,
        "u",
        "s2",
        "My name is Alice.",
        "I moved to Munich last week.",
        at="2023-06-10T09:00:00Z",
    )
    say(rstore, "u", "s2", "I hate coffee now, and I love tea.", at="2023-06-10T09:01:00Z")
    assert api.run_l1(rstore, "u", "s2").ok
    assert sorted(_contents(rstore)) == [
        "Around 2023-06-03, the user moved to Munich.",
        "The user dislikes coffee.",
        "The user likes tea.",
        "The user lives in Munich.",
        "The user's name is Alice.",
    ]
    retired = set(_contents(rstore, include_retired=True)) - set(_contents(rstore))
    assert retired == {"The user lives in Berlin.", "The user likes coffee."}
    ev = rstore.read_events(types=[L1Extracted.TYPE])[0].payload
    assert ev.deriver == "rules"  # type: ignore[attr-defined]

    assert api.run_l2(rstore, "u").persona_requested
    names = [s["name"] for s in api.list_scenes(rstore, "u")]
    assert set(names) == {"Identity", "Home", "Preferences", "Events"}
    assert api.run_l3(rstore, "u").ok
    persona = api.get_persona(rstore, "u") or ""
    assert persona.startswith("# Profile") and "Munich" in persona and "Berlin" not in persona

    before = snapshot(rstore)
    rstore.rebuild()
    assert snapshot(rstore) == before


def test_pipeline_offline_in_chinese(rstore: Store) -> None:
    say(rstore, "u", "s1", "我叫小明。我住在上海。我喜欢喝咖啡。")
    say(rstore, "u", "s1", "我搬到了北京。")
    assert api.run_l1(rstore, "u", "s1").ok
    assert sorted(_contents(rstore)) == sorted(
        ["用户的名字是小明。", "用户住在北京。", "用户喜欢喝咖啡。"]
    )
    api.run_l2(rstore, "u")
    api.run_l3(rstore, "u")
    persona = api.get_persona(rstore, "u") or ""
    assert persona.startswith("# 用户画像") and "北京" in persona


def test_batches_keep_capture_events_whole_and_give_background(
    tmp_path: Path, settings: Settings
) -> None:
    with open_store(tmp_path / "b.db", settings.replace(l1_batch_messages=2)) as store:
        for i in range(5):
            say(store, "u", "s", f"I like topic{i}.", f"I love thing{i}.")
        out = api.run_l1(store, "u", "s")
        assert out.events_appended == 5 and out.new_memories == 10
        cursors = [e.payload.cursor_position for e in store.read_events(types=[L1Extracted.TYPE])]  # type: ignore[attr-defined]
        assert cursors == sorted(cursors) and len(set(cursors)) == 5


def test_scene_limit_merges_the_coldest(tmp_path: Path, settings: Settings) -> None:
    with open_store(tmp_path / "s.db", settings.replace(max_scenes=2)) as store:
        say(store, "u", "s", "My name is Bob.", "I love jazz.")
        api.run_l1(store, "u", "s")
        api.run_l2(store, "u")
        say(store, "u", "s", "I live in Oslo.")
        api.run_l1(store, "u", "s")
        api.run_l2(store, "u")
        scenes = api.list_scenes(store, "u")
        assert len(scenes) == 2
        merged = [s for s in scenes if " / " in s["name"]]
        assert merged and merged[0]["heat"] == 3  # 1 + 1 + 1


def test_write_forget_and_history(rstore: Store) -> None:
    mid = api.write_memory(rstore, "u", "add", "Prefers window seats.")
    assert mid and api.write_memory(rstore, "u", "add", "Prefers window seats.") == mid
    same = api.write_memory(
        rstore, "u", "replace", "Prefers aisle seats.", old_content="Prefers window seats."
    )
    assert same == mid and _contents(rstore) == ["Prefers aisle seats."]
    assert api.write_memory(rstore, "u", "remove", "Prefers aisle seats.") == mid
    assert _contents(rstore) == []
    assert [h["action"] for h in api.memory_history(rstore, "u", mid)] == [
        "store",
        "update",
        "forget",
    ]

    say(rstore, "u", "s", "I love sailing.")
    api.run_l1(rstore, "u", "s")
    [m] = api.list_memories(rstore, "u")
    api.forget_memory(rstore, "u", m["memory_id"])
    assert _contents(rstore) == []
    hist = api.memory_history(rstore, "u", m["memory_id"])
    assert hist[0]["source_message_ids"] and hist[-1]["action"] == "forget"
    with pytest.raises(Exception, match="no memory"):
        api.forget_memory(rstore, "someone-else", m["memory_id"])


def test_chinese_clause_without_repeated_subject() -> None:
    from memstore.derive.rules import clauses

    assert clauses("我喜欢喝乌龙茶，不喜欢咖啡。") == ["我喜欢喝乌龙茶", "我不喜欢咖啡"]
    assert clauses("他喜欢茶，不喜欢咖啡") == ["他喜欢茶", "不喜欢咖啡"]
