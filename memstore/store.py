"""``Store``: the public face of memstore. One per database file per process.

A thin facade: every method checks its arguments (``memstore/validate.py``)
and hands the call to the part that does the work; the parts never see the
Store. ``assembly.Parts`` builds them and the hooks between them:

- ``kernel.Kernel``: database, event log, projections, clock, settings, the
  erasure compactor and the one append path (``append``, ``capture``);
- ``search``/``vectors``: keyword, vector and hybrid search, the indexer;
- ``derive.context.DeriveContext``: what derivation, recall and the
  pipeline are handed (the kernel plus search and per-store state);
- ``pipeline.PipelineService``: when L1/L2/L3 run (``run_pipeline``,
  ``end_session``, ``pipeline_status``);
- ``erasure.erase_user``: ``forget_user``; ``store_forget.Forgetting``:
  ``forget_memory``, ``forget_messages``, ``forget_session``, ``forget_between``.

The methods live in modules by job, which ``Store`` inherits:
``store_search.Searching`` (search, recall, embeddings),
``store_views.Views`` (memories, scenes, persona, generations, and the
views the inspector and the MCP server show) and ``store_forget.Forgetting``.
Every per-user method takes ``user_id`` first, positionally or by keyword
(``memstore.user_first``).

What the methods return is typed (``memstore.records`` and the dataclasses
exported from ``memstore``).

The Store is the only door: hosts (the CLI, the gateway, the MCP server, the
inspector, the Hermes provider) call its public methods and nothing else, so
every call passes the argument checks. The parts are private (``_parts``,
``_kernel``, ``_derivation``, ``_pipeline``, ``_embedder``,
``_search_engine``, ``_indexer``, ``_db``, ``_settings``, ``_clock``,
``_log``, ``_projections``, ``_compactor``). What hosts need to read of them
has a typed, read-only accessor:

- ``settings``: the frozen settings (the inspector's default recall
  threshold, ``retention run``'s policy);
- ``embedding_model`` and ``pending_embeddings()``: what ``reindex``,
  ``import``, ``demo`` and the gateway's health report show;
- ``has_pipeline``: whether captures feed a pipeline (the gateway says so);
- ``location``: the path or password-free URL, which the gateway keeps out
  of its error messages;
- ``projection_names``: what ``projections rebuild`` accepts;
- ``internals``: the parts themselves, for memstore's importers and
  benchmarks only; ``tests/test_architecture.py`` fails if a host uses it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from datetime import datetime
from pathlib import Path

from memstore import validate as v
from memstore.assembly import Parts, default_projections
from memstore.config import Settings
from memstore.db import migrate, presence
from memstore.db.connect import open_database, resolve
from memstore.db.engine import Database
from memstore.db.presence import Hold
from memstore.derive.messages.capture import CapturePlan, CaptureResult, plan, turn_messages
from memstore.errors import InvalidInputError, MigrationError, StorageError
from memstore.events.log import NewEvent, StoredEvent
from memstore.forgetting.erasure import ErasureReport, erase_user
from memstore.llm.backend import ChatBackend
from memstore.pipeline import Outcome, PipelineService
from memstore.projections.base import Projection, ProjectionStatus
from memstore.records import (
    EndSessionReport,
    NewMessage,
    PipelineStatus,
    StoreInfo,
)
from memstore.store_forget import Forgetting
from memstore.store_search import Searching
from memstore.store_views import Views
from memstore.timeutil import Clock, system_clock


class Store(Searching, Views, Forgetting):
    def __init__(
        self,
        db: Database,
        settings: Settings,
        *,
        projections: Sequence[Projection] | None = None,
        clock: Clock = system_clock,
    ) -> None:
        self._parts = Parts(
            db,
            settings,
            projections if projections is not None else default_projections(),
            clock=clock,
        )
        p = self._parts
        self._kernel, self._derivation, self._pipeline = p.kernel, p.derivation, p.pipeline
        self._embedder, self._search_engine, self._indexer = p.embedder, p.search_engine, p.indexer
        self._db, self._settings, self._clock = db, settings, clock
        k = p.kernel
        self._log, self._projections, self._compactor = k.log, k.projections, k.compactor
        self._closed = False
        # Held while open (``Store.open``): a schema change refuses to run under it.
        self._presence: Hold | None = None

    # -- what a host may read of the store's make-up ------------------------------

    @property
    def settings(self) -> Settings:
        """The settings this store was opened with. Frozen: reading only (the
        inspector shows the recall threshold, ``retention run`` the policy)."""
        return self._settings

    @property
    def embedding_model(self) -> str | None:
        """The embedding model's id; None when the store has no embedder (search
        is keyword-only)."""
        return None if self._embedder is None else self._embedder.model_id

    @property
    def has_pipeline(self) -> bool:
        """Whether this store runs the derivation pipeline (a store opened
        without the ``pipeline_state`` projection does not)."""
        return self._pipeline is not None

    @property
    def projection_names(self) -> list[str]:
        """The names of the projections this store keeps, in replay order."""
        return list(self._projections.names)

    @property
    def internals(self) -> Parts:
        """The assembled parts behind the facade, for code of memstore that
        extends or measures them: the importers (``memstore.porting``) that
        append derived events with their own checks, and the benchmarks
        (``memstore.bench``) that time one part alone. Hosts (the CLI, the
        gateway, the MCP server, the inspector, the Hermes provider) never use
        it; ``tests/test_architecture.py`` fails if one does."""
        return self._parts

    def start_background(self) -> None:
        """Start the background vector indexer (Store.open does, unless disabled)."""
        self._parts.start_background()

    # -- lifecycle -------------------------------------------------------------

    @classmethod
    def open(
        cls,
        path: str | Path | None = None,
        *,
        settings: Settings | None = None,
        upgrade: bool = True,
        projections: Sequence[Projection] | None = None,
        clock: Clock = system_clock,
    ) -> Store:
        """Open (creating if needed) the store at ``path``.

        ``path`` defaults to ``$MEMSTORE_DB`` or the user data directory. The
        schema is upgraded to the newest revision unless ``upgrade=False``, in
        which case an out-of-date database raises ``MigrationError``.
        """
        settings = settings or Settings.load()
        db = open_database(
            resolve(path),
            busy_timeout_ms=settings.storage.busy_timeout_ms,
            durability=settings.storage.durability,
        )
        hold: Hold | None = None
        wait_s = settings.storage.busy_timeout_ms / 1000
        schema_wait_s = settings.storage.schema_wait_s
        try:
            # Before reading the schema: a migration running now finishes first.
            hold = presence.hold_shared(db, wait_s=schema_wait_s)
            owners = migrate.projection_tables(default_projections())
            if upgrade and migrate.current_revision(db) != migrate.head_revision():
                # Upgrading is a schema change like `memstore db upgrade`: only
                # while no other store has the database open (they would see
                # tables change under them); another opener upgrading at the
                # same moment is waited for, and then there is nothing to do.
                hold.release()
                hold = None
                try:
                    with presence.exclusive(db, wait_s=wait_s):
                        migrate.ensure_current(db, upgrade_schema=True, owners=owners)
                except MigrationError:
                    # Refused: a store still open, or another opener whose upgrade
                    # outlasted our wait (a new PostgreSQL database takes seconds on
                    # a busy machine). A shared hold waits only for an upgrade in
                    # progress; if the schema is current after it, there is nothing
                    # left to do.
                    hold = presence.hold_shared(db, wait_s=schema_wait_s)
                    if migrate.current_revision(db) != migrate.head_revision():
                        raise
                else:
                    hold = presence.hold_shared(db, wait_s=schema_wait_s)
            migrate.ensure_current(db, upgrade_schema=upgrade, owners=owners)
            store = cls(db, settings, projections=projections, clock=clock)
            store._presence = hold
            store._parts.start()
        except BaseException:
            if hold is not None:
                hold.release()
            db.close()
            raise
        return store

    def close(self) -> None:
        """Stop background work (bounded) and close the database; safe to call twice."""
        if self._closed:
            return
        # Background work finishes (bounded) before the store refuses calls:
        # a run cut off by "store is closed" would count as a failed attempt.
        try:
            if self._pipeline is not None:
                self._pipeline.stop()
            self._parts.stop_background()
        finally:
            self._closed = True
            try:
                self._parts.close()
            finally:
                if self._presence is not None:
                    self._presence.release()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def path(self) -> Path:
        """Where the store lives, as the database layer names it."""
        return self._db.path

    @property
    def location(self) -> str:
        """Where the store lives as messages name it: the file's path, or the
        PostgreSQL URL without its password."""
        return self._db.location

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError("store is closed")

    # -- the log ---------------------------------------------------------------

    def append(self, events: Sequence[NewEvent]) -> list[StoredEvent]:
        """Append events and apply inline projections, in one transaction."""
        self._check_open()
        return self._kernel.append(v.check_new_events(events))

    def read_events(
        self,
        user_id: str | None = None,
        *,
        after: int = 0,
        types: Sequence[str] | None = None,
        limit: int | None = None,
    ) -> list[StoredEvent]:
        """Events after position ``after``: one user's, or everyone's with
        ``user_id=None``; optionally only some ``types``."""
        self._check_open()
        after = v.check_int("after", after)
        types = v.check_strings("types", types)
        user_id = v.opt_id("user_id", user_id)
        limit = v.opt_int("limit", limit)
        with self._db.read() as conn:
            return self._log.read(conn, after=after, types=types, user_id=user_id, limit=limit)

    def read_stream(self, stream: str, *, after_seq: int = 0) -> list[StoredEvent]:
        """One stream's events after its sequence number ``after_seq``."""
        self._check_open()
        stream = v.check_text("stream", stream)
        after_seq = v.check_int("after_seq", after_seq)
        with self._db.read() as conn:
            return self._log.read_stream(conn, stream, after_seq=after_seq)

    def tail(self, n: int = 20) -> list[StoredEvent]:
        """The last ``n`` events of the log."""
        self._check_open()
        n = v.check_int("n", n)
        with self._db.read() as conn:
            head = self._log.last_position(conn)
            return self._log.read(conn, after=max(0, head - n))

    # -- L0 capture ------------------------------------------------------------

    def capture(
        self,
        user_id: str,
        session_id: str,
        messages: Sequence[NewMessage] | Sequence[Mapping[str, object]],
        *,
        agent_id: str | None = None,
    ) -> CaptureResult:
        """Store conversation messages for a user's session as one L0 event.

        ``messages`` are ``{"role", "content", "timestamp"?, "id"?}`` mappings.
        Returns as soon as the event is committed; embeddings and derivation
        happen later. Messages already captured (same id) are not stored again.
        """
        return self._plan_capture(user_id, session_id, messages, agent_id).commit(self._kernel)

    def submit_capture(
        self,
        user_id: str,
        session_id: str,
        messages: Sequence[NewMessage] | Sequence[Mapping[str, object]],
        *,
        agent_id: str | None = None,
    ) -> Future[CaptureResult]:
        """``capture`` for a caller that must not block, an event loop:
        the arguments are checked now (bad input raises here) and the
        returned future resolves with the ``CaptureResult`` once the messages
        are committed (or with the error ``capture`` would raise). With
        asyncio: ``await asyncio.wrap_future(store.submit_capture(...))``.
        Concurrent submissions share transactions with each other and with
        ``capture`` calls; a store's own thread commits them."""
        planned = self._plan_capture(user_id, session_id, messages, agent_id)
        return planned.commit_later(self._kernel)

    def _plan_capture(
        self,
        user_id: str,
        session_id: str,
        messages: Sequence[NewMessage] | Sequence[Mapping[str, object]],
        agent_id: str | None,
    ) -> CapturePlan:
        self._check_open()
        return plan(
            self._kernel,
            v.check_id("user_id", user_id),
            v.check_id("session_id", session_id),
            messages,
            agent_id=v.opt_id("agent_id", agent_id),
            max_bytes=self._settings.storage.max_message_bytes,
        )

    def capture_turn(
        self,
        user_id: str,
        session_id: str,
        user_text: str,
        assistant_text: str | None = None,
        *,
        agent_id: str | None = None,
        timestamp: str | datetime | float | None = None,
        turn_id: str | None = None,
    ) -> CaptureResult:
        """Capture one user/assistant exchange (either side may be empty)."""
        turn_id = v.opt_id("turn_id", turn_id)
        msgs = turn_messages(user_text, assistant_text, timestamp=timestamp, turn_id=turn_id)
        return self.capture(user_id, session_id, msgs, agent_id=agent_id)

    # -- the host's model ----------------------------------------------------------

    def use_host_llm(self, backend: ChatBackend | None) -> None:
        """Let derivation use a host's chat backend (e.g. Hermes' own model)
        when memstore has no LLM endpoint of its own; None takes it back.
        memstore's own ``llm_*`` settings still win over it."""
        if backend is not None and not isinstance(backend, ChatBackend):
            raise InvalidInputError(
                f"backend must be a memstore.llm.ChatBackend, not {type(backend).__name__}"
            )
        self._derivation.host_llm = backend

    @property
    def host_llm(self) -> ChatBackend | None:
        """The chat backend a host lent this store, if any."""
        return self._derivation.host_llm

    # -- pipeline ------------------------------------------------------------------

    def _pipeline_service(self) -> PipelineService:
        self._check_open()
        if self._pipeline is None:
            raise StorageError("this store was opened without the pipeline projection")
        return self._pipeline

    def end_session(
        self, user_id: str, session_id: str, timeout_s: float = 30.0
    ) -> EndSessionReport:
        """Extract whatever the session has pending, then mark it ended.

        Bounded by ``timeout_s``; the returned report says what ran and whether
        the timeout cut it short (pending work then stays queued, never lost).
        Its ``ran`` lists this call's runs (``by: "end_session"``) and the
        extraction another worker did (``by: "worker"``: the store's scheduler,
        another process): the run it held while this call waited, or the one
        that had already extracted the session since it was last ended.
        """
        return self._pipeline_service().end_session(
            v.check_id("user_id", user_id),
            v.check_id("session_id", session_id),
            v.check_seconds("timeout_s", timeout_s),
        )

    def run_pipeline(self, user_id: str | None = None, wait: bool = True) -> list[Outcome]:
        """Run due derivation work now (L1, then L2, then L3).

        Work another worker (this store's background scheduler, another
        process) is doing for the user is waited for, up to 30 s, and what it
        leads to runs too, so a recall right after it sees the scenes and persona.
        """
        return self._pipeline_service().run_pipeline(
            v.opt_id("user_id", user_id), v.check_bool("wait", wait)
        )

    def pipeline_status(self, user_id: str | None = None) -> list[PipelineStatus]:
        """The derivation pipeline's state, per session (one user's, or everyone's)."""
        return self._pipeline_service().status(v.opt_id("user_id", user_id))

    # -- erasure -------------------------------------------------------------------

    def forget_user(
        self,
        user_id: str,
        *,
        reason: str = "request",
        wait_s: float = 10.0,
        vacuum_full: bool = False,
    ) -> ErasureReport:
        """Erase everything of one user: events, derived rows, vectors, cached
        embeddings of their texts; leaves a content-free tombstone event.

        Returns an ``ErasureReport``. This is the only operation that deletes
        events; the file is vacuumed so no erased bytes remain in it. Readers
        of older snapshots are waited for up to ``wait_s`` seconds; if one is
        still in the way, ``report.compacted`` is False and the store finishes
        on its next open, close or write. An unknown user raises ``NotFoundError``.
        ``vacuum_full``: on PostgreSQL rewrite the tables (see ``erase_user``).
        """
        self._check_open()
        return erase_user(
            self._kernel,
            v.check_id("user_id", user_id),
            reason=v.check_text("reason", reason),
            wait_s=v.check_seconds("wait_s", wait_s),
            vacuum_full=bool(vacuum_full),
        )

    # -- projections -----------------------------------------------------------

    def projection_status(self) -> list[ProjectionStatus]:
        """Each projection's checkpoint against the head of the log."""
        self._check_open()
        with self._db.read() as conn:
            return self._projections.status(conn)

    def rebuild(
        self, names: Sequence[str] | None = None, progress: Callable[[int], None] | None = None
    ) -> int:
        """Drop and replay projections (all by default); returns events replayed."""
        self._check_open()
        names = v.check_strings("names", names)
        progress = v.opt_callable("progress", progress)
        with self._kernel.exclusive(), self._db.write() as conn:
            return self._projections.rebuild(conn, names, progress)

    def catch_up(self) -> dict[str, int]:
        """Apply events the projections have not seen yet; returns how many per projection."""
        self._check_open()
        out: dict[str, int] = {}
        with self._db.write() as conn:
            for name in self._projections.names:
                out[name] = self._projections.catch_up(conn, name)
        return out

    def event_count(self) -> int:
        """The position of the newest event (the log never reuses a position)."""
        self._check_open()
        with self._db.read() as conn:
            return self._log.last_position(conn)

    def info(self) -> StoreInfo:
        """Path, schema revision and event count."""
        return {
            "path": str(self.path),
            "revision": migrate.current_revision(self._db),
            "events": self.event_count(),
        }
