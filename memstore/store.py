"""``Store``: the public face of memstore. One per database file per process.

It wires the pieces together: the database, the event log, the projections
(applied inline in every append's transaction) and, from later layers,
capture, search and the derivation pipeline.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from sqlalchemy import event

from memstore import validate as v
from memstore.config import Settings
from memstore.db import migrate
from memstore.db.connect import open_database, resolve
from memstore.db.engine import Database
from memstore.embeddings import Embedder, make_embedder
from memstore.erasure_compaction import Compactor
from memstore.errors import InvalidInputError, StorageError
from memstore.events.log import EventLog, NewEvent, StoredEvent
from memstore.l0.capture import (
    CaptureResult,
    capture_event,
    known_message_ids,
    new_messages,
    prepare_messages,
)
from memstore.l0.projection import L0Projection
from memstore.pipeline import PipelineService, PipelineStateProjection
from memstore.projections.base import Projection, Projections, ProjectionStatus
from memstore.projections.stats import StatsProjection
from memstore.search import Hit, SearchEngine
from memstore.timeutil import Clock, system_clock
from memstore.vectors.indexer import BackgroundIndexer, Indexer
from memstore.vectors.quarantine import counts as quarantine_counts

if TYPE_CHECKING:
    from memstore.derive.recall import Recall


def default_projections() -> list[Projection]:
    from memstore.derive import derive_projections

    return [StatsProjection(), L0Projection(), *derive_projections(), PipelineStateProjection()]


class Store:
    def __init__(
        self,
        db: Database,
        settings: Settings,
        *,
        projections: Sequence[Projection] | None = None,
        clock: Clock = system_clock,
    ) -> None:
        self.db = db
        self.settings = settings
        self.clock = clock
        self.log = EventLog(clock=clock)
        # A rolled-back append must not leave stream heads cached that were
        # never written.
        event.listen(db.engine, "rollback", self._on_rollback)
        self.projections = Projections(
            self.log, projections if projections is not None else default_projections()
        )
        self._closed = False
        # Erasure compaction left pending (crash, reader in the way) is
        # finished on open, close and the next write.
        self.compactor = Compactor(db)
        # Vectors live in sqlite-vec tables; on PostgreSQL (preview) search is
        # keyword-only until pgvector support lands.
        self.embedder: Embedder | None = make_embedder(settings) if db.dialect == "sqlite" else None
        self.search_engine = SearchEngine(db, self.embedder, settings)
        self.indexer: Indexer | None = (
            Indexer(db, self.embedder, clock, context_vectors=settings.embedding.context_vectors)
            if self.embedder is not None
            else None
        )
        self._bg_indexer: BackgroundIndexer | None = None
        # Cheap to build: no thread exists until the first timer write.
        self.pipeline: PipelineService | None = (
            PipelineService(self) if "pipeline_state" in self.projections.names else None
        )

    def _on_rollback(self, _conn: Any) -> None:
        self.log.forget_cache()

    def start_background(self) -> None:
        """Start the background vector indexer (Store.open does, unless disabled)."""
        if self.indexer is not None and self._bg_indexer is None:
            self._bg_indexer = BackgroundIndexer(self.indexer)
            self._bg_indexer.start()

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
        try:
            migrate.ensure_current(db, upgrade_schema=upgrade)
            store = cls(db, settings, projections=projections, clock=clock)
            with db.write() as conn:
                store.projections.bring_current(conn)
            store.compactor.on_open()
            if settings.pipeline.background_indexer:
                store.start_background()
            if settings.pipeline.scheduler and store.pipeline is not None:
                store.pipeline.start()
        except BaseException:
            db.close()
            raise
        return store

    def close(self) -> None:
        if self._closed:
            return
        # Background work finishes (bounded) before the store refuses calls:
        # a run cut off by "store is closed" would count as a failed attempt.
        try:
            if self.pipeline is not None:
                self.pipeline.stop()
            if self._bg_indexer is not None:
                self._bg_indexer.stop()
                self._bg_indexer = None
        finally:
            self._closed = True
            try:
                self.compactor.on_close()
            finally:
                self.db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def path(self) -> Path:
        return self.db.path

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError("store is closed")

    # -- the log ---------------------------------------------------------------

    def append(self, events: Sequence[NewEvent]) -> list[StoredEvent]:
        """Append events and apply inline projections, in one transaction."""
        self._check_open()
        events = v.check_new_events(events)
        with self.db.write() as conn:
            stored = self.log.append(conn, events)
            self.projections.apply_inline(conn, stored)
        self.compactor.after_write()
        return stored

    def read_events(
        self,
        *,
        after: int = 0,
        types: Sequence[str] | None = None,
        user_id: str | None = None,
        limit: int | None = None,
    ) -> list[StoredEvent]:
        self._check_open()
        after = v.check_int("after", after)
        types = v.check_strings("types", types)
        user_id = v.opt_id("user_id", user_id)
        limit = v.opt_int("limit", limit)
        with self.db.read() as conn:
            return self.log.read(conn, after=after, types=types, user_id=user_id, limit=limit)

    def read_stream(self, stream: str, *, after_seq: int = 0) -> list[StoredEvent]:
        self._check_open()
        stream = v.check_text("stream", stream)
        after_seq = v.check_int("after_seq", after_seq)
        with self.db.read() as conn:
            return self.log.read_stream(conn, stream, after_seq=after_seq)

    def tail(self, n: int = 20) -> list[StoredEvent]:
        self._check_open()
        n = v.check_int("n", n)
        with self.db.read() as conn:
            head = self.log.last_position(conn)
            return self.log.read(conn, after=max(0, head - n))

    # -- L0 capture ------------------------------------------------------------

    def capture(
        self,
        user_id: str,
        session_id: str,
        messages: Sequence[Any],
        *,
        agent_id: str | None = None,
    ) -> CaptureResult:
        """Store conversation messages for a user's session as one L0 event.

        ``messages`` are ``{"role", "content", "timestamp"?, "id"?}`` mappings.
        Returns as soon as the event is committed; embeddings and derivation
        happen later. Messages already captured (same id) are not stored again.
        """
        self._check_open()
        user_id = v.check_id("user_id", user_id)
        session_id = v.check_id("session_id", session_id)
        agent_id = v.opt_id("agent_id", agent_id)
        prepared = prepare_messages(
            session_id,
            messages,
            now=self.clock(),
            max_bytes=self.settings.storage.max_message_bytes,
        )
        dropped = len(messages) - len(prepared)
        ids = [m.id for m in prepared]
        with self.db.write() as conn:
            known = known_message_ids(conn, user_id, session_id, ids)
            fresh = new_messages(prepared, known)
            if not fresh:
                return CaptureResult(None, [], ids, [], dropped)
            stored = self.log.append(conn, [capture_event(user_id, session_id, agent_id, fresh)])
            self.projections.apply_inline(conn, stored)
            if self.pipeline is not None:
                self.pipeline.on_captured(conn, stored)
        if self.pipeline is not None:
            self.pipeline.after_commit(stored)
        if self._bg_indexer is not None:
            self._bg_indexer.notify()
        self.compactor.after_write()
        return CaptureResult(
            stored[0].position,
            [m.id for m in fresh],
            [i for i in ids if i in known],
            [m.id for m in fresh if m.truncated],
            dropped,
        )

    def capture_turn(
        self,
        user_id: str,
        session_id: str,
        user_text: Any,
        assistant_text: Any = None,
        *,
        agent_id: str | None = None,
        timestamp: Any = None,
        turn_id: str | None = None,
    ) -> CaptureResult:
        """Capture one user/assistant exchange (either side may be empty)."""
        turn_id = v.opt_id("turn_id", turn_id)
        msgs: list[dict[str, Any]] = [{"role": "user", "content": user_text}]
        if assistant_text is not None:
            msgs.append({"role": "assistant", "content": assistant_text})
        for i, m in enumerate(msgs):
            if timestamp is not None:
                m["timestamp"] = timestamp
            if turn_id:
                m["id"] = f"{turn_id}:{i}"
        return self.capture(user_id, session_id, msgs, agent_id=agent_id)

    # -- search ------------------------------------------------------------------

    def search_conversations(
        self,
        query: str,
        *,
        user_id: str,
        session_id: str | None = None,
        limit: object = 5,
        strategy: str = "hybrid",
    ) -> list[Hit]:
        """Search a user's captured messages (L0)."""
        self._check_open()
        session_id = v.opt_id("session_id", session_id)
        limit = v.search_limit(limit)
        return self.search_engine.search(
            "l0", query, user_id=user_id, session_id=session_id, limit=limit, strategy=strategy
        )

    def search_memories(
        self,
        query: str,
        *,
        user_id: str,
        type: str | None = None,
        scene: str | None = None,
        limit: object = 5,
        strategy: str = "hybrid",
    ) -> list[Hit]:
        """Search a user's active L1 memories (optionally one type or scene)."""
        self._check_open()
        scene = v.opt_text("scene", scene)
        limit = v.search_limit(limit)
        if type is not None and type not in ("persona", "episodic", "instruction"):
            raise InvalidInputError("type must be persona, episodic or instruction")
        return self.search_engine.search(
            "l1", query, user_id=user_id, type=type, scene=scene, limit=limit, strategy=strategy
        )

    def reindex(self, progress: Callable[[int], None] | None = None) -> int:
        """Embed everything not yet embedded with the configured model, now."""
        self._check_open()
        progress = v.opt_callable("progress", progress)
        if self.indexer is None:
            return 0
        done = self.indexer.run_until_idle(progress=progress)
        from memstore.derive.recall_rank import warm_up

        warm_up(self)  # recall's fixed vectors, so no later recall waits for them
        return done

    def embedding_status(self) -> dict[str, Any]:
        if self.indexer is None or self.embedder is None:
            return {"embedder": "none", "vector_search": False}
        out: dict[str, Any] = {"model_id": self.embedder.model_id}
        with self.db.read() as conn:
            held = quarantine_counts(conn)
        for kind in ("l0", "l1"):
            sp = self.indexer.space(kind)
            out[kind] = {
                "dims": sp.dims,
                "ready": sp.ready,
                "pending": self.indexer.pending(kind),
                # Rows that could not be embedded, set aside and retried later.
                "quarantined": held.get(sp.name, 0),
            }
        return out

    # -- pipeline ------------------------------------------------------------------

    def _pipeline(self) -> PipelineService:
        self._check_open()
        if self.pipeline is None:
            raise StorageError("this store was opened without the pipeline projection")
        return self.pipeline

    def end_session(self, user_id: str, session_id: str, timeout_s: float = 30.0) -> dict[str, Any]:
        """Extract whatever the session has pending, then mark it ended.

        Bounded by ``timeout_s``; the returned report says what ran and whether
        the timeout cut it short (pending work then stays queued, never lost).
        """
        return self._pipeline().end_session(
            v.check_id("user_id", user_id),
            v.check_id("session_id", session_id),
            v.check_seconds("timeout_s", timeout_s),
        )

    def run_pipeline(self, user_id: str | None = None, wait: bool = True) -> list[Any]:
        """Run due derivation work now (L1, then L2, then L3)."""
        return self._pipeline().run_pipeline(
            v.opt_id("user_id", user_id), v.check_bool("wait", wait)
        )

    def pipeline_status(self, user_id: str | None = None) -> list[dict[str, Any]]:
        return self._pipeline().status(v.opt_id("user_id", user_id))

    # -- derived layers (L1 memories, L2 scenes, L3 persona) ----------------------

    def recall(
        self,
        query: str,
        *,
        user_id: str,
        session_id: str | None = None,
        budget_chars: int | None = None,
        timeout_s: float | None = None,
        threshold: float | None = None,
    ) -> Recall:
        """What a host injects before a turn, in one call, within one character budget.

        ``.stable``: persona, standing instructions, scene navigation (rarely
        changes: put it in the system prompt). ``.per_turn``: the memories and
        conversation excerpts relevant to ``query`` that pass the relevance
        gate (``threshold``, default the ``recall_threshold`` setting); an
        off-topic query gets none. ``.text`` is both. ``.memories`` and
        ``.messages`` are typed records of what was injected."""
        self._check_open()
        from memstore.derive import api

        return api.recall(
            self,
            v.check_query("query", query),
            user_id=v.check_id("user_id", user_id),
            session_id=v.opt_id("session_id", session_id),
            budget_chars=v.opt_int("budget_chars", budget_chars),
            timeout_s=v.opt_seconds("timeout_s", timeout_s),
            threshold=v.opt_number("threshold", threshold),
        )

    def list_memories(
        self,
        user_id: str,
        *,
        type: str | None = None,
        generation: int | None = None,
        include_retired: bool = False,
    ) -> list[dict[str, Any]]:
        from memstore.derive import api

        self._check_open()
        user_id, generation = v.check_id("user_id", user_id), v.opt_int("generation", generation)
        type = v.opt_choice("type", type, v.MEMORY_TYPES)
        include_retired = v.check_bool("include_retired", include_retired)
        return list(
            api.list_memories(
                self, user_id, type=type, generation=generation, include_retired=include_retired
            )
        )

    def memory_history(self, user_id: str, memory_id: str) -> list[dict[str, Any]]:
        """The events that created and changed one of a user's memories, with
        their source messages."""
        from memstore.derive import api

        self._check_open()
        return api.memory_history(
            self, v.check_id("user_id", user_id), v.check_id("memory_id", memory_id)
        )

    def forget_memory(self, user_id: str, memory_id: str, reason: str = "user_request") -> None:
        """Retire one memory on request (recorded as an event; history is kept)."""
        from memstore.derive import api

        self._check_open()
        user_id, memory_id = v.check_id("user_id", user_id), v.check_id("memory_id", memory_id)
        api.forget_memory(self, user_id, memory_id, reason=v.check_text("reason", reason))

    def write_memory(
        self,
        user_id: str,
        action: str,
        content: str,
        *,
        old_content: str | None = None,
        type: str = "persona",
        scene: str = "",
        origin: str = "user_stated",
    ) -> str | None:
        """Add / replace / remove a memory the user or host stated directly."""
        from memstore.derive import api

        self._check_open()
        user_id = v.check_id("user_id", user_id)
        if action not in ("add", "replace", "remove"):
            raise InvalidInputError(f"action must be add, replace or remove, not {action!r}")

        return api.write_memory(
            self,
            user_id,
            action,  # type: ignore[arg-type]  # checked above
            v.check_text("content", content),
            old_content=v.opt_text("old_content", old_content),
            type=v.check_choice("type", type, v.MEMORY_TYPES),
            scene=v.check_text("scene", scene),
            origin=v.check_text("origin", origin),
        )

    def list_scenes(self, user_id: str, *, generation: int | None = None) -> list[Any]:
        from memstore.derive import api

        self._check_open()
        user_id, generation = v.check_id("user_id", user_id), v.opt_int("generation", generation)
        return list(api.list_scenes(self, user_id, generation=generation))

    def get_scene(
        self, user_id: str, name: str, *, generation: int | None = None
    ) -> dict[str, Any] | None:
        """One of the user's scenes by name (case-insensitive when no exact match),
        with ``created_at``/``updated_at``; None when the user has no such scene."""
        from memstore.derive import api

        self._check_open()
        user_id, generation = v.check_id("user_id", user_id), v.opt_int("generation", generation)
        return api.get_scene(self, user_id, v.check_query("name", name), generation=generation)

    def get_persona(self, user_id: str, *, generation: int | None = None) -> str | None:
        from memstore.derive import api

        self._check_open()
        user_id, generation = v.check_id("user_id", user_id), v.opt_int("generation", generation)
        return api.get_persona(self, user_id, generation=generation)

    def rederive(self, user_id: str | None = None, from_layer: str = "l1") -> int:
        """Re-run derivation over L0 into a new generation and switch to it."""
        from memstore.derive import api

        self._check_open()
        return api.rederive(self, v.opt_id("user_id", user_id), from_layer=from_layer)

    # -- erasure -------------------------------------------------------------------

    def forget_user(self, user_id: str, *, reason: str = "request", wait_s: float = 10.0) -> Any:
        """Erase everything of one user: events, derived rows, vectors, cached
        embeddings of their texts; leaves a content-free tombstone event.

        Returns an ``ErasureReport``. This is the only operation that deletes
        events; the file is vacuumed so no erased bytes remain in it. Readers
        of older snapshots are waited for up to ``wait_s`` seconds; if one is
        still in the way, ``report.compacted`` is False and the store finishes
        on its next open, close or write. An unknown user raises ``NotFoundError``.
        """
        self._check_open()
        from memstore.erasure import erase_user

        return erase_user(
            self,
            v.check_id("user_id", user_id),
            reason=v.check_text("reason", reason),
            wait_s=v.check_seconds("wait_s", wait_s),
        )

    # -- projections -----------------------------------------------------------

    def projection_status(self) -> list[ProjectionStatus]:
        self._check_open()
        with self.db.read() as conn:
            return self.projections.status(conn)

    def rebuild(
        self, names: Sequence[str] | None = None, progress: Callable[[int], None] | None = None
    ) -> int:
        """Drop and replay projections (all by default); returns events replayed."""
        self._check_open()
        names = v.check_strings("names", names)
        progress = v.opt_callable("progress", progress)
        lock = self.indexer.lock if self.indexer is not None else contextlib.nullcontext()
        with lock, self.db.write() as conn:
            return self.projections.rebuild(conn, names, progress)

    def catch_up(self) -> dict[str, int]:
        self._check_open()
        out: dict[str, int] = {}
        with self.db.write() as conn:
            for name in self.projections.names:
                out[name] = self.projections.catch_up(conn, name)
        return out

    def event_count(self) -> int:
        self._check_open()
        with self.db.read() as conn:
            return self.log.last_position(conn)

    def info(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "revision": migrate.current_revision(self.db),
            "events": self.event_count(),
        }
