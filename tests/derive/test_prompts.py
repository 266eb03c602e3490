"""Prompt builders and answer validators of the four derivation steps.

Validators get hand-made objects (what ``parse_json_output`` would hand them),
one test per leniency or strictness rule, plus a property test that nothing
but ``LLMOutputError`` ever escapes them.
"""

from __future__ import annotations

import contextlib
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memstore.derive.prompts import (
    DEDUP_PROMPT_VERSION,
    EXTRACT_PROMPT_VERSION,
    PERSONA_PROMPT_VERSION,
    SCENE_PROMPT_VERSION,
    DedupDecision,
    ExistingMemory,
    ExtractedMemory,
    PromptMessage,
    SceneOperation,
    SceneView,
    build_dedup_prompt,
    build_extract_prompt,
    build_persona_prompt,
    build_scene_prompt,
    clip,
    validate_dedup,
    validate_extract,
    validate_persona,
    validate_scenes,
)
from memstore.errors import LLMOutputError

NEW = [
    PromptMessage("m-3", "user", 'I live in Lyon and "never" eat meat.', "2025-05-02T10:00:00Z"),
    PromptMessage("m-4", "assistant", "Noted, vegetarian recipes it is.", "2025-05-02T10:00:05Z"),
]
BACKGROUND = [PromptMessage("m-1", "user", "我叫小林。", "2025-05-01T09:00:00Z")]
CANDIDATE = ExtractedMemory("The user lives in Lyon.", "persona", 70, "Home", ("m-3",))
EXISTING = [
    ExistingMemory("a1", "The user lives in Paris.", "persona", 70, "Home"),
    ExistingMemory("a2", "The user is vegetarian.", "persona", 80, "Diet"),
]


def scene(scene_id: str, heat: int = 1) -> SceneView:
    return SceneView(
        scene_id, f"Scene {scene_id}", f"About {scene_id}", f"Body of {scene_id}", heat, ()
    )


def memory(**fields: object) -> dict[str, object]:
    base: dict[str, object] = {
        "content": "The user is vegetarian.",
        "type": "persona",
        "priority": 80,
        "scene_name": "Diet",
        "source_message_ids": ["m-3"],
    }
    base.update(fields)
    return base


def extract_one(**fields: object) -> ExtractedMemory:
    (result,) = validate_extract({"memories": [memory(**fields)]}, {"m-3", "m-4"}, 20)
    return result


# --- builders ----------------------------------------------------------------------------------


def test_extract_prompt_shows_messages_ids_schema_and_rules() -> None:
    system, user = build_extract_prompt(NEW, BACKGROUND, "2025-05-02T12:00:00+00:00", 7)
    assert EXTRACT_PROMPT_VERSION in system
    for key in ('"memories"', '"content"', '"type"', '"priority"', '"scene_name"'):
        assert key in system
    assert '"source_message_ids"' in system and '"activity_start"' in system
    assert "persona" in system and "episodic" in system and "instruction" in system
    assert "one JSON object" in system and "Chinese" in system
    assert "2025-05-02T12:00:00+00:00" in user and "at most 7 memories" in user
    # Messages are JSON-encoded: quotes inside a message stay escaped, CJK stays readable.
    assert json.dumps(NEW[0].text) in user and "我叫小林。" in user
    background, new = user.split("NEW MESSAGES")
    assert '"m-1"' in background and '"m-3"' not in background
    assert '"m-3"' in new and '"m-4"' in new and '"m-1"' not in new
    assert 'Ids you may cite: ["m-3", "m-4"]' in user


def test_extract_prompt_without_background_and_with_a_huge_message() -> None:
    huge = PromptMessage("x", "user", "word " * 5000, "2025-01-01")
    _, user = build_extract_prompt([huge], [], "now", 3, max_message_chars=100)
    assert "(none)" in user.split("NEW MESSAGES")[0]
    assert "…[truncated]" in user and len(user) < 1000


def test_dedup_prompt_shows_candidate_and_existing_ids() -> None:
    system, user = build_dedup_prompt(CANDIDATE, EXISTING)
    assert DEDUP_PROMPT_VERSION in system
    for action in ("store", "update", "merge", "skip", "supersede"):
        assert f'"{action}"' in system
    assert '"target_ids"' in system and '"reason"' in system
    assert "The user lives in Lyon." in user
    assert '"a1"' in user and '"a2"' in user and "The user lives in Paris." in user
    _, empty = build_dedup_prompt(CANDIDATE, [])
    assert '(none, so the answer is "store")' in empty


def test_dedup_prompt_shows_activity_time_of_episodic_candidate() -> None:
    trip = ExtractedMemory("Trip.", "episodic", 60, "Travel", (), "2025-03-01", "2025-03-05")
    _, user = build_dedup_prompt(trip, EXISTING)
    assert '"activity_start": "2025-03-01"' in user and '"activity_end": "2025-03-05"' in user


@pytest.mark.parametrize(
    ("count", "expected"),
    [(3, "You may create"), (14, "Do not create"), (15, "must merge"), (17, "must merge")],
)
def test_scene_prompt_states_the_limit_rule_for_the_current_count(
    count: int, expected: str
) -> None:
    scenes = [scene(f"s{i}") for i in range(count)]
    system, user = build_scene_prompt([("n1", "Likes tea.", "persona")], scenes, 15)
    assert SCENE_PROMPT_VERSION in system and expected in user
    assert f"{count} of" in user


def test_scene_prompt_lets_the_first_scene_be_created_even_with_a_limit_of_one() -> None:
    _, user = build_scene_prompt([("n1", "Likes tea.", "persona")], [], 1)
    assert "You may create" in user


def test_scene_prompt_shows_memories_scenes_and_schema() -> None:
    system, user = build_scene_prompt(
        [("n1", "用户喜欢喝茶。", "persona")], [scene("s1", heat=4)], 15
    )
    for key in ('"operations"', '"op"', '"source_scene_ids"', '"memory_ids"', '"persona_refresh"'):
        assert key in system
    assert "1500" in system
    assert "用户喜欢喝茶。" in user and '"n1"' in user
    assert '"s1"' in user and "Body of s1" in user and '"heat": 4' in user


def test_persona_prompt_shows_previous_profile_scenes_and_memories() -> None:
    system, user = build_persona_prompt(
        "# Profile\nOld text.",
        [scene("s1", heat=3)],
        [("Always answer in German.", "instruction", -1)],
    )
    assert PERSONA_PROMPT_VERSION in system and '"persona"' in system and "2000" in system
    assert "Old text." in user and '"name": "Scene s1", "heat": 3' in user and "Body of s1" in user
    assert "Always answer in German." in user and '"priority": -1' in user
    _, first = build_persona_prompt("  ", [], [])
    assert "none yet" in first


# --- L1 extraction ------------------------------------------------------------------------------


def test_extract_good_input() -> None:
    obj = {
        "memories": [
            memory(),
            memory(
                content="The user moved to Lyon.",
                type="episodic",
                priority=65,
                scene_name="Home",
                activity_start="2025-04-01",
                activity_end="2025-04-03T18:00:00+02:00",
                source_message_ids=["m-3", "m-4"],
            ),
        ]
    }
    assert validate_extract(obj, {"m-3", "m-4"}, 20) == [
        ExtractedMemory("The user is vegetarian.", "persona", 80, "Diet", ("m-3",)),
        ExtractedMemory(
            "The user moved to Lyon.",
            "episodic",
            65,
            "Home",
            ("m-3", "m-4"),
            "2025-04-01",
            "2025-04-03T18:00:00+02:00",
        ),
    ]


@pytest.mark.parametrize(
    "bad", [None, [], "memories", {"items": []}, {"memories": "x"}, {"memories": {}}]
)
def test_extract_wrong_top_level_shape_raises(bad: object) -> None:
    with pytest.raises(LLMOutputError):
        validate_extract(bad, {"m-3"}, 20)


def test_extract_empty_list_is_no_memories() -> None:
    assert validate_extract({"memories": []}, {"m-3"}, 20) == []


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        ("just a string", "memories[1] is str, not an object"),
        (42, "memories[1] is int"),
        (memory(type="fact"), "'type' \"fact\""),
        (memory(type=None), "'type' null"),
        (memory(content="   "), "no text 'content'"),
        (memory(content=None), "no text 'content'"),
        ({"fact": "The user is vegetarian.", "kind": "persona"}, '["fact", "kind"]'),
    ],
)
def test_extract_refuses_items_that_do_not_follow_the_schema(bad: object, says: str) -> None:
    # Dropping such an item would count a fact the model saw as "nothing to
    # remember"; raising makes the client ask again and, failing that, the run fail.
    obj = {"memories": [memory(content="Kept.", type=" Instruction "), bad]}
    with pytest.raises(LLMOutputError) as info:
        validate_extract(obj, {"m-3"}, 20)
    assert says in str(info.value)


def test_extract_accepts_cosmetic_variants() -> None:
    (kept,) = validate_extract(
        {"memories": [memory(content="Kept.", type=" Instruction ")]}, {"m-3"}, 20
    )
    assert kept.content == "Kept." and kept.type == "instruction"


def test_extract_drops_duplicate_content() -> None:
    obj = {"memories": [memory(), memory(content="the user is VEGETARIAN.")]}
    assert len(validate_extract(obj, {"m-3"}, 20)) == 1


@pytest.mark.parametrize(
    ("given_priority", "memory_type", "expected"),
    [
        (150, "persona", 100),
        (-7, "instruction", -1),
        (-1, "persona", 0),  # -1 means "global instruction" only for instructions
        ("80", "persona", 80),
        (" 75.6 ", "persona", 76),
        (62.4, "persona", 62),
        ("high", "persona", 50),
        (True, "persona", 50),
        (None, "persona", 50),
        ("1e999", "persona", 50),
    ],
)
def test_extract_priority_is_coerced_and_clamped(
    given_priority: object, memory_type: str, expected: int
) -> None:
    assert extract_one(priority=given_priority, type=memory_type).priority == expected


def test_extract_missing_priority_defaults() -> None:
    item = memory()
    del item["priority"]
    (result,) = validate_extract({"memories": [item]}, {"m-3"}, 20)
    assert result.priority == 50


def test_extract_filters_source_ids() -> None:
    got = extract_one(source_message_ids=["m-3", "m-1", "ghost", "m-3", " m-4 ", None, ["m-4"]])
    assert got.source_message_ids == ("m-3", "m-4")
    # Numbers and a lone string are accepted; a memory whose ids all vanish keeps empty provenance.
    assert validate_extract({"memories": [memory(source_message_ids=7)]}, {"7"}, 20)[
        0
    ].source_message_ids == ("7",)
    assert extract_one(source_message_ids="m-4").source_message_ids == ("m-4",)
    assert extract_one(source_message_ids=["m-1"]).source_message_ids == ()


def test_extract_caps_keeping_the_most_important_in_order() -> None:
    obj = {
        "memories": [
            memory(content="a", priority=40),
            memory(content="b", priority=90),
            memory(content="c", priority=-1, type="instruction"),
            memory(content="d", priority=60),
        ]
    }
    assert [m.content for m in validate_extract(obj, {"m-3"}, 2)] == ["b", "c"]
    assert validate_extract(obj, {"m-3"}, 0) == []


def test_extract_activity_times_only_for_episodic_and_only_valid() -> None:
    assert extract_one(activity_start="2025-01-01").activity_start is None  # persona
    episodic = extract_one(
        type="episodic", activity_start="last week", activity_end_time="2025-01-02T10:00Z"
    )
    assert episodic.activity_start is None
    assert episodic.activity_end == "2025-01-02T10:00:00+00:00"


def test_extract_cleans_and_truncates_text() -> None:
    got = extract_one(
        content="  The user\x00 likes\ud800 tea.\r\n  ",
        scene_name="  Food \n and   drink ",
    )
    assert got.content == "The user likes tea." and got.scene_name == "Food and drink"
    long = extract_one(content="x" * 5000, scene_name="y" * 500)
    assert len(long.content) == 1000 and len(long.scene_name) == 80
    assert extract_one(content=12345).content == "12345"


# --- L1 dedup -----------------------------------------------------------------------------------

IDS = {"a1", "a2"}


def test_dedup_good_supersede() -> None:
    obj = {
        "action": "supersede",
        "target_ids": ["a1"],
        "content": "The user lives in Lyon (previously Paris).",
        "type": "persona",
        "priority": 75,
        "scene_name": "Home",
        "reason": "Moved.",
    }
    assert validate_dedup(obj, IDS, CANDIDATE) == DedupDecision(
        "supersede",
        ("a1",),
        "The user lives in Lyon (previously Paris).",
        "persona",
        75,
        "Home",
        "Moved.",
    )


@pytest.mark.parametrize(
    "bad", [None, [], "store", {"target_ids": []}, {"action": "delete"}, {"action": 3}]
)
def test_dedup_wrong_shape_or_action_raises(bad: object) -> None:
    with pytest.raises(LLMOutputError):
        validate_dedup(bad, IDS, CANDIDATE)


def test_dedup_action_spelling_is_lenient() -> None:
    assert (
        validate_dedup({"action": " UPDATE ", "target_ids": ["a1"]}, IDS, CANDIDATE).action
        == "update"
    )
    assert validate_dedup({"action": "ADD"}, IDS, CANDIDATE).action == "store"


def test_dedup_drops_unknown_targets() -> None:
    got = validate_dedup({"action": "merge", "target_ids": ["a1", "zz", "a2"]}, IDS, CANDIDATE)
    assert got.action == "merge" and got.target_ids == ("a1", "a2") and got.degraded_from is None


@pytest.mark.parametrize("action", ["update", "merge", "supersede", "skip"])
def test_dedup_without_known_targets_degrades_to_store(action: str) -> None:
    obj = {
        "action": action,
        "target_ids": ["ghost"],
        "content": "Merged nonsense.",
        "type": "episodic",
    }
    got = validate_dedup(obj, IDS, CANDIDATE)
    assert got.action == "store" and got.degraded_from == action and got.target_ids == ()
    # The text was written for memories that do not exist: the candidate is kept as it was.
    assert (got.content, got.type, got.priority, got.scene_name) == (
        CANDIDATE.content,
        "persona",
        70,
        "Home",
    )


def test_dedup_update_of_several_becomes_merge() -> None:
    got = validate_dedup(
        {"action": "update", "target_ids": ["a1", "a2"], "content": "X."}, IDS, CANDIDATE
    )
    assert (
        got.action == "merge" and got.degraded_from == "update" and got.target_ids == ("a1", "a2")
    )


def test_dedup_store_ignores_targets_and_skip_has_no_content() -> None:
    stored = validate_dedup({"action": "store", "target_ids": ["a1"]}, IDS, CANDIDATE)
    assert stored.target_ids == () and stored.content == CANDIDATE.content
    skipped = validate_dedup(
        {"action": "skip", "target_ids": ["a1"], "content": "x"}, IDS, CANDIDATE
    )
    assert skipped.action == "skip" and skipped.target_ids == ("a1",) and skipped.content == ""


@pytest.mark.parametrize("action", ["store", "update", "merge", "supersede"])
def test_dedup_fills_missing_fields_from_candidate(action: str) -> None:
    quiet = ExtractedMemory("Rarely matters.", "episodic", 0, "Misc", ())
    got = validate_dedup(
        {"action": action, "target_ids": ["a1"], "content": "  ", "type": "bogus"}, IDS, quiet
    )
    assert (got.content, got.type, got.priority, got.scene_name) == (
        "Rarely matters.",
        "episodic",
        0,
        "Misc",
    )


def test_dedup_coerces_priority_and_truncates() -> None:
    got = validate_dedup(
        {
            "action": "update",
            "target_ids": "a1",
            "priority": "250",
            "content": "é" * 3000,
            "reason": 5,
        },
        IDS,
        CANDIDATE,
    )
    assert got.target_ids == ("a1",) and got.priority == 100
    assert len(got.content) == 1000 and got.reason == "5"


# --- L2 scenes ----------------------------------------------------------------------------------

SCENES = {"s1", "s2", "s3"}
MEMS = {"n1", "n2"}


def test_scenes_good_operations() -> None:
    obj = {
        "operations": [
            {"op": "update", "scene_id": "s1", "body": "New body.", "memory_ids": ["n1"]},
            {
                "op": "create",
                "name": "Tea",
                "summary": "Tea habits.",
                "body": "Likes tea.",
                "memory_ids": ["n2"],
            },
            {
                "op": "merge",
                "source_scene_ids": ["s2", "s3"],
                "name": "Work",
                "summary": "S.",
                "body": "B.",
            },
        ],
        "persona_refresh": True,
    }
    result = validate_scenes(obj, SCENES, MEMS, 15)
    assert result.operations == (
        SceneOperation("update", "s1", (), None, None, "New body.", ("n1",)),
        SceneOperation("create", None, (), "Tea", "Tea habits.", "Likes tea.", ("n2",)),
        SceneOperation("merge", None, ("s2", "s3"), "Work", "S.", "B.", ()),
    )
    assert result.persona_refresh is True and result.dropped_creates == 0 and result.notes == ()


@pytest.mark.parametrize(
    "bad", [None, [], {"persona_refresh": True}, {"operations": None}, {"operations": "x"}]
)
def test_scenes_wrong_top_level_shape_raises(bad: object) -> None:
    with pytest.raises(LLMOutputError):
        validate_scenes(bad, SCENES, MEMS, 15)


def test_scenes_filter_memory_ids() -> None:
    obj = {
        "operations": [
            {"op": "delete", "scene_id": "s1"},
            {"op": "Update", "scene_id": "s2", "memory_ids": ["n1", "zz", "n1"]},
        ]
    }
    result = validate_scenes(obj, SCENES, MEMS, 15)
    assert [(o.op, o.scene_id, o.memory_ids) for o in result.operations] == [
        ("delete", "s1", ()),
        ("update", "s2", ("n1",)),
    ]
    assert result.notes == () and result.persona_refresh is False


@pytest.mark.parametrize(
    ("ops", "says"),
    [
        ([{"op": "update", "scene_id": "ghost", "body": "x"}], 'update of unknown scene "ghost"'),
        (
            [
                {"op": "delete", "scene_id": "s1"},
                {"op": "update", "scene_id": "s1", "body": "late"},
            ],
            "operations[1]: update of unknown scene",
        ),
        ([{"op": "explode", "scene_id": "s2"}], "'op' is \"explode\""),
        ([{"operation": "create", "name": "A", "body": "a"}], '["body", "name", "operation"]'),
        (["junk"], "operations[0]: is str, not an object"),
    ],
)
def test_scenes_refuse_ops_that_do_not_follow_the_schema(ops: list[object], says: str) -> None:
    with pytest.raises(LLMOutputError) as info:
        validate_scenes({"operations": ops}, SCENES, MEMS, 15)
    assert says in str(info.value)


def test_scenes_empty_update_dropped() -> None:
    obj = {"operations": [{"op": "update", "scene_id": "s1", "memory_ids": ["zz"], "name": " "}]}
    result = validate_scenes(obj, SCENES, MEMS, 15)
    assert result.operations == () and "empty update" in result.notes[0]


def test_scenes_merge_with_one_or_no_known_source() -> None:
    obj = {
        "operations": [
            {"op": "merge", "source_scene_ids": ["s1", "ghost"], "name": "A", "body": "a"},
            {"op": "merge", "source_scene_ids": ["ghost"], "name": "B", "body": "b"},
        ]
    }
    ops = validate_scenes(obj, SCENES, MEMS, 15).operations
    assert [(o.op, o.scene_id, o.name) for o in ops] == [
        ("update", "s1", "A"),
        ("create", None, "B"),
    ]


@pytest.mark.parametrize(
    "op",
    [
        {"op": "create", "name": "No body"},
        {"op": "create", "body": "No name"},
        {"op": "merge", "source_scene_ids": ["s1", "s2"], "name": "No body"},
    ],
)
def test_scenes_create_or_merge_without_name_or_body_refused(op: dict[str, object]) -> None:
    with pytest.raises(LLMOutputError, match="needs a non-empty 'name' and 'body'"):
        validate_scenes({"operations": [op]}, SCENES, MEMS, 15)


def test_scenes_truncate_body_name_and_summary() -> None:
    obj = {
        "operations": [
            {"op": "create", "name": "n" * 200, "summary": "s" * 900, "body": "b" * 4000}
        ]
    }
    (op,) = validate_scenes(obj, SCENES, MEMS, 15).operations
    assert op.body is not None and len(op.body) == 1500
    assert op.name is not None and len(op.name) == 80
    assert op.summary is not None and len(op.summary) == 300


def test_scenes_never_exceed_the_limit() -> None:
    creates = [{"op": "create", "name": f"C{i}", "body": "b"} for i in range(3)]
    at_limit = validate_scenes({"operations": creates}, SCENES, MEMS, 3)
    assert at_limit.operations == () and at_limit.dropped_creates == 3
    one_free = validate_scenes({"operations": creates}, SCENES, MEMS, 4)
    assert [o.name for o in one_free.operations] == ["C0"] and one_free.dropped_creates == 2
    assert any("limit" in note for note in one_free.notes)


def test_scenes_merges_anywhere_in_the_list_make_room() -> None:
    obj = {
        "operations": [
            {"op": "create", "name": "New", "body": "b"},
            {"op": "merge", "source_scene_ids": ["s1", "s2", "s3"], "name": "All", "body": "b"},
        ]
    }
    result = validate_scenes(obj, SCENES, MEMS, 3)
    assert [o.op for o in result.operations] == ["create", "merge"] and result.dropped_creates == 0


@pytest.mark.parametrize(
    ("value", "expected"), [("true", True), ("no", False), (1, True), (0, False), ([], False)]
)
def test_scenes_persona_refresh_is_coerced(value: object, expected: bool) -> None:
    assert (
        validate_scenes(
            {"operations": [], "persona_refresh": value}, SCENES, MEMS, 15
        ).persona_refresh
        is expected
    )


# --- L3 persona ---------------------------------------------------------------------------------


def test_persona_good_and_cleaned() -> None:
    assert validate_persona({"persona": "  # Profile\r\nA teacher.\n"}) == "# Profile\nA teacher."
    assert validate_persona({"persona": "```markdown\n# Profile\nX\n```"}) == "# Profile\nX"


@pytest.mark.parametrize(
    "bad",
    [
        None,
        [],
        "text",
        {},
        {"profile": "x"},
        {"persona": None},
        {"persona": 5},
        {"persona": " \n "},
    ],
)
def test_persona_bad_raises(bad: object) -> None:
    with pytest.raises(LLMOutputError):
        validate_persona(bad)


def test_persona_truncated_at_2000_code_points() -> None:
    text = validate_persona({"persona": "# 画像\n" + "很" * 5000})
    assert len(text) <= 2000 and text.startswith("# 画像")


# --- clip ---------------------------------------------------------------------------------------


def test_clip_keeps_graphemes_whole() -> None:
    assert clip("abc", 5) == "abc"
    assert clip("abcde", 3) == "abc"
    assert clip("ab" + "e\u0301" + "z", 3) == "ab"  # no base letter without its accent
    family = "\U0001f468\u200d\U0001f469\u200d\U0001f467"
    assert not clip("a" + family, 3).endswith("\u200d")
    flags = "\U0001f1eb\U0001f1f7\U0001f1e9\U0001f1ea"  # FR DE
    assert clip(flags, 3) == "\U0001f1eb\U0001f1f7"
    assert clip("line one\nline two is long", 20) == "line one\nline two is"
    assert clip("x" * 90 + "\n" + "y" * 20, 100) == "x" * 90


# --- property: only LLMOutputError escapes ------------------------------------------------------

KEYS = [
    "memories",
    "content",
    "type",
    "priority",
    "scene_name",
    "source_message_ids",
    "activity_start",
    "activity_end",
    "action",
    "target_ids",
    "reason",
    "operations",
    "op",
    "scene_id",
    "source_scene_ids",
    "name",
    "summary",
    "body",
    "memory_ids",
    "persona_refresh",
    "persona",
]
VALUES = [
    "persona",
    "episodic",
    "instruction",
    "update",
    "merge",
    "skip",
    "supersede",
    "create",
    "delete",
    "s1",
    "s2",
    "a1",
    "m-3",
    "n1",
    "2025-01-01",
]
scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=20)
    | st.sampled_from(VALUES)
)
json_like = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=6)
        | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=5), inner, max_size=6)
    ),
    max_leaves=40,
)


_any_output = given(obj=json_like, max_n=st.integers(-2, 5))


def _validators_raise_nothing_but_llm_output_error(obj: object, max_n: int) -> None:
    for call in (
        lambda: validate_extract(obj, {"m-3"}, max_n),
        lambda: validate_dedup(obj, {"a1"}, CANDIDATE),
        lambda: validate_persona(obj),
    ):
        with contextlib.suppress(LLMOutputError):
            call()
    for wrapped in (
        obj,
        {"memories": obj},
        {"operations": obj},
        {"memories": [obj]},
        {"operations": [obj]},
    ):
        try:
            memories = validate_extract(wrapped, {"m-3"}, max_n)
            assert len(memories) <= max(max_n, 0)
            assert all(set(m.source_message_ids) <= {"m-3"} for m in memories)
        except LLMOutputError:
            pass
        try:
            result = validate_scenes(wrapped, {"s1", "s2"}, {"n1"}, max(max_n, 0))
        except LLMOutputError:
            continue
        final = 2 + sum(
            1 if o.op == "create" else -1 if o.op == "delete" else 1 - len(o.source_scene_ids)
            for o in result.operations
            if o.op != "update"
        )
        assert final <= max(max_n, 0) or all(o.op != "create" for o in result.operations)
        assert all(set(o.memory_ids) <= {"n1"} for o in result.operations)
        assert all(o.body is None or len(o.body) <= 1500 for o in result.operations)


# 100 examples in the quick suite, 200 more with the slow tests (.ci/run).
test_validators_raise_nothing_but_llm_output_error = settings(max_examples=100, deadline=None)(
    _any_output(_validators_raise_nothing_but_llm_output_error)
)
test_validators_raise_nothing_but_llm_output_error_more = pytest.mark.slow(
    settings(max_examples=200, deadline=None)(
        _any_output(_validators_raise_nothing_but_llm_output_error)
    )
)
