"""What differs between the engines memstore stores in, as one interface.

Everything above the storage layer writes portable SQLAlchemy Core or plain
SQL both engines read alike, and asks its connection's backend
(:func:`memstore.db.backend.of`) for the rest: how a statement is spelled
where the engines differ, how vectors are stored and searched, how the
full-text tables are maintained, how a replay loads in bulk, how an erasure
is compacted. A backend holds no state of its own (one instance per engine
serves every database of that engine); the ``Database`` it is given or the
connection it is handed carries the state.

To add an engine: subclass :class:`Backend`, implement every abstract
method, register the instance in ``memstore.db.backend.BACKENDS`` under the
SQLAlchemy dialect name, give it a ``Database`` subclass (``memstore.db``)
and a URL scheme (``memstore.db.target``), and run the contract suite
(``tests/contract/``) on it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from sqlalchemy import Connection, Engine
from sqlalchemy.sql.elements import ColumnElement

from memstore.errors import ConfigError, StorageError

if TYPE_CHECKING:
    import numpy as np

    # numpy is imported where vectors are read, not with the backend: commands
    # that never touch a vector (``memstore users list``) start without it.
    Array = np.ndarray[Any, Any]


class Storage(Protocol):
    """What a backend uses of a ``memstore.db.Database`` (which implements it)."""

    engine: Engine
    path: Path
    busy_timeout_ms: int
    driver_errors: tuple[type[Exception], ...]

    def read(self) -> AbstractContextManager[Connection]: ...

    def write(self) -> AbstractContextManager[Connection]: ...

    def exclusive_connection(self) -> AbstractContextManager[Connection]: ...

    def translate_error(self, err: Exception, what: str = "database") -> StorageError: ...

    def vec_version(self) -> str: ...


@dataclass(frozen=True)
class CompactionResult:
    """Whether an erasure's compaction finished, and what to tell the user.
    ``done``: the job is finished (no marker left). ``residue``: finished, yet
    erased bytes may remain in the data files (PostgreSQL's plain VACUUM only
    marks dead rows' space reusable)."""

    done: bool
    detail: str = ""
    residue: bool = False

    @property
    def bytes_gone(self) -> bool:
        return self.done and not self.residue


@dataclass(frozen=True)
class Partition:
    """A user's vectors in a space: ``ids[i]`` owns row ``i`` of the blocks
    taken together; ``dead`` marks slots whose rows were deleted (None: all
    live). Blocks are float32, ``dims`` wide."""

    ids: Array
    blocks: list[Array]
    dead: Array | None


class Backend(ABC):
    """The engine-specific half of memstore's storage (see the module doc)."""

    name: str
    """The SQLAlchemy dialect name this backend serves."""

    keyword_index: str
    """Which full-text index the schema keeps for keyword search: ``"fts5"``
    (FTS5 tables ranked with memstore's own BM25, memstore.search.bm25) or
    ``"tsvector"`` (a weighted tsvector with a GIN index,
    memstore.search.keyword_pg). Search picks its keyword ranking by it."""

    # -- SQL spelling ---------------------------------------------------------

    @abstractmethod
    def json_text(self, column: Any, key: str) -> ColumnElement[Any]:
        """The text of top-level ``key`` in a JSON text column (events.payload)."""

    @abstractmethod
    def json_text_sql(self, column: str, key: str) -> str:
        """:meth:`json_text` as SQL text, for statements sent to the driver
        (``key``: a fixed name, written into the statement)."""

    @abstractmethod
    def by_primary_key(self, column: str) -> str:
        """``column`` written so that a test on it does not steer the planner
        to the column's secondary indexes (the rows are looked up by primary
        key, and the test only filters them)."""

    @abstractmethod
    def claim_lock(self) -> str:
        """The clause appended to a SELECT of queue rows that the same
        transaction then updates, so concurrent claimers do not both see them
        free ("" where the write transaction already excludes other writers)."""

    @abstractmethod
    def claim_skip_locked(self) -> str:
        """``claim_lock`` for a claim that takes the first free row: rows
        another claimer holds are skipped, not waited for."""

    # -- full-text maintenance ------------------------------------------------

    @abstractmethod
    def fts_clear(self, conn: Connection, table: str, *, contentless: bool) -> None:
        """Empty a full-text table before a replay refills it. ``contentless``:
        the table keeps no copy of the text (FTS5 ``content=''``)."""

    @abstractmethod
    def fts_optimize(self, conn: Connection, table: str) -> None:
        """Rewrite a full-text index so no deleted row's terms remain in it
        (after an erasure)."""

    @abstractmethod
    def fts_merge_step(self, conn: Connection, table: str, pages: int, usermerge: int) -> bool:
        """One bounded merge of a full-text index's segments; True if the
        engine did any work (memstore.text.fts_tidy)."""

    merges_fts: bool
    """Whether the full-text indexes grow segments that ``fts_merge_step``
    merges (False: there is nothing to tidy)."""

    # -- bulk loading ---------------------------------------------------------

    @abstractmethod
    def bulk_load(
        self, conn: Connection, deferred_indexes: Sequence[str], fts_tables: Sequence[str] = ()
    ) -> AbstractContextManager[None]:
        """Around a replay inside ``conn``'s transaction: whatever makes many
        inserts cheaper (``deferred_indexes`` may be dropped and created again
        before the block ends; ``fts_tables``, the full-text tables the replay
        fills, may be tuned for it), undone either way."""

    # -- vectors --------------------------------------------------------------

    vector_elements: tuple[str, ...] = ("float32",)
    """The element types its vector tables can store (memstore.db.elements);
    every method below takes and returns float32 whatever the table stores, and
    ``element`` is the table's own (the space records it)."""

    @abstractmethod
    def create_vector_table(
        self, conn: Connection, table: str, kind: str, dims: int, element: str = "float32"
    ) -> None:
        """The table of one vector space (``kind``: "l0" or "l1")."""

    @abstractmethod
    def write_vectors(
        self,
        conn: Connection,
        table: str,
        kind: str,
        rows: list[dict[str, Any]],
        element: str = "float32",
    ) -> None:
        """Insert or replace vectors; ``rows``: id, u (user), m0[, m1] (the
        kind's filter columns) and v (a float32 blob)."""

    @abstractmethod
    def vector_knn(
        self,
        conn: Connection,
        table: str,
        kind: str,
        user_id: str,
        query: bytes,
        k: int,
        filters: dict[str, str],
        element: str = "float32",
    ) -> list[tuple[int, float]]:
        """The user's ``k`` nearest rows as (id, cosine distance), nearest
        first; ``filters``: filter column -> required value. ``query`` is a
        float32 blob; an int8 table is searched with it quantised, so its
        distances are approximate (the caller re-scores the rows)."""

    @abstractmethod
    def vectors_by_id(
        self, conn: Connection, table: str, ids: list[int], element: str = "float32"
    ) -> dict[int, bytes]:
        """Float32 blobs of the given rows (missing rows are left out; int8
        vectors scaled to unit length)."""

    @abstractmethod
    def vector_partition(
        self, conn: Connection, table: str, user_id: str, dims: int, element: str = "float32"
    ) -> Partition:
        """All of a user's vectors in a space, read in bulk (in-memory copies)."""

    @abstractmethod
    def vectors_after(
        self,
        conn: Connection,
        table: str,
        user_id: str,
        dims: int,
        after: int,
        upto: int,
        element: str = "float32",
    ) -> tuple[Array, Array, Array | None]:
        """(ids, float32 matrix, session ids or None) of the user's L0 vectors
        with ``after < id <= upto``, in id order."""

    @abstractmethod
    def copy_vectors(
        self,
        conn: Connection,
        old: str,
        new: str,
        kind: str,
        dims: int,
        moved: dict[int, int],
        element: str = "float32",
    ) -> int:
        """Fill the new table ``new`` with the vectors of ``old`` whose ids
        survive (``moved``: old id -> new id) and drop ``old``; returns how many
        vectors were left behind. No erased vector's bytes stay in ``new``."""

    def convert_vectors(
        self, conn: Connection, old: str, new: str, kind: str, dims: int, elements_: tuple[str, str]
    ) -> int:
        """Fill the new table ``new`` with every vector of ``old`` stored as
        ``elements_[1]`` instead of ``elements_[0]``, and drop ``old``;
        returns how many were copied."""
        raise ConfigError(
            f"the {self.name} backend stores vectors as {' or '.join(self.vector_elements)} only"
        )

    # -- erasure and the database as a whole ----------------------------------

    @abstractmethod
    def compact_after_erasure(self, db: Storage, *, wait_s: float, full: bool) -> CompactionResult:
        """Remove what an erasure deleted from the database's files, waiting at
        most about ``wait_s`` for readers of older snapshots; ``full`` asks for
        the thorough variant where the engine has two."""

    @abstractmethod
    def versions(self, db: Storage) -> dict[str, Any]:
        """What ``memstore doctor`` reports about the engine and its extensions."""

    @abstractmethod
    def size_bytes(self, db: Storage) -> int:
        """The bytes the database occupies (benchmarks)."""
