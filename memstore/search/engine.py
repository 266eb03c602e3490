"""The search engine behind ``search_conversations`` and ``search_memories``.

Isolation: every query filters by ``user_id`` inside its SQL, including the
KNN (``user_id`` is the vec0 partition key), never after the fact. User text
reaches FTS5 only through ``build_match``, which quotes every term.

The parts, by job: ``rescore`` fuses the keyword and vector lists and rescores
conversation messages (content-free ones last), ``query_vectors`` embeds each
query once, ``hits`` reads the ranked rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from sqlalchemy import Connection

from memstore.config import Settings
from memstore.db import backend
from memstore.db.engine import Database
from memstore.db.sqlfn import driver_rows, driver_sql, in_list
from memstore.embeddings import Embedder, from_blob
from memstore.errors import InvalidInputError, MemstoreError
from memstore.search import keyword, rescore
from memstore.search.filters import RowFilter
from memstore.search.hits import L1_COLS, Hit, Rows, materialise, read_rows
from memstore.search.postings import HotPostings
from memstore.search.query_vectors import QueryVectors
from memstore.text import is_low_information
from memstore.validate import check_id
from memstore.vectors import spaces
from memstore.vectors.hot import HotPartitions, exact_distances

STRATEGIES = ("keyword", "vector", "hybrid")
MAX_LIMIT = 20


def clamp_limit(limit: object, default: int = 5) -> int:
    """1..20; anything non-numeric gives the default (as the upstream's tools do)."""
    try:
        n = int(str(limit).strip()) if not isinstance(limit, int | float) else int(limit)
    except (TypeError, ValueError):
        return default
    return max(1, min(MAX_LIMIT, n))


_L1_ACTIVE = (
    "m.status = 'active' AND m.generation = coalesce("
    "(SELECT generation FROM active_generations g WHERE g.user_id = m.user_id), 0)"
)


# Column weights of the FTS columns (text, cjk, stem) in both layers' BM25
# (memstore.search.bm25, bm25_memories): all 1. Both views of a word count
# the same; a word matched exactly also matches its root, so exact
# matches outrank matches by root alone. (LoCoMo dev, keyword recall@10 with
# no root column / root weight 0.5 / 1 / 2: 0.572 / 0.606 / 0.616 / 0.624,
# hybrid flat; 1 is kept as the neutral choice: more would let the English
# roots of non-English words weigh more than the words themselves.)
# Extra candidates fetched per list for conversation search, so that
# content-free messages pushed to the end do not leave the list short.
_L0_OVERFETCH = 2
# And again when only one speaker's messages are wanted.
_SPEAKER_OVERFETCH = 3


@dataclass(frozen=True)
class Ask:
    """One search as both retrieval paths (keyword, vector) receive it; ``k`` is how
    many candidates each path returns."""

    kind: str
    query: str
    user_id: str
    k: int
    session_id: str | None
    type_: str | None
    scene: str | None
    speaker: str | None = None  # messages of this speaker only (l0)

    @property
    def where(self) -> RowFilter:
        return {"session_id": self.session_id, "type_": self.type_, "scene": self.scene}


@dataclass(frozen=True)
class _Begun:
    """A search whose keyword list is done and whose vector list is not."""

    ask: Ask
    strategy: str
    n: int
    fetch: int
    use_vec: bool
    kw: list[tuple[int, float]]
    space: spaces.Space | None


class SearchEngine:
    def __init__(self, db: Database, embedder: Embedder | None, settings: Settings) -> None:
        self.db = db
        self.rrf_k = settings.recall.rrf_k
        self.candidates = max(1, settings.recall.search_candidates)
        self.vector_weight = settings.recall.vector_weight
        self.neighbour_weight = settings.recall.neighbour_weight
        self.speaker_boost = settings.recall.speaker_boost
        self.context_vectors = settings.embedding.context_vectors
        self.queries = QueryVectors(embedder)
        # Every user's partitions are searched in memory, loaded in a
        # background thread while vec0 answers (memstore.vectors.hot).
        self.hot = HotPartitions(background=db.read)
        # And their keyword postings (search.postings).
        self.hot_postings = HotPostings(background=db.read)

    @property
    def embedder(self) -> Embedder | None:
        """The one embedder of searches and their query cache."""
        return self.queries.embedder

    @embedder.setter
    def embedder(self, embedder: Embedder | None) -> None:
        self.queries.embedder = embedder

    # -- public ----------------------------------------------------------------

    def search(
        self,
        kind: str,
        query: str,
        *,
        user_id: str,
        limit: object = 5,
        strategy: str = "hybrid",
        session_id: str | None = None,
        type: str | None = None,
        scene: str | None = None,
        conn: Connection | None = None,
        speaker: str | None = None,
    ) -> list[Hit]:
        """``conn``: search inside the caller's read transaction (recall runs
        both of its searches and its row reads in one snapshot). ``speaker``:
        messages whose speaker (the message's ``name``) is this one, case
        folded, from the fused candidates."""
        with self.reading(conn) as c:
            begun = self._begin(
                c, kind, query, user_id, limit, strategy, session_id, type, scene, speaker
            )
            return self._finish(c, begun)

    def search_together(
        self,
        conn: Connection,
        asks: list[tuple[str, str, str, int]],
        found_spaces: dict[str, spaces.Space | None] | None = None,
        speaker: str | None = None,
    ) -> list[list[Hit]]:
        """Several hybrid searches ``(kind, query, user_id, limit)`` in one
        read transaction, each the same as ``search``: every keyword list
        first, then every vector list. Recall prefetches the query's
        embedding (native code, no GIL), so all keyword work runs while it is
        computed; searched one after the other, the second keyword search
        would start only after the first one had waited for the vector.
        ``found_spaces``: filled with the vector space of each kind searched
        (recall reads its candidates' vectors from them); ``speaker``: as in
        ``search``, for the message searches."""
        for kind, _, user, _ in asks:
            self.read_ahead(conn, kind, user, "hybrid")
        begun = [
            self._begin(
                conn,
                kind,
                q,
                user,
                limit,
                "hybrid",
                None,
                None,
                None,
                speaker if kind == "l0" else None,
            )
            for kind, q, user, limit in asks
        ]
        if found_spaces is not None:
            found_spaces.update((b.ask.kind, b.space) for b in begun)
        return [self._finish(conn, b) for b in begun]

    def _begin(
        self,
        conn: Connection,
        kind: str,
        query: str,
        user_id: str,
        limit: object,
        strategy: str,
        session_id: str | None,
        type_: str | None,
        scene: str | None,
        speaker: str | None = None,
    ) -> _Begun:
        """Check the arguments and run the keyword half of a search."""
        user_id = check_id("user_id", user_id)
        if strategy not in STRATEGIES:
            raise InvalidInputError(
                f"strategy must be one of {', '.join(STRATEGIES)}, not {strategy!r}"
            )
        if not isinstance(query, str):
            raise InvalidInputError("query must be a string")
        n = clamp_limit(limit)
        fetch = max(n, self.candidates)
        deep = fetch * (_L0_OVERFETCH if kind == "l0" else 1)
        if speaker:  # the filter keeps a part of the candidates: fetch more
            deep *= _SPEAKER_OVERFETCH
        # One look-up of the space serves both halves.
        sp = self.space(conn, kind) if strategy != "keyword" else None
        use_vec = sp is not None and sp.ready
        ask = Ask(kind, query, user_id, deep, session_id, type_, scene, speaker)
        kw: list[tuple[int, float]] = []
        if strategy != "vector" or not use_vec:
            kw = self.keyword_list(conn, ask)
        return _Begun(ask, strategy, n, fetch, use_vec, kw, sp)

    def _finish(self, conn: Connection, b: _Begun) -> list[Hit]:
        """The vector half of a search (waits for the query's vector), fusion,
        rescoring and the rows."""
        kind, query, kw = b.ask.kind, b.ask.query, b.kw
        rows: Rows = {}
        vec = self._vector(conn, b.ask, b.space, rows) if b.use_vec else []
        filler: set[int] = set()
        # A query with content is never answered by a content-free
        # message; one without ("thanks") may look for them, ranked last.
        keep_filler = is_low_information(query)
        if kind == "l0":
            # The candidates' rows, read once: their low_info flags now, the
            # hits' text at the end (memstore.search.hits).
            rows = read_rows(conn, kind, b.ask.user_id, {i for i, _ in kw} | {i for i, _ in vec})
            filler = rescore.low_info(rows)
            kw = rescore.content_first(kw, filler, keep_filler)[: b.fetch]
            vec = rescore.content_first(vec, filler, keep_filler)[: b.fetch]
        # Hybrid without a ready vector space is still fused (from the
        # keyword list alone), so its scores keep their 0..1 meaning and a
        # recall threshold works the same while vectors catch up.
        mode = "keyword" if b.strategy == "vector" and not b.use_vec else b.strategy
        ranked = rescore.fuse(
            mode,
            kw,
            vec,
            rrf_k=self.rrf_k,
            vector_weight=self.vector_weight,
            vectors=b.use_vec,
        )
        if kind == "l0" and mode == "hybrid":
            ranked = rescore.conversation_context(
                conn,
                query,
                ranked,
                filler,
                neighbour_weight=self.neighbour_weight,
                speaker_boost=self.speaker_boost,
            )
        if filler and keep_filler:
            # Lending never reaches them (_ADJACENT), so no new ones appear here.
            ranked = rescore.demote(ranked, filler)
        if kind == "l0" and b.ask.speaker:
            ranked = rescore.of_speaker(conn, ranked, b.ask.speaker)
        return materialise(conn, kind, b.ask.user_id, ranked[: b.n], kw, vec, rows)

    @contextmanager
    def reading(self, conn: Connection | None) -> Iterator[Connection]:
        """``conn`` when the caller has a read transaction, else a new one."""
        if conn is not None:
            yield conn
        else:
            with self.db.read() as own:
                yield own

    def prefetch_query(self, query: str) -> None:
        """Start embedding ``query`` now (``QueryVectors.prefetch``)."""
        self.queries.prefetch(query)

    def query_blob(self, query: str) -> bytes:
        return self.queries.blob(query)

    def vector_ready(self, kind: str) -> bool:
        with self.db.read() as conn:
            return self._vector_ready(conn, kind)

    # -- pieces ------------------------------------------------------------------

    def _model(self, kind: str) -> str | None:
        """The model id of ``kind``'s vector space, None without an embedder."""
        if self.embedder is None:
            return None
        return spaces.space_model_id(kind, self.embedder.model_id, self.context_vectors)

    def space(self, conn: Connection, kind: str) -> spaces.Space | None:
        model = self._model(kind)
        return None if model is None else spaces.get_space(conn, kind, model)

    def _vector_ready(self, conn: Connection, kind: str) -> bool:
        sp = self.space(conn, kind)
        return sp is not None and sp.ready

    def read_ahead(self, conn: Connection, kind: str, user_id: str, strategy: str) -> None:
        """A ``search`` of ``kind`` for ``user_id`` follows in ``conn``'s
        transaction: send its first read with the caller's next one."""
        model = self._model(kind) if strategy != "keyword" else None
        if model is not None:
            spaces.get_space_ahead(conn, kind, model)
        if strategy != "vector":
            keyword.read_ahead(conn, kind, user_id)

    def keyword_list(self, conn: Connection, q: Ask) -> list[tuple[int, float]]:
        return keyword.search(
            conn,
            q.kind,
            q.query,
            q.user_id,
            q.k,
            l1_filter=_L1_ACTIVE,
            hot=self.hot_postings,
            **q.where,
        )

    def _vector(
        self, conn: Connection, q: Ask, sp: spaces.Space | None, rows: Rows | None = None
    ) -> list[tuple[int, float]]:
        """The vector list (id, cosine distance); ``rows``: filled with the
        rows of the memories it returns (read anyway to drop retired ones)."""
        if sp is None or not q.query.strip():
            return []
        try:
            blob = self.query_blob(q.query)
        except MemstoreError:
            return []  # an unreachable remote embedder degrades search to keyword
        # L1 asks for more, as retired memories and other generations keep
        # their vectors and are dropped afterwards (_live_memories).
        want = min(q.k * (3 if q.kind == "l1" else 1), 4096)
        # In memory (memstore.vectors.hot), unless a filter only vec0 can serve.
        if q.kind == "l0" or not (q.type_ or q.scene):
            got = self.hot.search(conn, sp, q.user_id, from_blob(blob, sp.dims), want, q.session_id)
            if got is not None:
                return (
                    self._live_memories(conn, q.user_id, got, q.k, rows) if q.kind == "l1" else got
                )
        filters = (
            {"session_id": q.session_id} if q.kind == "l0" else {"mtype": q.type_, "scene": q.scene}
        )
        engine = backend.of(conn)
        # An int8 space is searched with the query quantised too, which can
        # swap rows near the cut: a few more are fetched and re-scored with
        # the float query, as the in-memory copy ranks them.
        extra = 0 if sp.element == "float32" else max(8, want // 4)
        found = engine.vector_knn(
            conn,
            sp.table_name,
            q.kind,
            q.user_id,
            blob,
            want + extra,
            {c: v for c, v in filters.items() if v},
            sp.element,
        )
        # Scored as the in-memory copy scores (hot.exact_distances): the
        # engine's own distances differ from it in the last digits.
        stored = engine.vectors_by_id(conn, sp.table_name, [i for i, _ in found], sp.element)
        found = exact_distances(
            from_blob(blob, sp.dims),
            [(i, from_blob(stored[i], sp.dims)) for i, _ in found if i in stored],
        )[:want]
        return self._live_memories(conn, q.user_id, found, q.k, rows) if q.kind == "l1" else found

    @staticmethod
    def _live_memories(
        conn: Connection,
        user_id: str,
        found: list[tuple[int, float]],
        k: int,
        rows: Rows | None = None,
    ) -> list[tuple[int, float]]:
        """``found`` without retired memories and other generations (they keep
        their vectors), cut to ``k``; their rows go to ``rows`` for the hits."""
        if found:
            marks, ids = in_list([int(i) for i, _ in found])
            # Driver-level: a text() clause is compiled by SQLAlchemy on each
            # call, which cost more than the read. The hits' columns come
            # with it, so the hits need no second read of the same rows.
            sql = f"SELECT {L1_COLS} FROM l1_memories m WHERE m.id IN ({marks}) AND m.user_id = ? "
            live = {
                int(r[0]): r
                for r in driver_rows(
                    conn, driver_sql(conn, f"{sql}AND {_L1_ACTIVE}"), (*ids, user_id)
                )
            }
            found = [r for r in found if r[0] in live][:k]
            if rows is not None:
                rows.update((i, live[i]) for i, _ in found)
        return found
