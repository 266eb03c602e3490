"""Read BEAM conversations into the bench's ``Conversation``/``Question`` shapes.

BEAM (Tavakoli et al., 2025, "Beyond a Million Tokens") is a set of long
user–assistant chats, each a directory ``<n>/`` holding

- ``chat.json``: a list of batches ``{"batch_number", "time_anchor", "turns"}``;
  ``turns`` is a list of lists of messages ``{"role", "id", "content",
  "time_anchor"?, "index"?, "question_type"?}``. ``id`` counts the chat's
  messages from 0; one message per batch carries the batch's date as
  ``"March-15-2024"``. User messages end with a plan marker ``" ->-> 1,3"``.
- ``probing_questions/probing_questions.json``: ``{type: [question, ...]}`` for
  ten types; a question has ``"question"``, a gold answer under a
  type-dependent key, and ``"source_chat_ids"`` (message ids, a list or an
  object of lists) for every type but abstention.

The data is never bundled with memstore: pass the path of a copy (``memstore
bench fetch-data beam``). Mapping, as documented in docs/benchmarks-data.md:
a batch is a session dated by its anchor (midnight UTC, one second per
message); speakers are ``User`` and ``Assistant``; a question's evidence is
its ``source_chat_ids``; its category is its type's number in ``CATEGORIES``.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from memstore.bench.locomo_data import Conversation, Question, Turn
from memstore.errors import InvalidInputError

__all__ = ["ANSWER_KEYS", "CATEGORIES", "is_beam_dir", "load_beam", "parse_beam"]

# BEAM's ten probing types, numbered in the order its paper lists them.
CATEGORIES: dict[int, str] = {
    1: "abstention",
    2: "contradiction_resolution",
    3: "event_ordering",
    4: "information_extraction",
    5: "instruction_following",
    6: "knowledge_update",
    7: "multi_session_reasoning",
    8: "preference_following",
    9: "summarization",
    10: "temporal_reasoning",
}
_TYPE_NUMBER = {name: n for n, name in CATEGORIES.items()}
# Where each type keeps its gold answer. Instruction and preference following
# have none (only a compliance description and a rubric), so their answer is
# "" and the QA harness, which grades against a gold answer, leaves them out.
ANSWER_KEYS = ("answer", "ideal_answer", "ideal_response", "ideal_summary")
USER, ASSISTANT = "User", "Assistant"
CHAT_FILE = "chat.json"
QUESTIONS_FILE = Path("probing_questions") / "probing_questions.json"
_MARKER = re.compile(r"\s*->->\s*\d+\s*,\s*\d+\s*$")


def _anchor(text: str, where: str) -> datetime:
    try:
        return datetime.strptime(text.strip(), "%B-%d-%Y").replace(tzinfo=UTC)
    except ValueError as exc:
        raise InvalidInputError(f"{where}: unrecognised BEAM time anchor {text!r}") from exc


def _ids(value: Any) -> list[int]:
    """Message ids from a list, an object of lists, or lists of lists."""
    if isinstance(value, dict):
        return [i for v in value.values() for i in _ids(v)]
    if isinstance(value, list):
        return [i for v in value for i in _ids(v)]
    if isinstance(value, bool) or value is None:
        return []
    if isinstance(value, int):
        return [value]
    if isinstance(value, str) and value.strip().isdigit():
        return [int(value)]
    return []


def dia_id(message_id: int) -> str:
    return f"M{message_id}"


def _turns(sample_id: str, chat: Any) -> list[Turn]:
    if not isinstance(chat, list):
        raise InvalidInputError(f"{sample_id}: {CHAT_FILE} must be a list of batches")
    turns: list[Turn] = []
    previous: datetime | None = None
    for b, batch in enumerate(chat, start=1):
        where = f"{sample_id} batch {b}"
        if not isinstance(batch, dict) or not isinstance(batch.get("turns"), list):
            raise InvalidInputError(f"{where}: expected an object with a 'turns' list")
        messages = [
            m for group in batch["turns"] for m in (group if isinstance(group, list) else [group])
        ]
        anchors = [
            m["time_anchor"] for m in messages if isinstance(m, dict) and m.get("time_anchor")
        ]
        raw = anchors[0] if anchors else batch.get("time_anchor")
        if isinstance(raw, str):
            start = _anchor(raw, where)
        elif previous is not None:
            # An undated batch follows the previous one by a day, keeping order.
            start = previous + timedelta(days=1)
        else:
            raise InvalidInputError(f"{where}: no time anchor")
        previous = start
        for i, m in enumerate(messages):
            if not isinstance(m, dict):
                raise InvalidInputError(f"{where} message {i}: a message must be an object")
            role, mid, content = m.get("role"), m.get("id"), m.get("content")
            if role not in ("user", "assistant"):
                raise InvalidInputError(f"{where} message {i}: role must be user or assistant")
            if not isinstance(mid, int) or isinstance(mid, bool):
                raise InvalidInputError(f"{where} message {i}: id must be an integer")
            if not isinstance(content, str):
                raise InvalidInputError(f"{where} message {mid}: content must be a string")
            turns.append(
                Turn(
                    dia_id=dia_id(mid),
                    speaker=USER if role == "user" else ASSISTANT,
                    # The marker is the generator's plan index, not something
                    # the user said; left in, it would match across messages.
                    text=_MARKER.sub("", content),
                    session_index=b,
                    occurred_at=start + timedelta(seconds=i),
                )
            )
    return turns


def _gold(q: dict[str, Any]) -> str:
    for key in ANSWER_KEYS:
        value = q.get(key)
        if isinstance(value, str) and value.strip():
            return value
    return ""


def _questions(sample_id: str, probing: Any, known: set[str]) -> list[Question]:
    if not isinstance(probing, dict):
        raise InvalidInputError(f"{sample_id}: probing questions must be an object of types")
    out: list[Question] = []
    for kind, items in probing.items():
        if kind not in _TYPE_NUMBER:
            raise InvalidInputError(f"{sample_id}: unknown BEAM question type {kind!r}")
        if not isinstance(items, list):
            raise InvalidInputError(f"{sample_id} {kind}: expected a list of questions")
        for i, q in enumerate(items):
            if not isinstance(q, dict) or not isinstance(q.get("question"), str):
                raise InvalidInputError(f"{sample_id} {kind}[{i}]: expected a 'question' string")
            raw = q.get("source_chat_ids")
            ids = list(dict.fromkeys(dia_id(n) for n in _ids(raw)))
            out.append(
                Question(
                    question=q["question"],
                    answer=_gold(q),
                    category=_TYPE_NUMBER[kind],
                    evidence=[e for e in ids if e in known],
                    # An id naming no message is reported, never scored.
                    skipped_evidence=[e for e in ids if e not in known],
                    raw_evidence=[str(n) for n in _ids(raw)],
                )
            )
    return out


def parse_beam(sample_id: str, chat: Any, probing: Any) -> Conversation:
    """One conversation from BEAM's decoded ``chat.json`` and probing questions."""
    turns = _turns(sample_id, chat)
    known = {t.dia_id for t in turns}
    return Conversation(
        sample_id=sample_id,
        speaker_a=USER,
        speaker_b=ASSISTANT,
        turns=turns,
        questions=_questions(sample_id, probing, known),
    )


def is_beam_dir(path: Path) -> bool:
    """A chat directory, or a directory of them (``100K/``)."""
    if not path.is_dir():
        return False
    if (path / CHAT_FILE).is_file():
        return True
    return any((p / CHAT_FILE).is_file() for p in path.iterdir() if p.is_dir())


def _read(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise InvalidInputError(f"cannot read BEAM file {str(path)!r}: {exc}") from exc


def _sort_key(p: Path) -> tuple[int, str]:
    return (int(p.name), "") if p.name.isdigit() else (1 << 30, p.name)


def load_beam(path: str | Path) -> list[Conversation]:
    """Read one BEAM chat directory or a directory of numbered ones, in number order."""
    root = Path(path)
    if not is_beam_dir(root):
        raise InvalidInputError(
            f"{str(root)!r} is not a BEAM chat directory "
            f"(no {CHAT_FILE} in it or its subdirectories)"
        )
    dirs = (
        [root]
        if (root / CHAT_FILE).is_file()
        else sorted(
            (p for p in root.iterdir() if p.is_dir() and (p / CHAT_FILE).is_file()), key=_sort_key
        )
    )
    convs = []
    for d in dirs:
        questions = d / QUESTIONS_FILE
        if not questions.is_file():
            raise InvalidInputError(f"BEAM chat {str(d)!r} has no {QUESTIONS_FILE}")
        convs.append(parse_beam(f"beam-{d.name}", _read(d / CHAT_FILE), _read(questions)))
    return convs
