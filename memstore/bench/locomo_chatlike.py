"""A chat-like variant of LoCoMo: an assistant's content-free replies between the turns.

Real agent transcripts are full of short acknowledgements ("Noted.", "Got it 👍")
that carry no information but sit next to every fact and, being short and
generic, end up close to every query in embedding space. LoCoMo is two people
talking, so it has none of them; this variant inserts such replies from a
third speaker, deterministically, so retrieval and recall can be measured with
the noise present and compared with the clean data.

Inserted turns are never evidence: their ids carry a suffix no evidence id can
have (``D3:7~ack``), the questions are left untouched, and each one's time
lies strictly between the turn it follows and the next turn of the session.
"""

from __future__ import annotations

import random
import zlib
from dataclasses import replace
from datetime import timedelta

from memstore.bench.locomo_data import Conversation, Turn

__all__ = ["FILLER_REPLIES", "FILLER_SPEAKER", "FILLER_SUFFIX", "is_filler_id", "make_chatlike"]

FILLER_SPEAKER = "assistant"
# "~" never occurs in a LoCoMo id, and evidence parsing ("D<n>:<n>") cannot produce it.
FILLER_SUFFIX = "~ack"
# Share of turns followed by a filler reply: enough to matter, as in an
# assistant that acknowledges often without answering every message.
FILLER_RATE = 0.35

# Acknowledgements, pleasantries, emoji-only and one-word replies of the kind
# chat assistants produce; none says anything about the conversation.
FILLER_REPLIES: tuple[str, ...] = (
    "Good to know!",
    "Noted.",
    "Got it 👍",
    "ok",
    "Okay.",
    "Thanks for sharing!",
    "Thank you for letting me know.",
    "👍",
    "😊",
    "🙂👍",
    "❤️",
    "Sure!",
    "Sounds good.",
    "I see.",
    "Cool!",
    "Great!",
    "Nice!",
    "Interesting!",
    "Understood.",
    "Of course.",
    "Absolutely!",
    "That's great to hear!",
    "Got it, thanks!",
    "Makes sense.",
    "Alright.",
    "Wow!",
    "Haha 😄",
    "Good to hear.",
    "Thanks!",
    "You're welcome!",
    "Have a nice day!",
    "I'll keep that in mind.",
    "Okay, noted 👌",
    "Sounds lovely!",
    "Happy to help!",
)


def is_filler_id(dia_id: str) -> bool:
    return dia_id.endswith(FILLER_SUFFIX)


def _rng(sample_id: str, seed: int) -> random.Random:
    # crc32, not hash(): str hashes change between processes, this must not.
    return random.Random(zlib.crc32(f"{seed}:{sample_id}".encode()))


def _filler_time(turn: Turn, nxt: Turn | None) -> timedelta:
    """Offset after ``turn``: halfway to the next turn of the same session (or 1 s)."""
    if nxt is not None and nxt.session_index == turn.session_index:
        gap = nxt.occurred_at - turn.occurred_at
        if gap > timedelta(0):
            return gap / 2
    return timedelta(milliseconds=500)


def make_chatlike(conversations: list[Conversation], seed: int = 0) -> list[Conversation]:
    """The same conversations with filler replies inserted after some turns.

    Deterministic in (``seed``, sample id, turns). Questions, speakers and
    the original turns are unchanged; the inputs are not modified.
    """
    out: list[Conversation] = []
    for conv in conversations:
        rng = _rng(conv.sample_id, seed)
        turns: list[Turn] = []
        for i, turn in enumerate(conv.turns):
            turns.append(turn)
            if rng.random() >= FILLER_RATE:
                continue
            nxt = conv.turns[i + 1] if i + 1 < len(conv.turns) else None
            turns.append(
                Turn(
                    dia_id=f"{turn.dia_id}{FILLER_SUFFIX}",
                    speaker=FILLER_SPEAKER,
                    text=rng.choice(FILLER_REPLIES),
                    session_index=turn.session_index,
                    occurred_at=turn.occurred_at + _filler_time(turn, nxt),
                )
            )
        out.append(replace(conv, turns=turns))
    return out
