"""Read the LoCoMo benchmark JSON into plain dataclasses.

LoCoMo (Maharana et al., ACL 2024; CC BY-NC 4.0) is a list of samples, each
``{"sample_id", "conversation": {"speaker_a", "speaker_b",
"session_N_date_time", "session_N": [turn, ...]}, "qa": [...]}``; a turn is
``{"speaker", "dia_id": "D<session>:<turn>", "text", "blip_caption"?}``.
The data is never bundled with memstore: pass the path of a copy.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from memstore.errors import InvalidInputError

__all__ = [
    "Conversation",
    "EvidenceSummary",
    "Question",
    "Turn",
    "load_locomo",
    "parse_evidence",
    "parse_locomo",
    "parse_session_date",
    "summarize_evidence",
]


@dataclass(frozen=True)
class Turn:
    dia_id: str
    speaker: str
    text: str  # image turns end with " [image: <caption>]"
    session_index: int
    occurred_at: datetime  # session time + i seconds, UTC
    image_caption: str | None = None


@dataclass(frozen=True)
class Question:
    question: str
    answer: str  # "" for adversarial questions (category 5), which have none
    category: int
    evidence: list[str]  # normalised "D<int>:<int>" ids present in the conversation
    skipped_evidence: list[str]  # unparseable raw pieces, or ids of no turn
    adversarial_answer: str | None = None
    raw_evidence: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Conversation:
    sample_id: str
    speaker_a: str
    speaker_b: str
    turns: list[Turn]
    questions: list[Question]


_SESSION_KEY = re.compile(r"session_(\d+)")
# Tolerant of the known slips: "D:11:26" (extra colon), zero padding, spaces.
_EVIDENCE_ID = re.compile(r"D\s*:?\s*(\d+)\s*:\s*(\d+)", re.IGNORECASE)
_EVIDENCE_SPLIT = re.compile(r"[;,\s]+(?=D)|[;,]", re.IGNORECASE)
_DATE_FORMATS = ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y", "%I:%M%p on %d %B, %Y")


def parse_evidence(raw: list[str]) -> tuple[list[str], list[str]]:
    """Split and normalise evidence ids: ``(valid, unparseable)``.

    A raw entry may hold several ids ("D8:6; D9:17", "D10:19,D10:20") or a
    slip ("D:11:26" → "D11:26", " D3:5 "). Valid ids come out as
    ``D<int>:<int>`` without zero padding, deduplicated in order; pieces that
    are not an id are returned stripped, in order, in the second list.
    """
    valid: list[str] = []
    bad: list[str] = []
    for entry in raw:
        if not isinstance(entry, str):
            bad.append(repr(entry))
            continue
        for piece in _EVIDENCE_SPLIT.split(entry):
            piece = piece.strip()
            if not piece:
                continue
            m = _EVIDENCE_ID.fullmatch(piece)
            if m is None:
                bad.append(piece)
                continue
            norm = f"D{int(m.group(1))}:{int(m.group(2))}"
            if norm not in valid:
                valid.append(norm)
    return valid, bad


def parse_session_date(text: str) -> datetime:
    """Parse a LoCoMo session date ("1:56 pm on 8 May, 2023") as UTC.

    The data carries no time zone; UTC keeps the stored instant equal to the
    wall-clock time written in the data.
    """
    cleaned = " ".join(text.split()).upper()  # %p and %B match case-insensitively
    for fmt in _DATE_FORMATS:
        try:
            return datetime.strptime(cleaned, fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
    raise InvalidInputError(f"unrecognised LoCoMo session date: {text!r}")


def _str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise InvalidInputError(f"{what}: expected a string, got {type(value).__name__}")
    return value


def _turns(sample_id: str, conv: dict[str, Any]) -> list[Turn]:
    sessions = sorted(
        (int(m.group(1)), key)
        for key in conv
        if (m := _SESSION_KEY.fullmatch(key)) and isinstance(conv[key], list)
    )
    turns: list[Turn] = []
    for index, key in sessions:
        raw_date = conv.get(f"{key}_date_time")
        if not isinstance(raw_date, str):
            raise InvalidInputError(f"{sample_id}: {key} has no {key}_date_time")
        start = parse_session_date(raw_date)
        for i, raw in enumerate(conv[key]):
            where = f"{sample_id} {key}[{i}]"
            if not isinstance(raw, dict):
                raise InvalidInputError(f"{where}: a turn must be an object")
            text = _str(raw.get("text", ""), f"{where}.text")
            caption = raw.get("blip_caption")
            caption = caption.strip() if isinstance(caption, str) and caption.strip() else None
            if caption is not None:
                # Keep the caption searchable: the question is often about
                # what the picture showed, not what was typed next to it.
                text = f"{text} [image: {caption}]" if text else f"[image: {caption}]"
            dia_id = _str(raw.get("dia_id"), f"{where}.dia_id")
            # Normalised like evidence ids, so "D01:3" in a turn still matches.
            ids, _ = parse_evidence([dia_id])
            turns.append(
                Turn(
                    dia_id=ids[0] if len(ids) == 1 else dia_id.strip(),
                    speaker=_str(raw.get("speaker"), f"{where}.speaker"),
                    text=text,
                    session_index=index,
                    # One second apart keeps the turn order in time order.
                    occurred_at=start + timedelta(seconds=i),
                    image_caption=caption,
                )
            )
    return turns


def _answer(value: Any) -> str:
    # Answers are mostly strings, a few are bare numbers (a year).
    return "" if value is None else str(value)


def _questions(sample_id: str, qa: Any, dia_ids: set[str]) -> list[Question]:
    if not isinstance(qa, list):
        raise InvalidInputError(f"{sample_id}: qa must be a list")
    out: list[Question] = []
    for i, raw in enumerate(qa):
        where = f"{sample_id} qa[{i}]"
        if not isinstance(raw, dict):
            raise InvalidInputError(f"{where}: a question must be an object")
        category = raw.get("category")
        if not isinstance(category, int) or isinstance(category, bool):
            raise InvalidInputError(f"{where}: category must be an integer")
        raw_evidence = raw.get("evidence") or []
        if not isinstance(raw_evidence, list):
            raw_evidence = [raw_evidence]
        valid, bad = parse_evidence(raw_evidence)
        # An id that names no turn can never be retrieved; scoring it would
        # lower recall for a data error, so it is reported instead.
        dangling = [e for e in valid if e not in dia_ids]
        adversarial = raw.get("adversarial_answer")
        out.append(
            Question(
                question=_str(raw.get("question"), f"{where}.question"),
                answer=_answer(raw.get("answer")),
                category=category,
                evidence=[e for e in valid if e in dia_ids],
                skipped_evidence=bad + dangling,
                adversarial_answer=None if adversarial is None else str(adversarial),
                raw_evidence=[str(e) for e in raw_evidence],
            )
        )
    return out


def parse_locomo(data: Any) -> list[Conversation]:
    """Conversations from already-decoded LoCoMo JSON (a list of samples,
    or one sample)."""
    samples = [data] if isinstance(data, dict) else data
    if not isinstance(samples, list):
        raise InvalidInputError("LoCoMo data must be a list of samples")
    conversations: list[Conversation] = []
    for n, sample in enumerate(samples):
        if not isinstance(sample, dict) or not isinstance(sample.get("conversation"), dict):
            raise InvalidInputError(f"sample {n}: expected an object with a 'conversation'")
        sample_id = str(sample.get("sample_id", f"sample-{n}"))
        conv = sample["conversation"]
        turns = _turns(sample_id, conv)
        dia_ids = {t.dia_id for t in turns}
        conversations.append(
            Conversation(
                sample_id=sample_id,
                speaker_a=_str(conv.get("speaker_a"), f"{sample_id}.speaker_a"),
                speaker_b=_str(conv.get("speaker_b"), f"{sample_id}.speaker_b"),
                turns=turns,
                questions=_questions(sample_id, sample.get("qa", []), dia_ids),
            )
        )
    return conversations


def load_locomo(path: str | os.PathLike[str]) -> list[Conversation]:
    """Read a LoCoMo JSON file (the public one or a subset of it)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, json.JSONDecodeError) as exc:
        raise InvalidInputError(f"cannot read LoCoMo file {os.fspath(path)!r}: {exc}") from exc
    return parse_locomo(data)


@dataclass(frozen=True)
class EvidenceSummary:
    """How the raw evidence entries of a data set were read (for the report)."""

    entries: int  # raw strings in all "evidence" lists
    clean: int  # already exactly one well-formed id
    repaired: int  # split or fixed into well-formed ids
    unparseable: int  # pieces that are no id at all
    dangling: int  # well-formed ids that name no turn
    questions_without_evidence: int  # nothing usable left to score against


def summarize_evidence(conversations: list[Conversation]) -> EvidenceSummary:
    entries = clean = repaired = unparseable = dangling = empty = 0
    for conv in conversations:
        for q in conv.questions:
            for raw in q.raw_evidence:
                entries += 1
                valid, bad = parse_evidence([raw])
                unparseable += len(bad)
                if valid == [raw]:
                    clean += 1
                elif valid:
                    repaired += 1
            dangling += len(q.skipped_evidence) - len(parse_evidence(q.raw_evidence)[1])
            empty += not q.evidence
    return EvidenceSummary(entries, clean, repaired, unparseable, dangling, empty)
