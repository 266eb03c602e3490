"""The search engine behind ``search_conversations`` and ``search_memories``.

Isolation: every query filters by ``user_id`` inside its SQL, including the
KNN (``user_id`` is the vec0 partition key), never after the fact. User text
reaches FTS5 only through ``build_match``, which quotes every term.
Hybrid is reciprocal-rank fusion (k = 60) of the keyword and vector lists; its
score is normalised so that rank 1 in both lists is 1.0.

Content-free conversation messages ("Noted.", "ok", emoji; ``l0_messages.low_info``,
see ``memstore.text.info``) never outrank a message with content, whatever the
strategy. For a query with content they are left out (they cannot answer it);
for a content-free query ("thanks") they go to the end of each candidate list
before fusion and end up after every content hit, with a lower score. Either
way they take no part in neighbour scoring.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

from sqlalchemy import Connection, text

from memstore.config import Settings
from memstore.db.engine import Database
from memstore.db.sqlfn import driver_rows, driver_sql
from memstore.embeddings import Embedder, check_vectors, from_blob, to_blob
from memstore.errors import InvalidInputError, MemstoreError
from memstore.l0.capture import check_id
from memstore.search import bm25, keyword_pg
from memstore.search.filters import row_filters
from memstore.text import build_match, is_low_information
from memstore.vectors import pg as vector_pg
from memstore.vectors import spaces
from memstore.vectors.hot import HotPartitions

STRATEGIES = ("keyword", "vector", "hybrid")
MAX_LIMIT = 20


def clamp_limit(limit: object, default: int = 5) -> int:
    """1..20; anything non-numeric gives the default (as the upstream's tools do)."""
    try:
        n = int(str(limit).strip()) if not isinstance(limit, int | float) else int(limit)
    except (TypeError, ValueError):
        return default
    return max(1, min(MAX_LIMIT, n))


@dataclass(frozen=True)
class Hit:
    kind: str  # "l0" message or "l1" memory
    id: int
    ref: str  # message_id or memory_id
    text: str
    score: float
    user_id: str
    occurred_at: str
    session_id: str | None = None
    role: str | None = None
    type: str | None = None
    scene: str | None = None
    priority: int | None = None
    keyword_rank: int | None = None
    vector_rank: int | None = None
    similarity: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None and v != {}}


_L0_COLS = "m.id, m.message_id, m.text, m.user_id, m.occurred_at, m.session_id, m.role"
_L1_COLS = (
    "m.id, m.memory_id, m.content, m.user_id, m.occurred_at, m.type, m.scene_name, m.priority, "
    "m.activity_start, m.activity_end, m.origin"
)
_L1_ACTIVE = (
    "m.status = 'active' AND m.generation = coalesce("
    "(SELECT generation FROM active_generations g WHERE g.user_id = m.user_id), 0)"
)


_WORD = re.compile(r"\w+")

# Previous / next message with content of the same user and session, through
# the (user_id, session_id, position) index: an acknowledgement between two
# turns must not cut the link between them.
_ADJACENT = (
    "(SELECT {agg}(a.id) FROM l0_messages a WHERE a.user_id = m.user_id "
    "AND a.session_id = m.session_id AND a.position {op}= m.position AND a.id {op} m.id "
    "AND a.low_info = 0)"
)

# bm25() weights of the FTS columns (text, cjk, stem). Both views of a word
# count the same; a word matched exactly also matches its root, so exact
# matches outrank matches by root alone. (LoCoMo dev, keyword recall@10 with
# no root column / root weight 0.5 / 1 / 2: 0.572 / 0.606 / 0.616 / 0.624,
# hybrid flat; 1 is kept as the neutral choice: more would let the English
# roots of non-English words weigh more than the words themselves.)
_BM25_WEIGHTS = "1.0, 1.0, 1.0"
# Extra candidates fetched per list for conversation search, so that
# content-free messages pushed to the end do not leave the list short.
_L0_OVERFETCH = 2
# Score factor of content-free messages after they are placed below content.
_FILLER_FACTOR = 0.5


def _ordered(scores: dict[int, float]) -> list[tuple[int, float]]:
    return sorted(scores.items(), key=lambda x: (-x[1], x[0]))


def _low_info(conn: Connection, ids: set[int]) -> set[int]:
    """The content-free messages among ``ids`` (l0_messages row ids)."""
    if not ids:
        return set()
    marks = ",".join(str(i) for i in ids)
    # Driver-level: ids only, and compiling a text() clause per search cost
    # more than the lookup.
    sql = f"SELECT id FROM l0_messages WHERE id IN ({marks}) AND low_info = 1"
    return {int(r[0]) for r in driver_rows(conn, sql)}


def _content_first(
    rows: list[tuple[int, float]], filler: set[int], keep: bool
) -> list[tuple[int, float]]:
    """``rows`` with content-free messages moved to the end (``keep``) or
    dropped, order kept otherwise."""
    if not filler:
        return rows
    content = [r for r in rows if r[0] not in filler]
    return content + [r for r in rows if r[0] in filler] if keep else content


def _demote(ranked: list[tuple[int, float]], filler: set[int]) -> list[tuple[int, float]]:
    """Content first; content-free hits after it, with scores below every content hit.

    Their scores are capped at the lowest content score and then lowered, so
    the list stays sorted by score and a score threshold treats them as weak.
    """
    content = [r for r in ranked if r[0] not in filler]
    if len(content) == len(ranked):
        return ranked
    floor = min((s for _, s in content), default=None)
    rest = []
    for i, s in ranked:
        if i in filler:
            capped = s if floor is None else min(s, floor)
            # Monotonic for negative scores too (cosine similarity can be < 0).
            rest.append((i, capped - abs(capped) * (1.0 - _FILLER_FACTOR)))
    return content + rest


class SearchEngine:
    def __init__(self, db: Database, embedder: Embedder | None, settings: Settings) -> None:
        self.db = db
        self.embedder = embedder
        self.rrf_k = settings.recall.rrf_k
        self.candidates = max(1, settings.recall.search_candidates)
        self.vector_weight = settings.recall.vector_weight
        self.neighbour_weight = settings.recall.neighbour_weight
        self.speaker_boost = settings.recall.speaker_boost
        self.context_vectors = settings.embedding.context_vectors
        self._qcache: OrderedDict[str, bytes] = OrderedDict()
        self._qlock = threading.Lock()
        self._qpending: dict[str, Future[bytes]] = {}
        # Large conversation partitions are searched in memory (vectors.hot).
        self.hot = HotPartitions()

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
    ) -> list[Hit]:
        """``conn``: search inside the caller's read transaction (recall runs
        both of its searches and its row reads in one snapshot)."""
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
        with self.reading(conn) as conn:
            use_vec = strategy != "keyword" and self._vector_ready(conn, kind)
            kw: list[tuple[int, float]] = []
            vec: list[tuple[int, float]] = []
            if strategy != "vector" or not use_vec:
                kw = self._keyword(conn, kind, query, user_id, deep, session_id, type, scene)
            if use_vec:
                vec = self._vector(conn, kind, query, user_id, deep, session_id, type, scene)
            filler: set[int] = set()
            # A query with content is never answered by a content-free
            # message; one without ("thanks") may look for them, ranked last.
            keep_filler = is_low_information(query)
            if kind == "l0":
                filler = _low_info(conn, {i for i, _ in kw} | {i for i, _ in vec})
                kw = _content_first(kw, filler, keep_filler)[:fetch]
                vec = _content_first(vec, filler, keep_filler)[:fetch]
            # Hybrid without a ready vector space is still fused (from the
            # keyword list alone), so its scores keep their 0..1 meaning and a
            # recall threshold works the same while vectors catch up.
            mode = "keyword" if strategy == "vector" and not use_vec else strategy
            ranked = self._fuse(mode, kw, vec, vectors=use_vec)
            if kind == "l0" and mode == "hybrid":
                ranked = self._conversation_context(conn, query, ranked, filler)
            if filler and keep_filler:
                # Lending never reaches them (_ADJACENT), so no new ones appear here.
                ranked = _demote(ranked, filler)
            return self._materialise(conn, kind, user_id, ranked[:n], kw, vec)

    @contextmanager
    def reading(self, conn: Connection | None) -> Iterator[Connection]:
        """``conn`` when the caller has a read transaction, else a new one."""
        if conn is not None:
            yield conn
        else:
            with self.db.read() as own:
                yield own

    def vector_ready(self, kind: str) -> bool:
        with self.db.read() as conn:
            return self._vector_ready(conn, kind)

    # -- pieces ------------------------------------------------------------------

    def _space(self, conn: Connection, kind: str) -> spaces.Space | None:
        if self.embedder is None:
            return None
        model = spaces.space_model_id(kind, self.embedder.model_id, self.context_vectors)
        return spaces.get_space(conn, kind, model)

    def _vector_ready(self, conn: Connection, kind: str) -> bool:
        sp = self._space(conn, kind)
        return sp is not None and sp.ready

    def _keyword(
        self,
        conn: Connection,
        kind: str,
        query: str,
        user_id: str,
        k: int,
        session_id: str | None,
        type_: str | None,
        scene: str | None,
    ) -> list[tuple[int, float]]:
        if conn.dialect.name == "postgresql":
            return keyword_pg.keyword(
                conn,
                kind,
                query,
                user_id,
                k,
                session_id=session_id,
                type_=type_,
                scene=scene,
                l1_filter=_L1_ACTIVE,
            )
        if kind == "l0":
            # Ranked with the user's own statistics, reading only the user's
            # postings (memstore.search.bm25).
            return bm25.keyword_messages(conn, query, user_id, k, session_id=session_id)
        match = build_match(query)
        if match is None:
            return []
        params: dict[str, Any] = {"q": match, "u": user_id, "k": k}
        sql = (
            f"SELECT m.id, bm25(l1_fts, {_BM25_WEIGHTS}) AS s FROM l1_fts "
            "JOIN l1_memories m ON m.id = l1_fts.rowid "
            f"WHERE l1_fts MATCH :q AND m.user_id = :u AND {_L1_ACTIVE}"
        )
        sql += row_filters(kind, params, session_id=session_id, type_=type_, scene=scene)
        sql += " ORDER BY s LIMIT :k"
        return [(int(r[0]), float(r[1])) for r in conn.execute(text(sql), params)]

    def _query_blob(self, query: str) -> bytes:
        """The query's vector as a blob, embedded once: a call for a query that
        is being embedded right now (``prefetch_query``, another search)
        waits for that embedding instead of computing it again."""
        assert self.embedder is not None
        with self._qlock:
            hit = self._qcache.get(query)
            if hit is not None:
                self._qcache.move_to_end(query)
                return hit
            running = self._qpending.get(query)
            mine = running is None
            if running is None:
                running = self._qpending[query] = Future()
        if mine:
            self._embed_query(query, running)
        return running.result()

    def _embed_query(self, query: str, into: Future[bytes]) -> None:
        assert self.embedder is not None
        try:
            vec = check_vectors(
                self.embedder.embed_query(query).reshape(1, -1), self.embedder.dimensions
            )
            blob = to_blob(vec[0])
        except BaseException as exc:  # handed to every waiter; the next call retries
            with self._qlock:
                self._qpending.pop(query, None)
            into.set_exception(exc)
            return
        with self._qlock:
            self._qcache[query] = blob
            while len(self._qcache) > 256:
                self._qcache.popitem(last=False)
            self._qpending.pop(query, None)
        into.set_result(blob)

    def prefetch_query(self, query: str) -> None:
        """Start embedding ``query`` in a daemon thread, so the embedding (native
        code that releases the GIL) overlaps the caller's other reads and the
        keyword searches; a search that needs the vector waits only for what
        is left of it. Registered before the thread starts, so no search can
        embed the same query a second time."""
        if self.embedder is None or not query.strip():
            return
        with self._qlock:
            if query in self._qcache or query in self._qpending:
                return
            into: Future[bytes] = Future()
            self._qpending[query] = into
        threading.Thread(
            target=self._embed_query, args=(query, into), name="memstore-query-embed", daemon=True
        ).start()

    def _vector(
        self,
        conn: Connection,
        kind: str,
        query: str,
        user_id: str,
        k: int,
        session_id: str | None,
        type_: str | None,
        scene: str | None,
    ) -> list[tuple[int, float]]:
        sp = self._space(conn, kind)
        if sp is None or not query.strip():
            return []
        try:
            blob = self._query_blob(query)
        except MemstoreError:
            return []  # an unreachable remote embedder degrades search to keyword
        if kind == "l0":
            got = self.hot.search(conn, sp, user_id, from_blob(blob, sp.dims), k, session_id)
            if got is not None:
                return got
        want = min(k * (3 if kind == "l1" else 1), 4096)
        if conn.dialect.name == "postgresql":
            filters = (
                {"session_id": session_id} if kind == "l0" else {"mtype": type_, "scene": scene}
            )
            rows = vector_pg.knn(
                conn,
                sp.table_name,
                kind,
                user_id,
                blob,
                want,
                {c: v for c, v in filters.items() if v},
            )
            return self._live_memories(conn, user_id, rows, k) if kind == "l1" else rows
        params: dict[str, Any] = {"v": blob, "u": user_id, "k": want}
        sql = (
            f'SELECT rowid, distance FROM "{sp.table_name}" '
            "WHERE embedding MATCH :v AND k = :k AND user_id = :u"
        )
        if kind == "l0" and session_id:
            sql += " AND session_id = :s"
            params["s"] = session_id
        if kind == "l1":
            if type_:
                sql += " AND mtype = :t"
                params["t"] = type_
            if scene:
                sql += " AND scene = :sc"
                params["sc"] = scene
        rows = [(int(r[0]), float(r[1])) for r in conn.execute(text(sql), params)]
        return self._live_memories(conn, user_id, rows, k) if kind == "l1" else rows

    @staticmethod
    def _live_memories(
        conn: Connection, user_id: str, rows: list[tuple[int, float]], k: int
    ) -> list[tuple[int, float]]:
        if rows:
            # Retired memories and other generations keep their vectors; drop them here.
            ids = ",".join(str(i) for i, _ in rows)
            live = {
                int(r[0])
                for r in conn.execute(
                    text(
                        f"SELECT m.id FROM l1_memories m WHERE m.id IN ({ids}) "
                        f"AND m.user_id = :u AND {_L1_ACTIVE}"
                    ),
                    {"u": user_id},
                )
            }
            rows = [r for r in rows if r[0] in live][:k]
        return rows

    def _fuse(
        self,
        strategy: str,
        kw: list[tuple[int, float]],
        vec: list[tuple[int, float]],
        *,
        vectors: bool = True,
    ) -> list[tuple[int, float]]:
        if strategy == "keyword":
            # bm25() is negative, lower is better; present it as a positive score.
            return [(i, -s) for i, s in kw]
        if strategy == "vector":
            return [(i, 1.0 - d) for i, d in vec]
        k, wv = self.rrf_k, self.vector_weight
        scores: dict[int, float] = {}
        for rank, (i, _) in enumerate(kw, start=1):
            scores[i] = scores.get(i, 0.0) + 1.0 / (k + rank)
        for rank, (i, _) in enumerate(vec, start=1):
            scores[i] = scores.get(i, 0.0) + wv / (k + rank)
        best = (1.0 + (wv if vectors else 0.0)) / (k + 1)
        return _ordered({i: s / best for i, s in scores.items()})

    def _conversation_context(
        self,
        conn: Connection,
        query: str,
        ranked: list[tuple[int, float]],
        filler: set[int],
    ) -> list[tuple[int, float]]:
        """Conversation-aware rescoring of fused L0 candidates.

        Each candidate with content lends ``neighbour_weight`` of its score to
        the previous and next message with content of its session (the answer
        often sits next to the turn that matches the question); and when the
        query names exactly one of the candidates' speakers, that speaker's
        messages get ``speaker_boost``. Both were measured on LoCoMo (bench
        locomo). ``filler``: candidates known to be content-free.
        """
        if not ranked or (not self.neighbour_weight and not self.speaker_boost):
            return ranked
        scores = dict(ranked)
        ids = ",".join(str(i) for i in scores)
        rows = conn.execute(
            text(
                f"SELECT m.id, m.speaker, {_ADJACENT.format(op='<', agg='max')}, "
                f"{_ADJACENT.format(op='>', agg='min')} FROM l0_messages m WHERE m.id IN ({ids})"
            )
        ).all()
        out = dict(scores)
        if self.neighbour_weight:
            for cid, _, prev_id, next_id in rows:
                if cid in filler:
                    continue
                for nid in (prev_id, next_id):
                    if nid is not None:
                        out[int(nid)] = out.get(int(nid), 0.0) + self.neighbour_weight * scores[cid]
        if self.speaker_boost:
            speakers = {int(r[0]): r[1] for r in rows}
            extra = [i for i in out if i not in speakers]
            if extra:
                marks = ",".join(str(i) for i in extra)
                speakers.update(
                    {
                        int(r[0]): r[1]
                        for r in conn.execute(
                            text(f"SELECT id, speaker FROM l0_messages WHERE id IN ({marks})")
                        )
                    }
                )
            words = {w.casefold() for w in _WORD.findall(query)}
            named = {s for s in speakers.values() if s and s.casefold() in words}
            if len(named) == 1:
                (who,) = named
                for i, sp in speakers.items():
                    if sp == who and i in out:
                        out[i] += self.speaker_boost
        return _ordered(out)

    def _materialise(
        self,
        conn: Connection,
        kind: str,
        user_id: str,
        ranked: Sequence[tuple[int, float]],
        kw: list[tuple[int, float]],
        vec: list[tuple[int, float]],
    ) -> list[Hit]:
        if not ranked:
            return []
        ids = ",".join(str(i) for i, _ in ranked)
        kw_rank = {i: r for r, (i, _) in enumerate(kw, start=1)}
        vec_rank = {i: r for r, (i, _) in enumerate(vec, start=1)}
        sims = {i: 1.0 - d for i, d in vec}
        cols, table = (_L0_COLS, "l0_messages") if kind == "l0" else (_L1_COLS, "l1_memories")
        sql = f"SELECT {cols} FROM {table} m WHERE m.id IN ({ids}) AND m.user_id = ?"
        rows = {int(r[0]): r for r in driver_rows(conn, driver_sql(conn, sql), (user_id,))}
        out: list[Hit] = []
        for i, score in ranked:
            r = rows.get(i)
            if r is None:
                continue
            common: dict[str, Any] = {
                "kind": kind,
                "id": i,
                "ref": r[1],
                "text": r[2],
                "score": round(float(score), 6),
                "user_id": r[3],
                "occurred_at": r[4],
                "keyword_rank": kw_rank.get(i),
                "vector_rank": vec_rank.get(i),
                "similarity": round(sims[i], 6) if i in sims else None,
            }
            if kind == "l0":
                out.append(Hit(**common, session_id=r[5], role=r[6]))
            else:
                extra = {
                    k: v
                    for k, v in (
                        ("activity_start", r[8]),
                        ("activity_end", r[9]),
                        ("origin", r[10]),
                    )
                    if v
                }
                out.append(Hit(**common, type=r[5], scene=r[6], priority=int(r[7]), extra=extra))
        return out
