"""Which upstream L1 records the upstream still serves: its ``vectors.db``.

The upstream's ``records/*.jsonl`` is append-only. When it merges or updates
memories it appends the new record and deletes the old ones from its
SQLite store, ``vectors.db`` (table ``l1_records``, one row per live record,
keyed by ``record_id``); a deleted memory is removed from there too, while
its lines stay in the JSONL until a periodic clean-up. So a record whose
latest line is in the JSONL but whose id is not in ``l1_records`` is one the
upstream no longer serves, and importing it would bring it back.

When ``vectors.db`` is present, only live records are imported. The others
are counted as *merged* when a live record's timestamp trail (``timestamps``,
which the upstream writes as the union of the merged records' trails) holds
one of theirs, else as *deleted*; the split only labels the report, both
are skipped. Without ``vectors.db`` every record's latest line counts as live,
as before. L0 messages are read from ``conversations/`` as they are.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, Protocol, TypeVar

from memstore.errors import InvalidInputError

VECTORS_DB = "vectors.db"


class Trailed(Protocol):
    """An upstream record as far as liveness goes (``upstream.Record``)."""

    @property
    def id(self) -> str: ...
    @property
    def timestamps(self) -> tuple[str, ...]: ...


R = TypeVar("R", bound=Trailed)


@dataclass
class Liveness(Generic[R]):
    live: list[R] = field(default_factory=list)
    merged: list[R] = field(default_factory=list)
    deleted: list[R] = field(default_factory=list)


def live_record_ids(path: Path) -> set[str]:
    """The ids in ``l1_records``, read without writing anything (read-only URI)."""
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            return {str(r[0]) for r in conn.execute("SELECT record_id FROM l1_records")}
        finally:
            conn.close()
    except sqlite3.Error as e:
        raise InvalidInputError(
            f"cannot read its l1_records table ({e}): no L1 record imported, since without it "
            "merged and deleted records cannot be told from live ones"
        ) from None


def split(records: Sequence[R], live_ids: set[str]) -> Liveness[R]:
    out: Liveness[R] = Liveness()
    trail = {t for r in records if r.id in live_ids for t in r.timestamps}
    for r in records:
        if r.id in live_ids:
            out.live.append(r)
        elif trail.intersection(r.timestamps):
            out.merged.append(r)
        else:
            out.deleted.append(r)
    return out


__all__ = ["VECTORS_DB", "Liveness", "live_record_ids", "split"]
