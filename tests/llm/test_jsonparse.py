"""parse_json_output: the JSON inside whatever a model actually answers."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memstore.errors import LLMError, LLMOutputError
from memstore.llm.jsonparse import parse_json_output


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": 1}', {"a": 1}),
        ("[1, 2, 3]", [1, 2, 3]),
        ('  \n {"a": [true, false, null]}\n ', {"a": [True, False, None]}),
        ('\ufeff{"bom": 1}', {"bom": 1}),
        ("42", 42),
        ('"just a string"', "just a string"),
        ("{}", {}),
        ("[]", []),
    ],
)
def test_plain_json(text: str, expected: Any) -> None:
    assert parse_json_output(text) == expected


def test_code_fence_with_language_and_prose() -> None:
    text = (
        "Sure! Here are the memories I extracted:\n\n"
        "```json\n"
        '{"memories": [{"text": "likes tea", "type": "persona"}]}\n'
        "```\n\n"
        "Let me know if you need anything else."
    )
    assert parse_json_output(text) == {"memories": [{"text": "likes tea", "type": "persona"}]}


@pytest.mark.parametrize(
    "text",
    [
        '```\n{"a": 1}\n```',
        '```JSON\n{"a": 1}\n```',
        '```json {"a": 1}```',
        '```jsonc\r\n{"a": 1}\r\n```',
        'json\n{"a": 1}',
        'Result: {"a": 1}. Done.',
        '{"a": 1}\n\nExplanation: I picked a = 1 because {reasons}.',
    ],
)
def test_fence_and_prose_variants(text: str) -> None:
    assert parse_json_output(text) == {"a": 1}


def test_fenced_block_preferred_over_bracketed_prose_before_it() -> None:
    text = 'The format is {"key": value}, as asked.\n```json\n{"key": "real"}\n```'
    assert parse_json_output(text) == {"key": "real"}


def test_second_fence_used_when_first_is_not_json() -> None:
    text = '```python\nprint("hi")\n```\nand the data:\n```json\n[1, 2]\n```'
    assert parse_json_output(text) == [1, 2]


def test_unclosed_fence_still_parses() -> None:
    assert parse_json_output('```json\n{"a": [1, 2]}\n') == {"a": [1, 2]}


def test_array_top_level_with_prose() -> None:
    text = 'The decisions are:\n[{"action": "store"}, {"action": "skip"}]\nThat is all.'
    assert parse_json_output(text) == [{"action": "store"}, {"action": "skip"}]


def test_first_complete_value_wins() -> None:
    assert parse_json_output('{"first": 1} and then {"second": 2}') == {"first": 1}


def test_trailing_commas() -> None:
    text = '{\n  "a": [1, 2, 3,],\n  "b": {"c": "x",  },\n}'
    assert parse_json_output(text) == {"a": [1, 2, 3], "b": {"c": "x"}}


def test_comma_inside_string_before_brace_kept() -> None:
    assert parse_json_output('{"a": "x, }", "b": "[1,]"}') == {"a": "x, }", "b": "[1,]"}


def test_raw_control_characters_inside_strings() -> None:
    text = '{"body": "line one\nline two\ttabbed\r\n", "k": "bell\x07"}'
    assert parse_json_output(text) == {
        "body": "line one\nline two\ttabbed\r\n",
        "k": "bell\x07",
    }


def test_smart_quotes_around_keys_and_values() -> None:
    text = '{“name”: “Alice”, “tags”: [“a”, “b”], "plain": 1}'
    assert parse_json_output(text) == {"name": "Alice", "tags": ["a", "b"], "plain": 1}


def test_smart_quotes_inside_real_strings_are_content() -> None:
    text = '{"quote": "she said “hi” to me"}'
    assert parse_json_output(text) == {"quote": "she said “hi” to me"}


def test_python_style_dict() -> None:
    text = "{'name': 'Bob', 'ok': True, 'none': None, 'off': False, "
    text += "'q': 'say \"x\"', 'it': 'it\\'s'}"
    assert parse_json_output(text) == {
        "name": "Bob",
        "ok": True,
        "none": None,
        "off": False,
        "q": 'say "x"',
        "it": "it's",
    }


def test_comments_are_dropped() -> None:
    text = """{
      // the user's preference
      "a": 1, /* inline */ "url": "http://example.com/x"
    }"""
    assert parse_json_output(text) == {"a": 1, "url": "http://example.com/x"}


def test_invalid_escape_is_kept_as_backslash() -> None:
    text = r'{"re": "\d+\s", "path": "C:\Users\x", "ok": "\n\u00e9"}'
    assert parse_json_output(text) == {"re": r"\d+\s", "path": r"C:\Users\x", "ok": "\né"}


def test_brackets_in_strings_do_not_confuse_matching() -> None:
    text = 'Answer: {"a": "} ] { [", "b": ["]", "{"]} trailing }'
    assert parse_json_output(text) == {"a": "} ] { [", "b": ["]", "{"]}


def test_escaped_quote_in_string() -> None:
    assert parse_json_output(r'x {"a": "he said \"}\" ok"} y') == {"a": 'he said "}" ok'}


def test_stray_brace_in_prose_before_json() -> None:
    text = 'Use { with care and [brackets] too. {"a": 1}'
    assert parse_json_output(text) == {"a": 1}


def test_unparseable_span_skipped_for_later_value() -> None:
    text = '{"a": oops} but actually {"a": 2}'
    assert parse_json_output(text) == {"a": 2}


def test_unicode_and_nested() -> None:
    value = {"名前": "テスト", "emoji": "🙂", "deep": [[[{"x": [1.5, -2e3]}]]]}
    assert parse_json_output("ok: " + json.dumps(value, ensure_ascii=False)) == value


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   \n ",
        "I cannot help with that.",
        "The answer is yes.",
        "{not json at all}",
        "```\nplain text in a fence\n```",
    ],
)
def test_nothing_parseable_raises(text: str) -> None:
    with pytest.raises(LLMOutputError) as info:
        parse_json_output(text)
    assert info.value.raw == text
    assert isinstance(info.value, LLMError)


def test_truncated_output_raises_and_says_so() -> None:
    text = 'Here: {"memories": [{"text": "likes tea"}, {"text": "owns a ca'
    with pytest.raises(LLMOutputError, match="never closed") as info:
        parse_json_output(text)
    assert info.value.raw == text


def test_truncated_output_does_not_return_inner_fragment() -> None:
    with pytest.raises(LLMOutputError):
        parse_json_output('{"items": [{"a": 1}, {"b": 2}')


def test_mismatched_brackets_raise() -> None:
    with pytest.raises(LLMOutputError):
        parse_json_output('{"a": [1, 2}')


def test_non_string_input_raises() -> None:
    with pytest.raises(LLMOutputError):
        parse_json_output(None)  # type: ignore[arg-type]


def test_long_garbage_error_message_is_bounded() -> None:
    text = "x" * 10_000
    with pytest.raises(LLMOutputError) as info:
        parse_json_output(text)
    assert len(str(info.value)) < 600
    assert info.value.raw == text


# -- property: any JSON container survives being wrapped the way models wrap it --

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**12), max_value=10**12)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
_json = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=15,
)
_containers = st.lists(_json, max_size=4) | st.dictionaries(st.text(max_size=8), _json, max_size=4)
# Prose before the value must not itself contain JSON-looking brackets; after it, anything goes.
_prose_before = st.text(
    alphabet=st.characters(exclude_characters="{[`", exclude_categories=["Cs"]), max_size=40
)
_prose_after = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=40)


_wrapped = given(
    value=_containers,
    before=_prose_before,
    after=_prose_after,
    fence=st.sampled_from(["", "```\n", "```json\n", "```JSON "]),
    indent=st.sampled_from([None, 2]),
    ensure_ascii=st.booleans(),
)


def _round_trips(
    value: Any, before: str, after: str, fence: str, indent: int | None, ensure_ascii: bool
) -> None:
    dumped = json.dumps(value, indent=indent, ensure_ascii=ensure_ascii)
    if fence:
        # A fence closes before trailing prose, which then may contain anything but backticks.
        text = f"{before}\n{fence}{dumped}\n```\n{after.replace('`', '')}"
    else:
        text = f"{before} {dumped} {after}"
    assert parse_json_output(text) == value


# 100 examples in the quick suite, 200 more with the slow tests (.ci/run).
test_property_wrapped_json_round_trips = settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)(_wrapped(_round_trips))
test_property_wrapped_json_round_trips_more = pytest.mark.slow(
    settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])(
        _wrapped(_round_trips)
    )
)
