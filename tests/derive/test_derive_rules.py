"""The offline rule-based deriver: English and Chinese, dedup, scenes, persona, replay."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from memstore import Settings
from memstore.derive import api
from memstore.derive.events import L1Extracted
from memstore.derive.memories.rules import clauses, decide, extract
from memstore.derive.queries import L0Message
from memstore.store import Store
from tests.backends import Targets
from tests.derive_support import open_store, say, snapshot

pytestmark = pytest.mark.both_backends


@pytest.fixture
def rstore(new_target: Targets, settings: Settings) -> Iterator[Store]:
    store = open_store(new_target("r.db"), settings)
    try:
        yield store
    finally:
        store.close()


def _msg(text: str, role: str = "user") -> L0Message:
    return L0Message(1, "m1", role, text, "2023-05-08T13:56:00.000000Z", 1)


def _contents(store: Store, user: str = "u", **kw: object) -> list[str]:
    return [m["content"] for m in api.list_memories(store._derivation, user, **kw)]  # type: ignore[arg-type]


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
    first = api.run_l1(rstore._derivation, "u", "s1")
    assert first.ok and first.new_memories == 3
    assert api.run_l1(rstore._derivation, "u", "s1").events_appended == 0  # cursor: nothing new
    say(
        rstore,
        "u",
        "s2",
        "My name is Alice.",
        "I moved to Munich last week.",
        at="2023-06-10T09:00:00Z",
    )
    say(rstore, "u", "s2", "I hate coffee now, and I love tea.", at="2023-06-10T09:01:00Z")
    assert api.run_l1(rstore._derivation, "u", "s2").ok
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

    assert api.run_l2(rstore._derivation, "u").persona_requested
    names = [s["name"] for s in api.list_scenes(rstore._derivation, "u")]
    assert set(names) == {"Identity", "Home", "Preferences", "Events"}
    assert api.run_l3(rstore._derivation, "u").ok
    persona = api.get_persona(rstore._derivation, "u") or ""
    assert persona.startswith("# Profile") and "Munich" in persona and "Berlin" not in persona

    before = snapshot(rstore)
    rstore.rebuild()
    assert snapshot(rstore) == before


def test_pipeline_offline_in_chinese(rstore: Store) -> None:
    say(rstore, "u", "s1", "我叫小明。我住在上海。我喜欢喝咖啡。")
    say(rstore, "u", "s1", "我搬到了北京。")
    assert api.run_l1(rstore._derivation, "u", "s1").ok
    assert sorted(_contents(rstore)) == sorted(
        ["用户的名字是小明。", "用户住在北京。", "用户喜欢喝咖啡。"]
    )
    api.run_l2(rstore._derivation, "u")
    api.run_l3(rstore._derivation, "u")
    persona = api.get_persona(rstore._derivation, "u") or ""
    assert persona.startswith("# 用户画像") and "北京" in persona


def test_batches_keep_capture_events_whole_and_give_background(
    new_target: Targets, settings: Settings
) -> None:
    with open_store(new_target("b.db"), settings.replace(l1_batch_messages=2)) as store:
        for i in range(5):
            say(store, "u", "s", f"I like topic{i}.", f"I love thing{i}.")
        out = api.run_l1(store._derivation, "u", "s")
        assert out.events_appended == 5 and out.new_memories == 10
        cursors = [e.payload.cursor_position for e in store.read_events(types=[L1Extracted.TYPE])]  # type: ignore[attr-defined]
        assert cursors == sorted(cursors) and len(set(cursors)) == 5


def test_scene_limit_merges_the_coldest(new_target: Targets, settings: Settings) -> None:
    with open_store(new_target("s.db"), settings.replace(max_scenes=2)) as store:
        say(store, "u", "s", "My name is Bob.", "I love jazz.")
        api.run_l1(store._derivation, "u", "s")
        api.run_l2(store._derivation, "u")
        say(store, "u", "s", "I live in Oslo.")
        api.run_l1(store._derivation, "u", "s")
        api.run_l2(store._derivation, "u")
        scenes = api.list_scenes(store._derivation, "u")
        assert len(scenes) == 2
        merged = [s for s in scenes if " / " in s["name"]]
        assert merged and merged[0]["heat"] == 3  # 1 + 1 + 1


def test_write_forget_and_history(rstore: Store) -> None:
    mid = api.write_memory(rstore._derivation, "u", "add", "Prefers window seats.")
    assert mid and api.write_memory(rstore._derivation, "u", "add", "Prefers window seats.") == mid
    same = api.write_memory(
        rstore._derivation,
        "u",
        "replace",
        "Prefers aisle seats.",
        old_content="Prefers window seats.",
    )
    assert same == mid and _contents(rstore) == ["Prefers aisle seats."]
    assert api.write_memory(rstore._derivation, "u", "remove", "Prefers aisle seats.") == mid
    assert _contents(rstore) == []
    assert [h["action"] for h in api.memory_history(rstore._derivation, "u", mid)] == [
        "store",
        "update",
        "forget",
    ]

    say(rstore, "u", "s", "I love sailing.")
    api.run_l1(rstore._derivation, "u", "s")
    [m] = api.list_memories(rstore._derivation, "u")
    api.forget_memory(rstore._derivation, "u", m["memory_id"])
    assert _contents(rstore) == []
    hist = api.memory_history(rstore._derivation, "u", m["memory_id"])
    assert hist[0]["source_message_ids"] and hist[-1]["action"] == "forget"
    with pytest.raises(Exception, match="no memory"):
        api.forget_memory(rstore._derivation, "someone-else", m["memory_id"])


def test_chinese_clause_without_repeated_subject() -> None:
    from memstore.derive.memories.rules import clauses

    assert clauses("我喜欢喝乌龙茶，不喜欢咖啡。") == ["我喜欢喝乌龙茶", "我不喜欢咖啡"]
    assert clauses("他喜欢茶，不喜欢咖啡") == ["他喜欢茶", "不喜欢咖啡"]


# --- the labelled corpus: plain facts, standing instructions, and what must stay out ---

CORPUS = Path(__file__).parents[1] / "data" / "rule_corpus.jsonl"
HELDOUT = Path(__file__).parents[1] / "data" / "rule_corpus_heldout.jsonl"


@pytest.mark.parametrize("path", [CORPUS, HELDOUT], ids=["dev", "heldout"])
def test_rule_deriver_meets_its_targets_on_the_corpus(path: Path) -> None:
    from memstore.bench.rules_corpus import load_corpus, score

    groups = score(load_corpus(path))["groups"]
    for name in ("all", "lang:en", "lang:zh"):
        g = groups[name]
        assert g["precision"] >= 0.90, (name, g)
        assert g["recall"] >= 0.80, (name, g)
    # Every kind of negative is represented, so precision is measured on them.
    negatives = {k for k, g in groups.items() if k.startswith("topic:") and g["positives"] == 0}
    assert {"topic:question", "topic:smalltalk", "topic:assistant", "topic:quoted"} <= negatives


def test_plain_facts_from_the_issue() -> None:
    got = {
        m.content: m
        for m in extract(
            [
                _msg("I'm vegetarian. I don't eat pork."),
                _msg("i'm lactose intolerant"),
                _msg("请用中文回答"),
                _msg("Always answer me in Chinese, please."),
            ],
            20,
        )
    }
    assert set(got) == {
        "The user is vegetarian.",
        "The user doesn't eat pork.",
        "The user is lactose intolerant.",
        "用户要求助手：用中文回答。",
        "Instruction from the user: Always answer the user in Chinese.",
    }
    assert got["用户要求助手：用中文回答。"].type == "instruction"
    assert got["用户要求助手：用中文回答。"].priority == -1
    assert got["The user is vegetarian."].type == "persona"


def test_standing_instructions_are_global_and_one_off_orders_are_not_kept() -> None:
    def one(text: str) -> list[tuple[str, int]]:
        return [(m.type, m.priority) for m in extract([_msg(text)], 5)]

    assert one("Never use emojis when you talk to me.") == [("instruction", -1)]
    assert one("Can you always answer in Spanish?") == [("instruction", -1)]
    assert one("When you show code, use Python.") == [("instruction", 70)]
    for text in ("Make it shorter.", "Answer the question.", "Please translate this into Chinese."):
        assert one(text) == [], text


def test_what_is_not_the_users_fact_is_left_alone() -> None:
    for text in (
        'Translate "I am allergic to peanuts" into Spanish.',
        "If I were vegetarian, what would I eat?",
        "I think it will rain tomorrow.",
        "I'm not sure.",
        "can you help me write a cover letter",
        "John is vegetarian.",
        "I love it, thanks!",
        "I'm allergic to Mondays lol",
        "我觉得明天会下雨。",
        "帮我翻译这句话：我喜欢猫。",
    ):
        assert extract([_msg(text)], 5) == [], text
    assert extract([_msg("I'm vegetarian.", role="assistant")], 5) == []


def test_third_person_keeps_the_verb_in_agreement() -> None:
    from memstore.derive.memories.rules_text import third_person

    assert third_person("I keep tropical fish") == "the user keeps tropical fish"
    assert third_person("I usually go to bed at 11") == "the user usually goes to bed at 11"
    assert third_person("I don't eat pork") == "the user doesn't eat pork"
    assert third_person("I want you to call me Sam") == "the user wants you to call the user Sam"
    assert (
        third_person("My wife and I have two cats") == "the user's wife and the user have two cats"
    )


def test_dated_events_in_both_directions() -> None:
    got = {m.content: m for m in extract([_msg("I have a job interview tomorrow.")], 5)}
    [event] = got.values()
    assert event.type == "episodic" and event.activity_start == "2023-05-09"
    [zh] = extract([_msg("上周我开始学游泳。")], 5)
    assert zh.content == "2023-05-01，用户开始学游泳。" and zh.activity_start == "2023-05-01"


def test_corpus_loader_rejects_bad_lines(tmp_path: Path) -> None:
    from memstore.bench.rules_corpus import load_corpus
    from memstore.errors import InvalidInputError

    cases = {
        "not json": "{oops",
        "bad type": '{"text": "x", "lang": "en", "expect": "fact"}',
        "bad lang": '{"text": "x", "lang": "fr", "expect": "none"}',
        "none and type": '{"text": "x", "lang": "en", "expect": ["none", "persona"]}',
        "assistant memory": '{"text": "x", "lang": "en", "expect": "persona", "role": "assistant"}',
        "empty text": '{"text": " ", "lang": "en", "expect": "none"}',
    }
    for name, line in cases.items():
        path = tmp_path / f"{name}.jsonl"
        path.write_text(line + "\n", encoding="utf-8")
        with pytest.raises(InvalidInputError):
            load_corpus(path)
    (tmp_path / "empty.jsonl").write_text("\n", encoding="utf-8")
    with pytest.raises(InvalidInputError, match="empty"):
        load_corpus(tmp_path / "empty.jsonl")
    with pytest.raises(InvalidInputError, match="cannot read"):
        load_corpus(tmp_path / "missing.jsonl")


def test_scoring_counts_wrong_type_and_missing_key_as_errors() -> None:
    from memstore.bench.rules_corpus import CorpusItem, score
    from memstore.derive.prompts import ExtractedMemory

    def mem(type_: str, content: str) -> ExtractedMemory:
        return ExtractedMemory(content, type_, 50, "s", ("m",))  # type: ignore[arg-type]

    items = [
        CorpusItem("a", "en", frozenset({"persona"}), "t", key="tea"),  # right: TP
        CorpusItem("b", "en", frozenset({"persona"}), "t", key="tea"),  # wrong type: FN+FP
        CorpusItem("c", "en", frozenset({"persona"}), "t", key="tea"),  # lost the key: FN+FP
        CorpusItem("d", "en", frozenset({"instruction"}), "t", priority=-1),  # not global
        CorpusItem("e", "en", frozenset(), "n"),  # yielded something: FP
        CorpusItem("f", "en", frozenset(), "n"),  # nothing: fine
    ]
    out = {
        "a": [mem("persona", "Likes tea.")],
        "b": [mem("episodic", "Had tea.")],
        "c": [mem("persona", "Likes coffee.")],
        "d": [mem("instruction", "Be brief.")],
        "e": [mem("persona", "Noise.")],
        "f": [],
    }
    g = score(items, lambda item: out[item.text])["groups"]["all"]
    assert (g["tp"], g["fp"], g["fn"], g["positives"]) == (1, 4, 3, 4)
    assert g["precision"] == pytest.approx(1 / 5) and g["recall"] == pytest.approx(1 / 4)


def test_bench_rules_command(tmp_path: Path) -> None:
    from click.testing import CliRunner

    import memstore.cli.bench  # noqa: F401  registers the group on cli
    from memstore.cli.app import cli

    corpus = tmp_path / "c.jsonl"
    corpus.write_text(
        '{"text": "I am vegan.", "lang": "en", "expect": "persona", "topic": "diet",'
        ' "key": "vegan"}\n'
        '{"text": "Thanks!", "lang": "en", "expect": "none", "topic": "smalltalk"}\n'
        '{"text": "I like cats?", "lang": "en", "expect": "persona", "topic": "likes"}\n',
        encoding="utf-8",
    )
    out = tmp_path / "rules.json"
    res = CliRunner().invoke(cli, ["bench", "rules", str(corpus), "--mistakes", "--json", str(out)])
    assert res.exit_code == 0, res.output
    assert "FN     I like cats?" in res.output and "extract per message" in res.output
    data = json.loads(out.read_text(encoding="utf-8"))
    g = data["corpora"]["c.jsonl"]["groups"]["all"]
    assert (g["tp"], g["fp"], g["fn"]) == (1, 0, 1) and data["meta"]["command"]


def test_a_speaker_label_is_not_part_of_the_statement() -> None:
    # Transcripts (and the LoCoMo capture) write "Name: text"; an order with a colon is not a name.
    [got] = extract([_msg("Ana: I adopted a puppy called Miso last week.")], 5)
    assert got.content == "Around 2023-05-01, the user adopted a puppy called Miso."
    assert [m.content for m in extract([_msg("小明：我喜欢猫。")], 5)] == ["用户喜欢猫。"]
    assert extract([_msg("Translate: I am a teacher.")], 5) == []


@pytest.mark.parametrize(
    ("said", "at", "event"),
    [
        ("I moved to Lisbon last May", "2023-08-10T10:00:00Z", "In May 2023, the user moved"),
        ("I moved to Lisbon last May", "2023-03-10T10:00:00Z", "In May 2022, the user moved"),
        ("I moved to Lisbon last May", "2023-05-20T10:00:00Z", "In May 2022, the user moved"),
    ],
)
def test_a_move_last_month_name_is_an_event_and_a_home(
    rstore: Store, said: str, at: str, event: str
) -> None:
    # Not "The user lives in Lisbon last May": the date belongs to the move.
    say(rstore, "u", "s1", said, at=at)
    assert api.run_l1(rstore._derivation, "u", "s1").ok
    assert sorted(_contents(rstore)) == [event + " to Lisbon.", "The user lives in Lisbon."]
