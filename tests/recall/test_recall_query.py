"""What recall reads from the question itself: small talk, names the memory
does not hold, and the dates a question names."""

from __future__ import annotations

import pytest

from memstore.recall.query import (
    about_someone,
    dated,
    names_unknown,
    off_topic,
    personal,
    query_dates,
    query_names,
)
from memstore.recall.rank import Candidate
from memstore.text.info import is_small_talk


@pytest.mark.parametrize(
    "query",
    ["How's your day going?", "Thanks, talk soon!", "Good night!", "ok", "谢谢，再见！", "你好！"],
)
def test_small_talk_has_no_topic(query: str) -> None:
    assert is_small_talk(query)


@pytest.mark.parametrize(
    "query",
    ["What tea do I like?", "thanks, what was my sister's name?", "我早上一般喝什么？", "Rex"],
)
def test_a_question_with_a_topic_is_not_small_talk(query: str) -> None:
    assert not is_small_talk(query)


def _msg(text: str, speaker: str | None = None) -> Candidate:
    return Candidate("message", 1, "m1", text, 0.0, row={"speaker": speaker})


def test_names_past_the_first_word_count() -> None:
    assert query_names("What did Marguerite say about Lisbon?") == ["marguerite", "lisbon"]
    assert query_names("Caroline went where?") == []
    assert query_names("What is Oluwaseun's favourite band?") == ["oluwaseun"]


def test_a_question_about_names_no_candidate_holds_is_off_topic() -> None:
    cands = [_msg("I moved to Lisbon last May", "Ana"), _msg("I learn Japanese")]
    assert names_unknown("What is the capital of Australia?", cands)
    assert not names_unknown("When did I move to Lisbon?", cands)
    assert not names_unknown("What did Ana say?", cands)  # the speaker counts
    assert not names_unknown("When is my trip to Japan?", cands)  # a shared start
    assert not names_unknown("what should I cook for her?", cands)  # no names at all
    assert off_topic("Thanks, talk soon!", cands)
    assert not off_topic("When did I move to Lisbon?", cands)


def test_dates_a_question_names_match_the_items_dated_then() -> None:
    assert query_dates("What did Mel paint in July 2023?") == ["2023-07"]
    assert query_dates("When did Melanie go camping in June?") == ["-06"]
    assert query_dates("What did she show on October 13, 2023?") == ["2023-10"]
    assert query_dates("How often did he go to the beach in 2023?") == ["2023"]
    assert query_dates("May I ask you something?") == []
    row = {"occurred_at": "2023-07-14T10:00:00+00:00"}
    assert dated(row, ["2023-07"]) and dated(row, ["-07"]) and dated(row, ["2023"])
    assert not dated(row, ["2023-06"]) and not dated(row, ["-06"]) and not dated({}, ["2023"])


@pytest.mark.parametrize(
    "query",
    [
        "what should I cook for her?",
        "where does she live?",
        "Who is coming to visit me?",
        "Recommend some music I'd enjoy.",
        "How often do I go running?",
        "help me plan my sister's visit",
        "我住在哪里？",
    ],
)
def test_a_question_about_the_user_or_someone_they_mentioned_is_personal(query: str) -> None:
    assert personal(query)


@pytest.mark.parametrize(
    "query",
    [
        "How do I centre a div in CSS?",
        "Give me three tips for better sleep.",
        "Can you explain recursion to me?",
        "Why is the sky blue?",
        "中国的首都是哪里？",
    ],
)
def test_a_task_or_a_world_fact_is_not_personal(query: str) -> None:
    assert not personal(query)


def test_i_contractions_are_not_names() -> None:
    assert query_names("Recommend some music I'd enjoy, I'm bored") == []


def test_a_question_naming_a_known_speaker_is_about_someone() -> None:
    cands = [_msg("I painted a lake", "Melanie")]
    assert about_someone("What did Melanie paint?", cands)
    assert not about_someone("Why is the sky blue?", cands)
    assert not about_someone("What did Marguerite paint?", cands)
