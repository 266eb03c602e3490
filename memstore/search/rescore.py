"""Ranking search candidates: fusing the keyword and vector lists, and
conversation-aware rescoring of messages.

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

from sqlalchemy import Connection

from memstore.db import rawexec
from memstore.db.sqlfn import in_list
from memstore.search.hits import LOW_INFO, Rows

_WORD = re.compile(r"\w+")

# Previous / next message with content of the same user and session, through
# the (user_id, session_id, position) index: an acknowledgement between two
# turns must not cut the link between them.
_ADJACENT = (
    "(SELECT {agg}(a.id) FROM l0_messages a WHERE a.user_id = m.user_id "
    "AND a.session_id = m.session_id AND a.position {op}= m.position AND a.id {op} m.id "
    "AND a.low_info = 0)"
)

# Score factor of content-free messages after they are placed below content.
_FILLER_FACTOR = 0.5


def _ordered(scores: dict[int, float]) -> list[tuple[int, float]]:
    return sorted(scores.items(), key=lambda x: (-x[1], x[0]))


def low_info(rows: Rows) -> set[int]:
    """The content-free messages among ``rows`` (``hits.read_rows`` of l0_messages)."""
    return {i for i, r in rows.items() if r[LOW_INFO]}


def content_first(
    rows: list[tuple[int, float]], filler: set[int], keep: bool
) -> list[tuple[int, float]]:
    """``rows`` with content-free messages moved to the end (``keep``) or
    dropped, order kept otherwise."""
    if not filler:
        return rows
    content = [r for r in rows if r[0] not in filler]
    return content + [r for r in rows if r[0] in filler] if keep else content


def demote(ranked: list[tuple[int, float]], filler: set[int]) -> list[tuple[int, float]]:
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


def fuse(
    strategy: str,
    kw: list[tuple[int, float]],
    vec: list[tuple[int, float]],
    *,
    rrf_k: int,
    vector_weight: float,
    vectors: bool = True,
) -> list[tuple[int, float]]:
    """One ranked (id, score) list from the keyword list (bm25, lower is
    better) and the vector list (distance)."""
    if strategy == "keyword":
        # bm25() is negative, lower is better; present it as a positive score.
        return [(i, -s) for i, s in kw]
    if strategy == "vector":
        return [(i, 1.0 - d) for i, d in vec]
    k, wv = rrf_k, vector_weight
    scores: dict[int, float] = {}
    for rank, (i, _) in enumerate(kw, start=1):
        scores[i] = scores.get(i, 0.0) + 1.0 / (k + rank)
    for rank, (i, _) in enumerate(vec, start=1):
        scores[i] = scores.get(i, 0.0) + wv / (k + rank)
    best = (1.0 + (wv if vectors else 0.0)) / (k + 1)
    return _ordered({i: s / best for i, s in scores.items()})


def conversation_context(
    conn: Connection,
    query: str,
    ranked: list[tuple[int, float]],
    filler: set[int],
    *,
    neighbour_weight: float,
    speaker_boost: float,
) -> list[tuple[int, float]]:
    """Conversation-aware rescoring of fused L0 candidates.

    Each candidate with content lends ``neighbour_weight`` of its score to
    the previous and next message with content of its session (the answer
    often sits next to the turn that matches the question); and when the
    query names exactly one of the candidates' speakers, that speaker's
    messages get ``speaker_boost``. Both were measured on LoCoMo (bench
    locomo). ``filler``: candidates known to be content-free.
    """
    if not ranked or (not neighbour_weight and not speaker_boost):
        return ranked
    scores = dict(ranked)
    marks, ids = in_list([int(i) for i in scores])
    # Driver-level, as every statement of a search: compiling a text() clause
    # per query cost about as much as running it.
    rows = rawexec.rows(
        conn,
        f"SELECT m.id, m.speaker, {_ADJACENT.format(op='<', agg='max')}, "
        f"{_ADJACENT.format(op='>', agg='min')} FROM l0_messages m WHERE m.id IN ({marks})",
        ids,
    )
    out = dict(scores)
    if neighbour_weight:
        for cid, _, prev_id, next_id in rows:
            if cid in filler:
                continue
            for nid in (prev_id, next_id):
                if nid is not None:
                    out[int(nid)] = out.get(int(nid), 0.0) + neighbour_weight * scores[cid]
    if speaker_boost:
        speakers = {int(r[0]): r[1] for r in rows}
        extra = [i for i in out if i not in speakers]
        if extra:
            marks, wanted = in_list([int(i) for i in extra])
            sql = f"SELECT id, speaker FROM l0_messages WHERE id IN ({marks})"
            speakers.update({int(r[0]): r[1] for r in rawexec.rows(conn, sql, wanted)})
        words = {w.casefold() for w in _WORD.findall(query)}
        named = {s for s in speakers.values() if s and s.casefold() in words}
        if len(named) == 1:
            (who,) = named
            for i, sp in speakers.items():
                if sp == who and i in out:
                    out[i] += speaker_boost
    return _ordered(out)


def of_speaker(
    conn: Connection, ranked: list[tuple[int, float]], speaker: str
) -> list[tuple[int, float]]:
    """``ranked`` without the messages of other speakers (names case-folded)."""
    if not ranked:
        return ranked
    marks, ids = in_list([int(i) for i, _ in ranked])
    sql = f"SELECT id, speaker FROM l0_messages WHERE id IN ({marks})"
    who = {int(r[0]): r[1] for r in rawexec.rows(conn, sql, ids)}
    want = speaker.casefold()
    return [(i, s) for i, s in ranked if (who.get(i) or "").casefold() == want]
