"""Read LoCoMo-Plus into the bench's ``Conversation``/``Question`` shapes.

LoCoMo-Plus (Li et al., 2026) adds a *cognitive* task to LoCoMo: a short cue
dialogue (``"A: …\\nB: …"``) is placed in a LoCoMo conversation some time
(``time_gap``, "two months later") before a trigger query (``"A: …"``) whose
good reply has to connect back to the cue. ``locomo_plus.json`` is a list of
``{"relation_type", "cue_dialogue", "trigger_query", "time_gap", …}``; it
carries no conversation of its own and no gold answer.

Stitching follows the dataset's own rule: item *i* goes into host
conversation ``i % len(hosts)``; the trigger is asked seven days after the
host's last session, the cue is dated ``time_gap`` before that (weeks = 7
days, months = 30, years = 365); ``A``/``B`` become the host's two speakers.
Where upstream builds one conversation per item, this loader puts every item
of a host into that one conversation (each cue its own session, sessions in
time order), so a host is stored once and its cues are distractors for each
other. The questions are the trigger queries only (category ``COGNITIVE``),
their evidence the cue's turns; the host's own LoCoMo questions are left out,
because the hosts are usually the public LoCoMo conversations, held out for
evaluation. Answers are empty: the QA harness, which grades against a gold
answer, has nothing to grade here.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from memstore.bench.locomo_data import Conversation, Question, Turn
from memstore.errors import InvalidInputError

__all__ = [
    "CATEGORIES",
    "COGNITIVE",
    "is_locomo_plus",
    "load_locomo_plus",
    "parse_ab_dialogue",
    "parse_time_gap",
    "stitch",
]

COGNITIVE = 6  # LoCoMo's five categories, then this one (the dataset's numbering)
CATEGORIES: dict[int, str] = {COGNITIVE: "cognitive"}
PLUS_FILE = "locomo_plus.json"
HOSTS_FILE = "locomo10.json"
QUERY_AFTER = timedelta(days=7)
_WORDS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
    "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12,
}  # fmt: skip
_GAP = re.compile(
    r"\b(\d+|" + "|".join(_WORDS) + r")\s*(week|weeks|month|months|year|years)\b", re.IGNORECASE
)
_DAYS = {"week": 7, "month": 30, "year": 365}


def parse_time_gap(text: str) -> timedelta:
    """``"about six weeks later"`` → 42 days. A gap with no count and unit
    ("several months later") is zero, as in the dataset's own stitching."""
    m = _GAP.search(text)
    if m is None:
        return timedelta(0)
    num, unit = m.group(1).lower(), m.group(2).lower()
    count = int(num) if num.isdigit() else _WORDS[num]
    return timedelta(days=count * _DAYS[unit.rstrip("s")])


def parse_ab_dialogue(text: str) -> list[tuple[str, str]]:
    """``[("A", words), ("B", words), …]``; lines without a speaker are dropped."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line[:2] in ("A:", "B:"):
            out.append((line[0], line[2:].strip()))
    return out


def _item(i: int, raw: Any) -> tuple[list[tuple[str, str]], str, timedelta]:
    where = f"{PLUS_FILE}[{i}]"
    if not isinstance(raw, dict):
        raise InvalidInputError(f"{where}: an item must be an object")
    cue, query, gap = raw.get("cue_dialogue"), raw.get("trigger_query"), raw.get("time_gap")
    if not isinstance(cue, str) or not isinstance(query, str) or not isinstance(gap, str):
        raise InvalidInputError(
            f"{where}: cue_dialogue, trigger_query and time_gap must be strings"
        )
    cue_turns = parse_ab_dialogue(cue)
    query_turns = parse_ab_dialogue(query)
    if not cue_turns or not query_turns:
        raise InvalidInputError(f"{where}: cue and trigger need at least one 'A:' or 'B:' line")
    return cue_turns, " ".join(t for _, t in query_turns), parse_time_gap(gap)


def stitch(host: Conversation, items: list[tuple[int, Any]]) -> Conversation:
    """``host`` with each item's cue inserted as a session, sessions renumbered
    in time order; the questions are the items' trigger queries."""
    if not host.turns:
        raise InvalidInputError(f"host {host.sample_id} has no turns")
    sessions: dict[int, list[Turn]] = {}
    for t in host.turns:
        sessions.setdefault(t.session_index, []).append(t)
    # (start, tie-break, turns): host sessions keep their order, cues follow.
    blocks: list[tuple[datetime, int, list[Turn]]] = [
        (ts[0].occurred_at, n, ts) for n, ts in sessions.items()
    ]
    query_at = max(t.occurred_at for t in host.turns) + QUERY_AFTER
    questions = []
    speaker = {"A": host.speaker_a, "B": host.speaker_b}
    for i, raw in items:
        cue, query, gap = _item(i, raw)
        start = query_at - gap
        cue_turns = [
            Turn(
                dia_id=f"P{i}:{j + 1}",
                speaker=speaker[who],
                text=text,
                session_index=0,
                occurred_at=start + timedelta(seconds=j),
            )
            for j, (who, text) in enumerate(cue)
        ]
        blocks.append((start, 1_000_000 + i, cue_turns))
        questions.append(
            Question(
                question=query,
                answer="",
                category=COGNITIVE,
                evidence=[t.dia_id for t in cue_turns],
                skipped_evidence=[],
                raw_evidence=[t.dia_id for t in cue_turns],
            )
        )
    turns = [
        replace(t, session_index=n)
        for n, (_, _, ts) in enumerate(sorted(blocks, key=lambda b: (b[0], b[1])), start=1)
        for t in ts
    ]
    return replace(host, sample_id=f"{host.sample_id}-plus", turns=turns, questions=questions)


def is_locomo_plus(data: Any) -> bool:
    return (
        isinstance(data, list)
        and bool(data)
        and isinstance(data[0], dict)
        and "cue_dialogue" in data[0]
        and "trigger_query" in data[0]
    )


def _read(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise InvalidInputError(f"cannot read {str(path)!r}: {exc}") from exc


def load_locomo_plus(path: str | Path, hosts: str | Path | None = None) -> list[Conversation]:
    """Stitch ``locomo_plus.json`` (or a directory holding it) into LoCoMo host
    conversations: ``hosts`` (a LoCoMo JSON file), by default the
    ``locomo10.json`` next to it, as the dataset ships."""
    from memstore.bench.locomo_data import load_locomo

    p = Path(path)
    plus_file = p / PLUS_FILE if p.is_dir() else p
    host_file = Path(hosts) if hosts is not None else plus_file.parent / HOSTS_FILE
    data = _read(plus_file)
    if not is_locomo_plus(data):
        raise InvalidInputError(
            f"{str(plus_file)!r} is not LoCoMo-Plus data "
            "(a list of cue_dialogue/trigger_query items)"
        )
    if not host_file.is_file():
        raise InvalidInputError(
            f"LoCoMo-Plus needs LoCoMo host conversations: {str(host_file)!r} does not exist "
            "(pass --hosts FILE)"
        )
    host_convs = load_locomo(host_file)
    if not host_convs:
        raise InvalidInputError(f"{str(host_file)!r} holds no conversation")
    per_host: dict[int, list[tuple[int, Any]]] = {}
    for i, raw in enumerate(data):
        per_host.setdefault(i % len(host_convs), []).append((i, raw))
    return [stitch(host_convs[k], items) for k, items in sorted(per_host.items())]
