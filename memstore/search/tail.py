"""Keyword figures of a user's messages still waiting for their keyword rows.

On SQLite a capture may leave a message's FTS5 row, term repeats and BM25
totals to the background indexer (memstore.derive.messages.keywords); every
message after ``l0_keyword_cursor.through`` is such a message. Keyword search
reads the user's waiting messages (a handful: the indexer runs a moment after
each capture) and derives from their text what the index would hold: whether
each phrase matches, how often, and the message's length, with the functions
that define the FTS5 columns. The ranking adds them to the user's
statistics and scores them with the indexed matches, so the result is the
one the same search gives once the indexer has caught up (tested).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import Connection

from memstore.db.sqlfn import driver_rows
from memstore.derive.messages.columns import message_tokens
from memstore.derive.messages.keywords import indexed_text
from memstore.search.phrases import Phrase, count_phrase, text_counts

Array = np.ndarray[Any, Any]

# The waiting messages are the last ids: read along the primary key (the
# unary + keeps the planner off the user indexes, which would walk all of
# the user's messages to find the few after the cursor).
_WAITING = (
    "SELECT id, session_id, text, speaker FROM l0_messages "
    "WHERE id > (SELECT through FROM l0_keyword_cursor) AND +user_id = :u ORDER BY id"
)


@dataclass(frozen=True)
class Tail:
    """One user's waiting messages as the ranking reads them: ids, which
    phrases each holds (``has``, 0/1 per phrase), how often (``tf``), its
    length in tokens, whether the filters keep it, and the token total."""

    ids: Array
    has: Array
    tf: Array
    lengths: Array
    kept: Array
    tokens: int

    @property
    def docs(self) -> int:
        return len(self.ids)


def waiting(conn: Connection, user_id: str) -> list[Any]:
    """``(id, session_id, text, speaker)`` of the user's waiting messages."""
    return driver_rows(conn, _WAITING, {"u": user_id})


def tail_of(rows: Sequence[Any], phrases: Sequence[Phrase], session_id: str | None) -> Tail:
    """The figures of ``rows`` (from :func:`waiting`) for ``phrases``.

    A phrase whose count the indexed ranking takes from the message's text
    (``Phrase.counted``) is counted the same way here, so both agree."""
    n, p = len(rows), len(phrases)
    has = np.zeros((n, p), dtype=np.int64)
    tf = np.zeros((n, p))
    lengths = np.zeros(n)
    kept = np.ones(n, dtype=bool)
    counted = [i for i, ph in enumerate(phrases) if ph.counted]
    for d, (_id, session, text, speaker) in enumerate(rows):
        length, columns = message_tokens(indexed_text(speaker, text))
        lengths[d] = length
        if session_id is not None and session != session_id:
            kept[d] = False
        for i, ph in enumerate(phrases):
            c = count_phrase(ph, columns[ph.column])
            if c:
                has[d, i] = 1
                tf[d, i] = c
        which = [i for i in counted if has[d, i]]
        if which:
            for i, c in zip(which, text_counts(list(phrases), text, which), strict=True):
                tf[d, i] = max(c, 1)
    return Tail(
        np.array([int(r[0]) for r in rows], dtype=np.int64),
        has,
        tf,
        lengths,
        kept,
        int(lengths.sum()),
    )
