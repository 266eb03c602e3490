"""What lifts hybrid above BM25 and dense on LoCoMo: fusion variants, measured.

Each variant re-ranks the same two candidate lists the engine builds — the
FTS5 keyword list from ``SearchEngine.keyword_list`` (fetched deep, then cut) and
the exact cosine ranking over the store's own vectors (what the vec0 full
scan inside the user's partition returns) — so a variant's gain is due to
the fusion change alone and can be moved into ``memstore/search/engine.py``
as measured. The first variant is plain RRF (k = 60, 80 candidates per list),
the engine's hybrid before these measurements; the last one emulates the
engine's current defaults (see ``Settings``), whose real numbers are the
``hybrid`` row of the main table.

"Context" variants embed each turn together with the turn before it
(``prev\\ncur``, same e5 passage side): that is a change to what the L0
projection would embed, costing one more embedding per turn.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from tqdm import tqdm

from memstore.bench.locomo_index import (
    CATEGORIES,
    ConvIndex,
    FloatMat,
    Scores,
    scored_questions,
    top_ids,
)
from memstore.search.engine import Ask


@dataclass(frozen=True)
class Variant:
    name: str
    fetch: int = 80
    rrf_k: int = 60
    w_kw: float = 1.0
    w_vec: float = 1.0
    neighbours: float = 0.0  # share of each adjacent turn's fused score added
    speaker_boost: float = 0.0  # bonus (in units of a rank-1 RRF score) for the named speaker
    prf: float = 0.0  # Rocchio weight of the mean of the top-3 dense hits
    context: bool = False  # dense over "previous turn + turn" vectors


VARIANTS: tuple[Variant, ...] = (
    Variant("plain RRF (k=60, 80/list)"),
    Variant("fetch 20/list", fetch=20),
    Variant("fetch 200/list", fetch=200),
    Variant("RRF k=20", rrf_k=20),
    Variant("RRF k=120", rrf_k=120),
    Variant("weights kw 1 : vec 1.5", w_vec=1.5),
    Variant("weights kw 1 : vec 2", w_vec=2.0),
    Variant("weights kw 1.5 : vec 1", w_kw=1.5),
    Variant("+ neighbour score 0.3", neighbours=0.3),
    Variant("+ neighbour score 0.5", neighbours=0.5),
    Variant("+ speaker boost 0.3", speaker_boost=0.3),
    Variant("+ dense PRF 0.5", prf=0.5),
    Variant("context vectors (prev+turn)", context=True),
    Variant("context + vec 1.5", context=True, w_vec=1.5),
    Variant("context + vec 1.5 + neighbour 0.3", context=True, w_vec=1.5, neighbours=0.3),
    Variant(
        "context + vec 1.5 + nb 0.3 + speaker 0.3",
        context=True,
        w_vec=1.5,
        neighbours=0.3,
        speaker_boost=0.3,
    ),
    Variant(
        "engine defaults: 20/list, context, nb 0.3, speaker 0.3",
        fetch=20,
        context=True,
        neighbours=0.3,
        speaker_boost=0.3,
    ),
)


def context_texts(idx: ConvIndex) -> list[str]:
    """Each turn preceded by the previous turn of the same session."""
    out: list[str] = []
    for i, t in enumerate(idx.texts):
        prev = idx.texts[i - 1] if i > 0 and idx.sessions[i - 1] == idx.sessions[i] else ""
        out.append(f"{prev}\n{t}" if prev else t)
    return out


def _keyword_lists(idx: ConvIndex, question: str, k: int) -> list[int]:
    """The engine's FTS5 list (turn indexes, best first), fetched ``k`` deep."""
    eng = idx.store.internals.search_engine
    with idx.store.internals.db.read() as conn:
        rows = eng.keyword_list(conn, Ask("l0", question, idx.conv.sample_id, k, None, None, None))
    return [idx.rowid_to_idx[r] for r, _ in rows]


def _named_speakers(idx: ConvIndex, question: str) -> set[str]:
    words = set(re.findall(r"\w+", question))
    return {s for s in (idx.conv.speaker_a, idx.conv.speaker_b) if s in words}


def fuse(
    v: Variant,
    kw: Sequence[int],
    dense: np.ndarray[Any, Any],
    idx: ConvIndex,
    speakers: set[str],
) -> np.ndarray[Any, Any]:
    """Fused scores for every turn (0 = not a candidate)."""
    n = len(idx.ids)
    scores = np.zeros(n, dtype=np.float64)
    for rank, i in enumerate(kw[: v.fetch], start=1):
        scores[i] += v.w_kw / (v.rrf_k + rank)
    order = np.argsort(-dense, kind="stable")[: v.fetch]
    for rank, i in enumerate(order, start=1):
        scores[i] += v.w_vec / (v.rrf_k + rank)
    if v.neighbours:
        same_prev = np.array([i > 0 and idx.sessions[i - 1] == idx.sessions[i] for i in range(n)])
        left = np.where(same_prev, np.roll(scores, 1), 0.0)
        same_next = np.roll(same_prev, -1)
        same_next[-1] = False
        right = np.where(same_next, np.roll(scores, -1), 0.0)
        scores = scores + v.neighbours * (left + right)
    if v.speaker_boost and len(speakers) == 1:
        best = (v.w_kw + v.w_vec) / (v.rrf_k + 1)
        (name,) = speakers
        mine = np.array([t.startswith(f"{name}:") for t in idx.texts])
        scores = scores + np.where((scores > 0) & mine, v.speaker_boost * best, 0.0)
    return scores


def run_variants(
    indexes: Sequence[ConvIndex],
    qvecs: dict[tuple[str, int], FloatMat],
    *,
    variants: Sequence[Variant] = VARIANTS,
    log: Callable[[str], None] = lambda _: None,
    progress: bool = True,
) -> dict[str, Any]:
    """Score every variant on every scored question; returns name → summary."""
    deepest = max(v.fetch for v in variants)
    need_context = any(v.context for v in variants)
    scores = {v.name: Scores() for v in variants}
    for idx in indexes:
        emb = idx.store.internals.embedder
        assert emb is not None
        ctx_vecs: FloatMat | None = None
        if need_context:
            log(f"{idx.conv.sample_id}: embedding {len(idx.texts)} context passages")
            texts = context_texts(idx)
            chunks = [
                emb.embed_documents(texts[i : i + 64])
                for i in tqdm(
                    range(0, len(texts), 64),
                    desc=f"context {idx.conv.sample_id}",
                    disable=not progress,
                    leave=False,
                )
            ]
            ctx_vecs = np.vstack(chunks).astype(np.float32)
        for qi, q in enumerate(scored_questions(idx.conv)):
            qv = qvecs[(idx.conv.sample_id, qi)]
            kw = _keyword_lists(idx, q.question, deepest)
            dense = idx.vecs @ qv
            speakers = _named_speakers(idx, q.question)
            for v in variants:
                d = dense
                if v.context:
                    assert ctx_vecs is not None
                    d = ctx_vecs @ qv
                if v.prf:
                    top = np.argsort(-d)[:3]
                    base = ctx_vecs if v.context and ctx_vecs is not None else idx.vecs
                    q2 = qv + v.prf * base[top].mean(axis=0)
                    d = base @ (q2 / np.linalg.norm(q2))
                fused = fuse(v, kw, d, idx, speakers)
                scores[v.name].add(q.category, top_ids(fused, idx.ids), q.evidence)
    return {name: sc.summary() for name, sc in scores.items()}


def format_variants(res: dict[str, Any]) -> str:
    lines = [
        "fusion variants (same candidate lists; R@10 overall and per category, delta vs plain RRF)",
        f"{'variant':<42}{'R@5':>7}{'R@10':>7}{'dR@10':>7}{'R@20':>7}{'NDCG10':>8}"
        + "".join(f"{'c' + str(c):>7}" for c in CATEGORIES),
    ]
    base = next(iter(res.values()))["overall"]["recall@10"]
    for name, s in res.items():
        o = s["overall"]
        lines.append(
            f"{name:<42}{o['recall@5']:>7.3f}{o['recall@10']:>7.3f}"
            f"{o['recall@10'] - base:>+7.3f}{o['recall@20']:>7.3f}{o['ndcg@10']:>8.3f}"
            + "".join(f"{s['per_category'][str(c)]['recall@10']:>7.3f}" for c in CATEGORIES)
        )
    return "\n".join(lines)
