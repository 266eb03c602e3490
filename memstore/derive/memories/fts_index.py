"""The L1 projection's full-text writes: ``l1_fts`` rows keyed per user.

Memories are searched like messages (memstore.search.bm25_memories): a
keyword match is limited to one user's rowid range, and BM25 runs with that
user's own statistics. So, as for L0 (memstore.derive.messages.projection):

- ``l1_fts`` rowids are ``slot << SLOT_SHIFT | l1_memories.id``, one slot per
  user in ``l1_user_slots``, handed out in order of the user's first memory
  (log order: a rebuild hands out the same slots). L1 has its own slots: a
  user may have memories and no messages, and each projection rebuilds its
  own tables;
- ``l1_user_slots.docs`` / ``tokens`` count the user's ``l1_fts`` rows and
  their tokens — every row FTS5 holds for the user (all generations), which
  is what FTS5's ``bm25()`` counts in a store with one user;
- ``l1_term_repeats`` holds the terms a row has more than once.

Lengths and repeats come from the same one-pass function as L0's
(memstore.derive.messages.columns), so both layers count alike.
"""

from __future__ import annotations

from sqlalchemy import Connection, text

from memstore.db import rawexec
from memstore.derive.messages.columns import message_columns
from memstore.derive.messages.keywords import fts_key

# The statements of every memory added go to the driver (memstore.db.rawexec),
# as the L1 projection's own: they run under the write lock captures wait for.
_SLOT_OF = "SELECT slot FROM l1_user_slots WHERE user_id = ?"
_TOP = text("SELECT coalesce(max(slot), 0) FROM l1_user_slots")
_NEW_SLOT = text("INSERT INTO l1_user_slots (user_id, slot, docs, tokens) VALUES (:u, :s, 0, 0)")
_COUNT = "UPDATE l1_user_slots SET docs = docs + ?, tokens = tokens + ? WHERE user_id = ?"
_FTS_INSERT = "INSERT INTO l1_fts(rowid, text, cjk, stem) VALUES (?, ?, ?, ?)"
_FTS_DELETE = text("DELETE FROM l1_fts WHERE rowid = :k")
_REPEATS_INSERT = "INSERT INTO l1_term_repeats (key, repeats) VALUES (?, ?)"
_REPEATS_DELETE = text("DELETE FROM l1_term_repeats WHERE key = :k")


class MemoryFts:
    """The full-text writes of one ``apply``: rows go in as they come, each
    user's counts once at :meth:`flush` (nothing reads them in between).
    (Buffering the rows to insert them in key order, as L0 does, made no
    difference here: 49 against 50 FTS5 pages after replaying 3,000 memories
    of 30 interleaved users.)"""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._slots: dict[str, int] = {}
        self._counts: dict[str, list[int]] = {}

    def slot(self, user_id: str) -> int:
        """``user_id``'s slot, given the next free one on first use."""
        slot = self._slots.get(user_id)
        if slot is None:
            found = rawexec.scalar(self._conn, _SLOT_OF, (user_id,))
            if found is None:
                found = int(self._conn.execute(_TOP).scalar_one()) + 1
                self._conn.execute(_NEW_SLOT, {"u": user_id, "s": found})
            slot = self._slots[user_id] = int(found)
        return slot

    def add(self, user_id: str, row_id: int, content: str) -> None:
        _, latin, cjk, stem, length, repeats = message_columns(content)
        key = fts_key(self.slot(user_id), row_id)
        rawexec.run(self._conn, _FTS_INSERT, (key, latin, cjk, stem))
        if repeats is not None:
            rawexec.run(self._conn, _REPEATS_INSERT, (key, repeats))
        self._count(user_id, 1, length)

    def remove(self, user_id: str, row_id: int, content: str) -> None:
        """Take out the row ``add`` wrote for ``content`` (its current text)."""
        key = fts_key(self.slot(user_id), row_id)
        if not self._conn.execute(_FTS_DELETE, {"k": key}).rowcount:
            return  # never indexed: nothing to take off the counts
        self._conn.execute(_REPEATS_DELETE, {"k": key})
        self._count(user_id, -1, -message_columns(content)[4])

    def _count(self, user_id: str, docs: int, tokens: int) -> None:
        count = self._counts.setdefault(user_id, [0, 0])
        count[0] += docs
        count[1] += tokens

    def flush(self) -> None:
        for user_id, (docs, tokens) in self._counts.items():
            if docs or tokens:
                rawexec.run(self._conn, _COUNT, (docs, tokens, user_id))
        self._counts.clear()
