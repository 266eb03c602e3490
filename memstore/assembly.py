"""How one database's parts are put together (the inside of a ``Store``).

The kernel (log, projections, the one append path) at the bottom; search and
the vector indexer beside it; the derivation context over both; the pipeline
over that. The hooks that tie them together are registered here, in one
place: the pipeline queues work inside a capture's transaction and arms its
timers after the commit, the background indexer wakes after every commit,
and erasure purges the pipeline's rows of the erased user.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Sequence

from memstore.config import Settings
from memstore.db.engine import Database
from memstore.derive.context import DeriveContext
from memstore.derive.messages import keywords
from memstore.derive.messages.projection import L0Projection
from memstore.embeddings import Embedder, make_embedder
from memstore.errors import MemstoreError
from memstore.event_types import register_all
from memstore.events.log import StoredEvent
from memstore.kernel import Kernel
from memstore.logtext import loggable
from memstore.pipeline import PipelineService
from memstore.projections.base import Projection
from memstore.search import SearchEngine
from memstore.store_projections import default_projections
from memstore.timeutil import Clock
from memstore.vectors.background import BackgroundIndexer
from memstore.vectors.indexer import Indexer

log = logging.getLogger(__name__)


class Parts:
    def __init__(
        self,
        db: Database,
        settings: Settings,
        projections: Sequence[Projection],
        *,
        clock: Clock,
    ) -> None:
        register_all()  # what this store's log reads, whatever was imported before
        self.kernel = Kernel(db, settings, projections, clock=clock)
        # Vectors live in sqlite-vec tables on SQLite and in pgvector tables on
        # PostgreSQL (memstore.db.backend); both go through the same spaces,
        # indexer and search code.
        self.embedder: Embedder | None = make_embedder(settings)
        self.search_engine = SearchEngine(db, self.embedder, settings)
        self.indexer: Indexer | None = None
        if self.embedder is not None:
            indexer = Indexer(
                db,
                self.embedder,
                clock,
                context_vectors=settings.embedding.context_vectors,
                vector_element=settings.embedding.vector_element,
            )
            self.indexer = indexer
            # Rebuild and erasure rewrite the vector tables: no indexing meanwhile.
            self.kernel.exclusive = lambda: indexer.lock
        self.background: BackgroundIndexer | None = None
        self.derivation = DeriveContext(self.kernel, self.search_engine, self.embedder)
        # Cheap to build: no thread exists until the first timer write.
        self.pipeline: PipelineService | None = None
        if "pipeline_state" in self.kernel.projections.names:
            self.pipeline = PipelineService(self.derivation)
            self.kernel.add_hooks(
                in_transaction=self.pipeline.on_captured,
                on_commit=self.pipeline.after_commit,
                on_erase=self.pipeline.purge_user,
                before_capture=self.pipeline.before_capture,
            )
        self.kernel.add_hooks(on_commit=self._notify_indexer)

    # The kernel's pieces, named here too for code handed the parts (Store.internals).
    @property
    def db(self) -> Database:
        return self.kernel.db

    @property
    def settings(self) -> Settings:
        return self.kernel.settings

    @property
    def clock(self) -> Clock:
        return self.kernel.clock

    def start(self) -> None:
        """After the schema is current: bring the projections up to the log
        (with the keyword rows of messages still waiting), finish an erasure
        an earlier process left half done, then start what the settings ask
        to run in the background (the vector indexer, the pipeline's timers)."""
        k = self.kernel
        with k.db.write() as conn:
            k.projections.bring_current(conn)
        # Keyword rows a process that died left unwritten: a catch-up too.
        self.index_keywords()
        k.compactor.on_open()
        if k.settings.pipeline.background_indexer:
            self.start_background()
        if k.settings.pipeline.scheduler and self.pipeline is not None:
            self.pipeline.start()

    def close(self) -> None:
        """Once background work has stopped: refuse appends, finish a pending
        compaction, and release the database."""
        self.kernel.close()
        # Vector copies still queued would open the file again (vectors.hot).
        self.search_engine.hot.close()
        try:
            self.kernel.compactor.on_close()
        finally:
            self.kernel.db.close()

    def _notify_indexer(self, _stored: list[StoredEvent]) -> None:
        if self.background is not None:
            self.background.notify()

    def _l0(self) -> L0Projection | None:
        if "l0_messages" not in self.kernel.projections.names:
            return None
        p = self.kernel.projections.get("l0_messages")
        return p if isinstance(p, L0Projection) else None

    def index_keywords(
        self, pace: Callable[[float], bool] | None = None, *, arrived_before: bool = False
    ) -> int:
        """Write the keyword rows of every message still waiting for them
        (memstore.derive.messages.keywords), in short transactions; returns
        how many. ``pace(started)`` runs after each transaction (``started``:
        when its batch was read, ``time.monotonic``); True stops the pass.
        ``arrived_before``: stop once the messages stored when the pass began
        are written, rather than when none wait."""
        if self.kernel.db.backend.keyword_index != "fts5":
            return 0
        db = self.kernel.db
        total = 0
        last: int | None = None
        while True:
            started = time.monotonic()
            # Read in a read transaction, derived outside any, written in a
            # short write transaction: under load, deriving a few hundred
            # messages under the write lock held captures up to 90 ms.
            with db.read() as conn:
                if arrived_before and last is None:
                    last = keywords.last_message(conn)
                waiting = keywords.read_waiting(conn, keywords.BATCH)
            if waiting is None:
                return total
            columns = waiting.derive()
            with db.write() as conn:
                done = keywords.write_waiting(conn, waiting, columns)
                if not done:
                    # They changed meanwhile: index under the lock, so each
                    # pass makes progress whatever else writes.
                    done = keywords.index_waiting(conn, keywords.BATCH)
            total += done
            if last is not None and int(waiting.rows[-1][0]) >= last:
                return total
            if pace is not None and pace(started):
                return total

    def defer_keywords(self, on: bool) -> bool:
        """Whether captures leave their messages' keyword rows to
        :meth:`index_keywords` (SQLite only; returns the setting now in
        force). The background indexer turns it on while it runs; a caller
        that turns it on without that thread must call ``index_keywords``."""
        l0 = self._l0()
        if l0 is None or self.kernel.db.backend.keyword_index != "fts5":
            return False
        l0.defer_keywords = on
        return on

    def start_background(self) -> None:
        if self.indexer is not None and self.background is None:
            # Each keyword pass ends with what was stored when it began: under
            # captures that never pause, a pass until none wait never ended,
            # and no vector was written until the captures stopped.
            self.background = BackgroundIndexer(
                self.indexer, keywords=functools.partial(self.index_keywords, arrived_before=True)
            )
            self.background.start()
            # Captures leave their keyword rows to the thread from now on.
            self.defer_keywords(True)

    def stop_background(self) -> None:
        l0 = self._l0()
        self.defer_keywords(False)
        if self.background is not None:
            self.background.stop()
            self.background = None
        if l0 is not None:
            # What captures left to the thread: indexed now, so a store
            # without the thread (the CLI, a later open) finds none waiting.
            # Nothing is lost if this fails: search scores waiting messages
            # from their text, and the next capture or indexer writes them.
            try:
                self.index_keywords()
            except MemstoreError as e:
                log.warning("keyword rows left to the next open: %s", loggable(e))


__all__ = ["Parts", "default_projections"]
