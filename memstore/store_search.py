"""The Store's search, recall and embedding methods (``Store`` inherits them).

Keyword, vector and hybrid search over a user's messages (L0) and memories
(L1; those two in ``memstore.user_search``), ``recall`` (what a host injects
before a turn) and its parts and preview, and the vector indexer's state.
The user comes first, as in every per-user method (``memstore.user_first``).
"""

from __future__ import annotations

from collections.abc import Callable

from memstore import recall as recall_api
from memstore import validate as v
from memstore.config import Settings
from memstore.db.engine import Database
from memstore.derive.context import DeriveContext
from memstore.embeddings import Embedder
from memstore.recall.compose import STABLE_SHARE, Recall
from memstore.recall.compose import stable_part as stable_part_of
from memstore.recall.nulls import warm_up
from memstore.recall.preview import RecallPreview
from memstore.recall.preview import preview as recall_preview_of
from memstore.records import EmbeddingStatus
from memstore.search import SearchEngine
from memstore.user_first import user_id_first
from memstore.user_search import UserSearch
from memstore.vectors.indexer import Indexer
from memstore.vectors.status import embedding_status


class Searching(UserSearch):
    _db: Database
    _derivation: DeriveContext
    _embedder: Embedder | None
    _indexer: Indexer | None
    _search_engine: SearchEngine
    _settings: Settings

    def _check_open(self) -> None:
        raise NotImplementedError  # Store's

    def reindex(self, progress: Callable[[int], None] | None = None) -> int:
        """Embed everything not yet embedded with the configured model, now."""
        self._check_open()
        progress = v.opt_callable("progress", progress)
        if self._indexer is None:
            return 0
        done = self._indexer.run_until_idle(progress=progress)
        warm_up(self._derivation)  # recall's fixed vectors, so no later recall waits for them
        return done

    def load_embedder(self) -> None:
        """Load the embedding model now rather than at the first embedding.

        For a service, before it takes requests (``memstore serve`` does):
        e5's first load takes ~2 s on 2 cores, and ~0.65 s of it, importing
        onnxruntime, holds the interpreter lock, so every thread of the
        process stands still meanwhile: 50 HTTP clients capturing into a
        server that loaded e5 under their first requests saw a p99 of 0.8 s.
        Nothing to do for the hashing embedder, a remote one or none."""
        self._check_open()
        if self._embedder is not None:
            self._embedder.load()

    def convert_vectors(self, element: str) -> list[tuple[str, int]]:
        """Store every vector space's vectors as ``element`` ("int8" or
        "float32"; SQLite only), nothing embedded again; returns (space,
        vectors rewritten) per space changed (memstore.vectors.spaces.convert)."""
        self._check_open()
        from memstore.vectors import spaces

        if self._indexer is None:
            return []
        # The indexer's lock: no batch writes into a table being replaced.
        with self._indexer.lock, self._db.write() as conn:
            return spaces.convert(conn, element)

    def embedding_status(self) -> EmbeddingStatus:
        """Embedder, model and how many messages and memories still wait for a vector."""
        return embedding_status(self._db, self._embedder, self._indexer)

    def pending_embeddings(self) -> int:
        """Messages and memories still waiting for a vector; 0 without an embedder."""
        self._check_open()
        if self._indexer is None:
            return 0
        return sum(self._indexer.pending(kind) for kind in ("l0", "l1"))

    @user_id_first
    def recall(
        self,
        user_id: str,
        query: str,
        *,
        session_id: str | None = None,
        budget_chars: int | None = None,
        timeout_s: float | None = None,
        threshold: float | None = None,
        speaker: str | None = None,
    ) -> Recall:
        """What a host injects before a turn, in one call, within one character budget.

        ``.stable``: persona, standing instructions, scene navigation (rarely
        changes: put it in the system prompt). ``.per_turn``: the memories and
        conversation excerpts relevant to ``query`` that pass the relevance
        gate (``threshold``, default the ``recall_threshold`` setting); an
        off-topic query gets none. ``.text`` is both. ``.memories`` and
        ``.messages`` are typed records of what was injected. ``speaker``: only
        that participant's messages (their ``name``, case-insensitive) and
        the memories made from them."""
        self._check_open()
        return recall_api.recall(
            self._derivation,
            v.check_query("query", query),
            user_id=v.check_id("user_id", user_id),
            session_id=v.opt_id("session_id", session_id),
            budget_chars=v.opt_int("budget_chars", budget_chars),
            timeout_s=v.opt_seconds("timeout_s", timeout_s),
            threshold=v.opt_number("threshold", threshold),
            speaker=v.opt_name("speaker", speaker),
        )

    def scene_navigation(self, user_id: str, *, generation: int | None = None) -> str:
        """The scene navigation text recall puts in the stable part."""
        self._check_open()
        user_id, generation = v.check_id("user_id", user_id), v.opt_int("generation", generation)
        return recall_api.scene_navigation(self._derivation, user_id, generation=generation)

    def stable_part(self, user_id: str, *, budget_chars: int | None = None) -> str:
        """The stable part of ``recall`` alone (persona, standing instructions,
        scene navigation), cut to the share of ``budget_chars`` (default the
        ``recall_budget_chars`` setting) that recall gives it. It does not
        depend on a query: a host puts it in the system prompt once per session."""
        self._check_open()
        user_id = v.check_id("user_id", user_id)
        budget = v.opt_int("budget_chars", budget_chars)
        total = self._settings.recall.budget_chars if budget is None else budget
        return stable_part_of(self._derivation, user_id, int(total * STABLE_SHARE)).text

    @user_id_first
    def recall_preview(
        self,
        user_id: str,
        query: str,
        *,
        session_id: str | None = None,
        budget_chars: int | None = None,
        threshold: float | None = None,
    ) -> RecallPreview:
        """``recall`` for ``query`` (exactly what a host would receive) plus
        every candidate the searches found, with its scores and whether the
        gate dropped it and why."""
        self._check_open()
        return recall_preview_of(
            self._derivation,
            v.check_query("query", query),
            user_id=v.check_id("user_id", user_id),
            session_id=v.opt_id("session_id", session_id),
            budget_chars=v.opt_int("budget_chars", budget_chars),
            threshold=v.opt_number("threshold", threshold),
        )
