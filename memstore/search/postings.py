"""In-memory postings of large users' messages, for keyword search.

A user with 100k messages asks FTS5 for every message matching any query
term and ranks them all: ``bm25()`` over ~100k matches measured p95 ~25 ms
on a quiet machine, over the whole hybrid budget of 20 ms. This module keeps,
for each user with at least ``MIN_DOCS`` messages, what BM25 reads from
FTS5's index as numpy arrays: per term (column, token) the messages holding
it and how often, and each message's length. BM25 then costs one array
operation per query term over that term's postings, and the top k comes from
``argpartition``: no SQL for the ranking at all.

The ranking is memstore.search.bm25's, figure for figure: the same formula
(FTS5's, summed in phrase order), the user's own statistics, ties by id.
Tokens are the FTS5 columns' tokens (memstore.derive.messages.columns'
``message_tokens``, tested against the functions that define the columns,
which are tested against FTS5's own tokens); a copy whose token total
differs from what the store counted for the user (``l0_user_slots.tokens``)
is never used: the SQL path answers.
Phrases of several tokens (which need positions) also go to SQL.

Kept current the way the vector copies are (memstore.vectors.hot), from the
one thing L0 guarantees: its rows are only appended (ids in log order) or
cleared and replayed (a rebuild, an erasure, which may renumber). A copy
remembers the user's slot, message and token totals and its last message
(id, session, message id). A search whose snapshot shows the same totals and
the same last message uses the copy; larger totals read only the rows after
that message and check that they add up; anything else (a rebuild moved
ids, the user was erased) reloads. A copy whose user no longer has that slot
(an erasure) leaves memory at the next search of any user; least recently
used copies leave it past ``MAX_BYTES``.
"""

from __future__ import annotations

import bisect
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sqlalchemy import Connection

from memstore.db.sqlfn import in_list
from memstore.derive.messages.columns import labelled_sql, message_tokens
from memstore.logtext import loggable

# Users with fewer messages stay on SQL, where the ranking reads each
# matched message's row: at 1k messages of conversation-like text a search
# from SQL cost ~7 ms of CPU, several times FTS5's own bm25() over a table of
# that user alone, against ~0.2 ms from a copy (~1.4 MB, ~75 ms to load in
# the background). Below a few hundred messages SQL is cheap.
MIN_DOCS = 500
# Bytes of postings kept per process; least recently used copies go first.
MAX_BYTES = 256 * 1024 * 1024
# Small segments appended since the last merge; past this they are merged.
_MAX_SEGMENTS = 8

Array = np.ndarray[Any, Any]

log = logging.getLogger("memstore.search")

# Only indexed messages (up to the keyword cursor), as the totals in
# l0_user_slots count them; the ranking adds the waiting ones
# (memstore.search.tail). The text as FTS5 indexed it, with the speaker's
# name (a copy of the bare text never added up for a host that passes names
# as metadata, and those users stayed on SQL).
_ROWS = (
    f"SELECT m.id, m.session_id, m.message_id, {labelled_sql('m')} FROM l0_messages m "
    "WHERE m.user_id = :u AND m.id > :after "
    "AND m.id <= (SELECT through FROM l0_keyword_cursor) ORDER BY m.id"
)
_LAST = "SELECT user_id, session_id, message_id FROM l0_messages WHERE id = :i"
_STATS = "SELECT slot, docs, tokens FROM l0_user_slots WHERE user_id = :u"
# Cached users per look-up of their slots (well under SQLite's parameter limit).
_SLOTS_CHUNK = 500
# More new messages than this are read in the background like a first load.
_MAX_SYNC_DELTA = 2_000


@dataclass(frozen=True)
class _Segment:
    """Postings of some messages: ``terms`` (sorted global term ids) with
    ``offsets`` into ``docs`` (indexes into the copy's message arrays) and
    ``tfs`` (occurrences in the message)."""

    terms: Array
    offsets: Array
    docs: Array
    tfs: Array

    @property
    def nbytes(self) -> int:
        return int(self.terms.nbytes + self.offsets.nbytes + self.docs.nbytes + self.tfs.nbytes)

    def postings(self, term: int) -> tuple[Array, Array] | None:
        i = int(np.searchsorted(self.terms, term))
        if i == len(self.terms) or int(self.terms[i]) != term:
            return None
        lo, hi = int(self.offsets[i]), int(self.offsets[i + 1])
        return self.docs[lo:hi], self.tfs[lo:hi]


def _segment(term_ids: Array, doc_ids: Array) -> _Segment:
    """A segment from one (term, message) pair per token occurrence."""
    if len(term_ids) == 0:
        empty = np.zeros(0, dtype=np.int64)
        return _Segment(empty, np.zeros(1, dtype=np.int64), empty, empty.astype(np.float64))
    key = (term_ids.astype(np.int64) << 32) | doc_ids.astype(np.int64)
    pairs, counts = np.unique(key, return_counts=True)
    terms_all = pairs >> 32
    terms, starts = np.unique(terms_all, return_index=True)
    offsets = np.append(starts, len(pairs)).astype(np.int64)
    return _Segment(
        terms, offsets, (pairs & 0xFFFFFFFF).astype(np.int32), counts.astype(np.float64)
    )


def _merge(segments: list[_Segment]) -> _Segment:
    terms = np.concatenate([np.repeat(s.terms, np.diff(s.offsets)) for s in segments])
    docs = np.concatenate([s.docs for s in segments])
    tfs = np.concatenate([s.tfs for s in segments])
    order = np.lexsort((docs, terms))
    terms, docs, tfs = terms[order], docs[order], tfs[order]
    first, starts = np.unique(terms, return_index=True)
    return _Segment(first, np.append(starts, len(terms)).astype(np.int64), docs, tfs)


@dataclass
class _Vocabulary:
    """Global term ids of one copy: (column, token) -> id; grows only."""

    ids: dict[tuple[int, str], int] = field(default_factory=dict)
    # Sorted tokens per column, for prefix terms; rebuilt when the vocabulary grew.
    _sorted: dict[int, tuple[int, list[str]]] = field(default_factory=dict)

    def id_of(self, column: int, token: str) -> int:
        key = (column, token)
        got = self.ids.get(key)
        if got is None:
            got = self.ids[key] = len(self.ids)
        return got

    def prefixed(self, column: int, prefix: str) -> list[int]:
        known = self._sorted.get(column)
        if known is None or known[0] != len(self.ids):
            # list(): one step under the GIL, while a search's extension may
            # add terms (iterating the dict itself could see it change size).
            keys = list(self.ids)
            known = (len(keys), sorted(t for c, t in keys if c == column))
            self._sorted[column] = known
        words = known[1]
        i = bisect.bisect_left(words, prefix)
        out = []
        while i < len(words) and words[i].startswith(prefix):
            out.append(self.ids[(column, words[i])])
            i += 1
        return out


@dataclass(frozen=True)
class Copy:
    """One user's postings as of its last message (see the module doc)."""

    slot: int
    docs: int
    tokens: int
    last: tuple[int, str, str]  # (id, session_id, message_id) of the last message
    ids: Array  # l0_messages ids, ascending
    lengths: Array  # tokens per message (float64)
    sessions: Array  # session code per message (int32)
    session_codes: dict[str, int]
    vocab: _Vocabulary
    segments: tuple[_Segment, ...]
    # Per-copy arrays the ranking derives once (BM25's length norms).
    derived: dict[str, Array] = field(default_factory=dict, compare=False)

    @property
    def nbytes(self) -> int:
        arrays = self.ids.nbytes + self.lengths.nbytes + self.sessions.nbytes
        return int(arrays + sum(s.nbytes for s in self.segments) + 80 * len(self.vocab.ids))

    def postings(self, column: int, token: str, prefix: bool) -> tuple[Array, Array]:
        """(message indexes, occurrences) of a one-token phrase; a prefix
        term sums the occurrences of every token it matches."""
        if prefix:
            terms = self.vocab.prefixed(column, token)
        else:
            got = self.vocab.ids.get((column, token))
            terms = [] if got is None else [got]
        docs, tfs = [], []
        for seg in self.segments:
            for term in terms:
                hit = seg.postings(term)
                if hit is not None:
                    docs.append(hit[0])
                    tfs.append(hit[1])
        if not docs:
            return np.zeros(0, dtype=np.int32), np.zeros(0)
        if len(docs) == 1:
            return docs[0], tfs[0]
        all_docs, all_tfs = np.concatenate(docs), np.concatenate(tfs)
        uniq, inverse = np.unique(all_docs, return_inverse=True)
        return uniq, np.bincount(inverse, weights=all_tfs)


def _tokenise(rows: list[Any], vocab: _Vocabulary, first_doc: int) -> tuple[_Segment, Array, int]:
    """Postings and lengths of ``rows`` (id, session, message_id, text), the
    first numbered ``first_doc``; also their token total."""
    term_ids: list[int] = []
    doc_ids: list[int] = []
    lengths = np.zeros(len(rows))
    id_of = vocab.id_of
    for d, row in enumerate(rows):
        # The columns' tokens from one tokenising of the text: a copy of a
        # 1k-message user of chat text is built in half the CPU of deriving
        # the columns with memstore.text's functions and tokenising them again.
        n, columns = message_tokens(row[3])
        for column, tokens in enumerate(columns):
            term_ids.extend([id_of(column, t) for t in tokens])
        doc_ids.extend([first_doc + d] * n)
        lengths[d] = n
    seg = _segment(np.array(term_ids, dtype=np.int64), np.array(doc_ids, dtype=np.int64))
    return seg, lengths, int(lengths.sum())


def _session_codes(rows: list[Any], codes: dict[str, int]) -> Array:
    return np.array([codes.setdefault(r[1], len(codes)) for r in rows], dtype=np.int32)


def build(raw: Any, user_id: str, slot: int, docs: int, tokens: int) -> Copy | None:
    """A copy of the user's postings read through the DB-API connection
    ``raw`` (the caller's snapshot), or None when it disagrees with the
    store's totals (the SQL path answers then)."""
    rows = raw.execute(_ROWS, {"u": user_id, "after": 0}).fetchall()
    if len(rows) != docs or not rows:
        return None
    vocab = _Vocabulary()
    seg, lengths, total = _tokenise(rows, vocab, 0)
    if total != tokens:
        return None
    codes: dict[str, int] = {}
    sessions = _session_codes(rows, codes)
    last = rows[-1]
    return Copy(
        slot,
        docs,
        tokens,
        (int(last[0]), last[1], last[2]),
        np.array([r[0] for r in rows], dtype=np.int64),
        lengths,
        sessions,
        codes,
        vocab,
        (seg,),
    )


def _extend(raw: Any, user_id: str, copy: Copy, docs: int, tokens: int) -> Copy | None:
    """``copy`` with the user's messages after its last one, or None when
    they do not add up to the store's totals."""
    rows = raw.execute(_ROWS, {"u": user_id, "after": copy.last[0]}).fetchall()
    if copy.docs + len(rows) != docs or not rows:
        return None
    seg, lengths, total = _tokenise(rows, copy.vocab, copy.docs)
    if copy.tokens + total != tokens:
        return None
    codes = copy.session_codes  # only grows; older copies ignore new codes
    segments = (*copy.segments, seg)
    if len(segments) > _MAX_SEGMENTS:
        # The small ones into one; into the first too once they are a tenth of it.
        small = _merge(list(segments[1:]))
        big = segments[0]
        segments = (_merge([big, small]),) if len(small.docs) * 10 > len(big.docs) else (big, small)
    last = rows[-1]
    return Copy(
        copy.slot,
        docs,
        tokens,
        (int(last[0]), last[1], last[2]),
        np.concatenate([copy.ids, np.array([r[0] for r in rows], dtype=np.int64)]),
        np.concatenate([copy.lengths, lengths]),
        np.concatenate([copy.sessions, _session_codes(rows, codes)]),
        codes,
        copy.vocab,
        segments,
    )


class HotPostings:
    """Process-local, thread-safe cache of large users' postings.

    ``background``: how a builder thread opens a read transaction (the
    store's ``Database.read``). With it, loading a copy (~40 us a message: 4 s
    of CPU at 100k) runs in a thread while searches keep answering from SQL;
    without it (tests), the search that needs the copy loads it."""

    def __init__(
        self,
        min_docs: int | None = None,
        max_bytes: int | None = None,
        background: Callable[[], AbstractContextManager[Connection]] | None = None,
    ) -> None:
        self.min_docs = MIN_DOCS if min_docs is None else min_docs
        self.max_bytes = MAX_BYTES if max_bytes is None else max_bytes
        self.background = background
        self._copies: OrderedDict[str, Copy] = OrderedDict()
        # Users whose copy disagreed with the store at these totals: SQL for them.
        self._refused: dict[str, tuple[int, int, int]] = {}
        self._building: dict[str, threading.Thread] = {}
        self._lock = threading.Lock()

    def cached_users(self) -> list[str]:
        with self._lock:
            return list(self._copies)

    def forget(self, user_id: str | None = None) -> None:
        with self._lock:
            for key in [k for k in self._copies if user_id is None or k == user_id]:
                del self._copies[key]
            self._refused.clear()

    def wait(self) -> None:
        """Until the copies being loaded in the background are loaded."""
        while True:
            with self._lock:
                threads = list(self._building.values())
            if not threads:
                return
            for t in threads:
                t.join()

    def current(self, raw: Any, user_id: str, slot: int, docs: int, tokens: int) -> Copy | None:
        """The user's copy as of the caller's snapshot (``raw``, the DB-API
        connection of its read transaction), or None for SQL: a small user,
        one whose copy is being loaded, or one whose copy cannot be made to
        agree with the store."""
        state = (slot, docs, tokens)
        with self._lock:
            self._drop_erased(raw, user_id)
            if docs < self.min_docs:
                return None
            if self._refused.get(user_id) == state or user_id in self._building:
                return None
            copy = self._copies.get(user_id)
            if copy is not None and copy.docs > docs:
                # A snapshot older than the copy (another thread extended it),
                # or the user lost messages: SQL now; a later search decides.
                return None
            if copy is not None and not self._same_history(raw, user_id, copy, slot):
                copy = None
            if copy is not None and docs - copy.docs > _MAX_SYNC_DELTA:
                copy = None
            if copy is not None and (copy.docs, copy.tokens) != state[1:]:
                copy = _extend(raw, user_id, copy, docs, tokens)
            if copy is None and self.background is not None:
                self._copies.pop(user_id, None)
                if not self._building:
                    # One load at a time: with many users of a few hundred
                    # messages searching at once, parallel loads would hold
                    # the interpreter for all of them; the others stay on SQL
                    # and start theirs at a later search.
                    self._start(user_id)
                return None
            if copy is None:
                copy = build(raw, user_id, slot, docs, tokens)
            return self._keep(user_id, copy, state)

    def _drop_erased(self, raw: Any, user_id: str) -> None:
        """Drop (held lock) the other copies whose user has no messages, or
        other ones, any more: an erased user's words leave memory at the next
        search of anyone, as their vectors do (memstore.vectors.hot). One
        statement for all cached users (one read each cost ~5 us a cached
        user on every search, with a hundred cached users a few times the
        ranking itself)."""
        others = [u for u in self._copies if u != user_id]
        for i in range(0, len(others), _SLOTS_CHUNK):
            chunk = others[i : i + _SLOTS_CHUNK]
            marks, params = in_list(chunk)
            slots = dict(
                raw.execute(
                    f"SELECT user_id, slot FROM l0_user_slots WHERE user_id IN ({marks})", params
                ).fetchall()
            )
            for other in chunk:
                if slots.get(other) != self._copies[other].slot:
                    del self._copies[other]

    def _keep(self, user_id: str, copy: Copy | None, state: tuple[int, int, int]) -> Copy | None:
        """Store ``copy`` (held lock), or remember that none agrees at ``state``."""
        if copy is None:
            self._copies.pop(user_id, None)
            self._refused[user_id] = state
            return None
        known = self._copies.get(user_id) is copy
        self._copies[user_id] = copy
        self._copies.move_to_end(user_id)
        if not known:
            # Summing every copy's size on each search cost more than ranking.
            self._evict()
        return copy

    def _start(self, user_id: str) -> None:
        thread = threading.Thread(
            target=self._load, args=(user_id,), name="memstore-postings", daemon=True
        )
        self._building[user_id] = thread
        thread.start()

    def _load(self, user_id: str) -> None:
        assert self.background is not None
        copy, state = None, None
        try:
            with self.background() as conn:
                raw = conn.connection.driver_connection
                assert raw is not None
                row = raw.execute(_STATS, {"u": user_id}).fetchone()
                if row is not None and int(row[1]) >= self.min_docs:
                    state = (int(row[0]), int(row[1]), int(row[2]))
                    copy = build(raw, user_id, *state)
        except Exception as exc:
            # E.g. the store closed meanwhile: SQL answers, a later search retries.
            log.info("keyword postings of %s not loaded (SQL answers): %s", user_id, loggable(exc))
            state = None
        finally:
            with self._lock:
                self._building.pop(user_id, None)
                if state is not None:
                    self._keep(user_id, copy, state)

    @staticmethod
    def _same_history(raw: Any, user_id: str, copy: Copy, slot: int) -> bool:
        """True when the copy's last message is still the user's, under the
        same id: L0 only appends, unless a rebuild or an erasure replayed it."""
        if copy.slot != slot:
            return False
        row = raw.execute(_LAST, {"i": copy.last[0]}).fetchone()
        return row is not None and (row[0], row[1], row[2]) == (user_id, *copy.last[1:])

    def _evict(self) -> None:
        total = sum(c.nbytes for c in self._copies.values())
        while total > self.max_bytes and len(self._copies) > 1:
            _, old = self._copies.popitem(last=False)
            total -= old.nbytes
