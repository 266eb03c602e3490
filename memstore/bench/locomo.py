"""LoCoMo retrieval benchmark: turn-level recall of memstore's conversation search.

Each conversation goes into a fresh store in a temporary directory: one
message per turn, for user = sample id, session = ``session_<n>``, role
``user`` for speaker A and ``assistant`` for speaker B, text ``"Name: text"``
(questions name the speaker, so the name must be searchable), timestamp =
the session date, message id = the ``dia_id``. After ``Store.reindex`` every
question of categories 1–4 is searched (limit 20) and scored against its
evidence ids.

Baselines, in the same run over the same texts: BM25 (``rank_bm25.BM25Okapi``,
lower-cased ``\\w+`` tokens, not our FTS5) and dense-only (numpy cosine over the
very vectors the store embedded, read back from its embedding cache, with
the query embedded by the same embedder).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
from tqdm import tqdm

from memstore.bench.locomo_chatlike import is_filler_id, make_chatlike
from memstore.bench.locomo_data import load_locomo, summarize_evidence
from memstore.bench.locomo_index import (
    CATEGORIES,
    CATEGORY_NAMES,
    STRATEGIES,
    ConvIndex,
    QueryCache,
    Scores,
    ingest,
    locomo_settings,
    match_element,
    read_index,
    scored_questions,
    tokenize,
    top_ids,
)
from memstore.bench.metrics import mean, percentile
from memstore.records import SearchStrategy
from memstore.store import Store


def run_locomo(
    path: str | Path,
    *,
    strategies: Sequence[str] = STRATEGIES,
    embedder: str = "e5",
    limit_conversations: int | None = None,
    variants: bool = False,
    layers: bool = False,
    peers: Sequence[str] = (),
    chatlike: bool = False,
    workdir: Path | None = None,
    log: Callable[[str], None] = lambda _: None,
    progress: bool = True,
    vector_element: str | None = None,
) -> dict[str, Any]:
    """Ingest, embed, search and score; returns a JSON-ready dict.

    ``vector_element``: how the stores keep their vectors; "both": float32,
    then each store converted to int8 and its vector and hybrid searches run
    again ("vector int8", "hybrid int8": the same vectors, quantised).

    ``chatlike`` runs on :func:`~memstore.bench.locomo_chatlike.make_chatlike`
    of the data (filler replies inserted, never evidence) and also counts the
    questions whose top 3 hold a filler reply.
    """
    from rank_bm25 import BM25Okapi

    convs = load_locomo(path)[:limit_conversations]
    if chatlike:
        convs = make_chatlike(convs)
    ev = summarize_evidence(convs)
    both = vector_element == "both"
    again = [s for s in strategies if s != "keyword"] if both else []
    names = (*strategies, *(f"{s} int8" for s in again), "bm25", "dense")
    systems: dict[str, Scores] = {s: Scores() for s in names}
    filler_top3: dict[str, list[bool]] = {s: [] for s in systems}
    latency: dict[str, list[float]] = {s: [] for s in names[: len(strategies) + len(again)]}
    ingest_s = embed_s = 0.0
    turns_total = questions_total = skipped_evidence = 0
    indexes: list[ConvIndex] = []
    cache = QueryCache()
    variant_out: dict[str, Any] = {}
    per_conv: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    layer_acc = None
    if layers:
        from memstore.bench.layers import LayerScores

        layer_acc = LayerScores()
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        try:
            for conv in convs:
                store = Store.open(
                    Path(tmp) / f"{conv.sample_id}.db",
                    settings=locomo_settings(embedder, "float32" if both else vector_element),
                )
                assert store.internals.embedder is not None, "the LoCoMo bench needs an embedder"
                emb = store.internals.embedder
                t0 = time.perf_counter()
                ingest(conv, store)
                ingest_s += time.perf_counter() - t0
                turns_total += len(conv.turns)
                t0 = time.perf_counter()
                with tqdm(
                    total=len(conv.turns),
                    desc=f"embed {conv.sample_id}",
                    unit="turn",
                    disable=not progress,
                    leave=False,
                ) as bar:
                    store.reindex(progress=bar.update)
                embed_s += time.perf_counter() - t0
                idx = read_index(conv, store, emb)
                indexes.append(idx)
                bm25 = BM25Okapi([tokenize(t) for t in idx.texts])
                qs = scored_questions(conv)
                questions_total += len(qs)
                skipped_evidence += sum(len(q.skipped_evidence) for q in conv.questions)
                log(f"{conv.sample_id}: {len(conv.turns)} turns, {len(qs)} questions")
                start = {name: len(sc.rows) for name, sc in systems.items()}
                for qi, q in enumerate(
                    tqdm(qs, desc=f"search {conv.sample_id}", disable=not progress, leave=False)
                ):
                    for s in strategies:
                        refs, ms = _timed_search(store, conv.sample_id, q.question, s)
                        latency[s].append(ms)
                        systems[s].add(q.category, refs, q.evidence)
                        filler_top3[s].append(any(map(is_filler_id, refs[:3])))
                    bm = np.asarray(bm25.get_scores(tokenize(q.question)), dtype=np.float64)
                    refs = top_ids(bm, idx.ids)
                    systems["bm25"].add(q.category, refs, q.evidence)
                    filler_top3["bm25"].append(any(map(is_filler_id, refs[:3])))
                    qv = emb.embed_query(q.question)
                    cache.qvecs[(conv.sample_id, qi)] = qv
                    refs = top_ids(idx.vecs @ qv, idx.ids)
                    systems["dense"].add(q.category, refs, q.evidence)
                    filler_top3["dense"].append(any(map(is_filler_id, refs[:3])))
                if again:
                    match_element(store, "int8")
                    for q in qs:
                        for s in again:
                            refs, ms = _timed_search(store, conv.sample_id, q.question, s)
                            latency[f"{s} int8"].append(ms)
                            systems[f"{s} int8"].add(q.category, refs, q.evidence)
                # Per conversation too, to compare two settings on a held-out part.
                per_conv[conv.sample_id] = {
                    name: {
                        "recall@10": mean(m["recall@10"] for _, m in sc.rows[start[name] :]),
                        "n": len(sc.rows) - start[name],
                    }
                    for name, sc in systems.items()
                }
                if layer_acc is not None:
                    from memstore.bench.layers import run_layers_conversation

                    run_layers_conversation(conv, store, qs, layer_acc, progress=progress)
            if variants:
                from memstore.bench.locomo_variants import run_variants

                variant_out = run_variants(indexes, cache.qvecs, log=log, progress=progress)
            if peers:
                from memstore.bench.peers import capture_latency, run_peers

                extra["capture_ms"] = capture_latency(indexes, embedder, Path(tmp))
                extra["peers"] = run_peers(peers, indexes, log=log, progress=progress)
        finally:
            for idx in indexes:
                idx.store.close()
    return {
        "dataset": str(path),
        "conversations": len(convs),
        "turns": turns_total,
        "questions_scored": questions_total,
        "embedder": embedder,
        "chatlike": chatlike,
        "evidence": {**ev.__dict__, "skipped_ids_in_scored_data": skipped_evidence},
        "ingest_seconds": ingest_s,
        "ingest_turns_per_s": turns_total / ingest_s if ingest_s else None,
        "embed_seconds": embed_s,
        "embed_turns_per_s": turns_total / embed_s if embed_s else None,
        "latency_ms": {
            s: {"p50": percentile(v, 50), "p95": percentile(v, 95)} for s, v in latency.items()
        },
        "systems": {name: sc.summary() for name, sc in systems.items()},
        "per_conversation": per_conv,
        # Share of questions with a filler reply among the first 3 results.
        **({"filler_top3": {s: mean(v) for s, v in filler_top3.items()}} if chatlike else {}),
        "variants": variant_out,
        **extra,
        **({"layers": layer_acc.summary()} if layer_acc is not None else {}),
    }


def _timed_search(store: Store, user: str, question: str, strategy: str) -> tuple[list[str], float]:
    """The refs of a search's top 20 and its time in ms (the query's
    embedding included: the engine's query cache is emptied first)."""
    store.internals.search_engine.queries.cache.clear()
    t0 = time.perf_counter()
    hits = store.search_conversations(
        user, question, limit=20, strategy=cast(SearchStrategy, strategy)
    )
    return [h.ref for h in hits], (time.perf_counter() - t0) * 1000


def format_locomo(res: dict[str, Any]) -> str:
    ev = res["evidence"]
    variant = " (chat-like: filler replies inserted)" if res.get("chatlike") else ""
    lines = [
        f"LoCoMo {res['dataset']}{variant}: {res['conversations']} conversations, "
        f"{res['turns']} turns, "
        f"{res['questions_scored']} questions (categories 1-4), embedder {res['embedder']}",
        f"evidence: {ev['entries']} entries, {ev['repaired']} repaired, {ev['unparseable']} "
        f"unparseable, {ev['dangling']} dangling, {ev['questions_without_evidence']} questions "
        "without usable evidence (not scored)",
        f"ingest {res['ingest_seconds']:.2f} s ({res['ingest_turns_per_s']:,.0f} turns/s); "
        f"embedding {res['embed_seconds']:.1f} s ({res['embed_turns_per_s']:,.1f} turns/s)",
        "search latency (incl. query embedding): "
        + ", ".join(
            f"{s} p50 {v['p50']:.1f} / p95 {v['p95']:.1f} ms" for s, v in res["latency_ms"].items()
        ),
        "",
        f"{'system':<10}"
        + "".join(f"{h:>9}" for h in ("R@1", "R@5", "R@10", "R@20", "H@10", "NDCG@10"))
        + "".join(f"{'R@10 c' + str(c):>10}" for c in CATEGORIES),
    ]
    for name, s in res["systems"].items():
        o = s["overall"]
        row = f"{name:<10}" + "".join(
            f"{o[k]:>9.3f}"
            for k in ("recall@1", "recall@5", "recall@10", "recall@20", "hit@10", "ndcg@10")
        )
        row += "".join(f"{s['per_category'][str(c)]['recall@10']:>10.3f}" for c in CATEGORIES)
        lines.append(row)
    lines.append(
        "categories: "
        + ", ".join(f"c{c} {n}" for c, n in CATEGORY_NAMES.items())
        + " (n = "
        + ", ".join(
            f"{int(next(iter(res['systems'].values()))['per_category'][str(c)]['n'])}"
            for c in CATEGORIES
        )
        + ")"
    )
    if res.get("filler_top3"):
        lines.append(
            "questions with a filler reply in the top 3: "
            + ", ".join(f"{s} {v:.1%}" for s, v in res["filler_top3"].items())
        )
    if res.get("variants"):
        from memstore.bench.locomo_variants import format_variants

        lines += ["", format_variants(res["variants"])]
    if res.get("layers"):
        from memstore.bench.layers import format_layers

        lines += ["", format_layers(res["layers"])]
    if res.get("peers"):
        from memstore.bench.peers import format_peers

        lines += ["", format_peers(res["peers"], res)]
    return "\n".join(lines)
