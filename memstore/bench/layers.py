"""Memory-layer quality on LoCoMo (``bench locomo --layers``).

After a conversation is ingested and searched at the turn level, the
derivation pipeline runs on it (``end_session`` for every session, then
``run_pipeline``: the offline rule deriver unless an LLM is configured with
``MEMSTORE_LLM_*``), and each question is asked of the L1 memories:

- ``search_memories(question, limit=10)``: do the top-k memories trace back,
  through their ``source_message_ids`` (= the turns' ``dia_id``s), to at
  least one evidence turn (``hit@k``), and what fraction of the evidence
  turns do they cover (``evidence recall@k``);
- ``recall(question)``: the block a host would inject (persona, scene
  navigation, top memories within the budget): the same two figures for the
  memories it carries, and its size in characters (p50 / p95).

Both LoCoMo speakers are people, and the deriver only extracts from the
"user" side of a conversation (the assistant's words are not facts about
the user). So each conversation is captured twice in the same store: as
user ``<sample_id>`` with speaker A in the user role (the ingest the
turn-level bench already did), and as user ``<sample_id>~b`` with speaker B
in the user role. The second capture repeats the same texts, so its
embeddings come from the (model, content hash) cache. A question is asked
of both users: the two memory result lists are merged by score, and the two
recall blocks are counted together (their sizes add up), as a host serving
both people would inject them.

The numbers are as low as the deriver makes them: the rule deriver keeps
only explicit first-person statements, so most evidence turns never become
a memory. That is the point of the measurement: it is how an LLM deriver
will be judged against it, on the same questions.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tqdm import tqdm

from memstore.bench.locomo_data import Conversation, Question
from memstore.bench.metrics import mean, percentile
from memstore.store import Store

LAYER_KS = (1, 5, 10)
B_SUFFIX = "~b"
SEARCH_LIMIT = 10
CATEGORIES = (1, 2, 3, 4)
_METRICS = (*(f"{m}@{k}" for k in LAYER_KS for m in ("hit", "evidence_recall")),)
_RECALL_METRICS = ("hit", "evidence_recall", "memories")


def sources(memory: Mapping[str, Any]) -> list[str]:
    """A memory's source message ids as a list (the projection may hand back JSON text)."""
    raw = memory.get("source_message_ids") or []
    if isinstance(raw, str):
        import json

        raw = json.loads(raw)
    return [str(s) for s in raw]


def trace_at_k(ranked: Sequence[Sequence[str]], evidence: Sequence[str]) -> dict[str, float]:
    """Scores of a ranked list of memories, each given by its source ids.

    ``hit@k``: 1.0 if any of the first k memories has an evidence turn among
    its sources; ``evidence_recall@k``: the fraction of evidence turns covered
    by the union of the first k memories' sources.
    """
    ev = set(evidence)
    out: dict[str, float] = {}
    for k in LAYER_KS:
        covered = {s for srcs in ranked[:k] for s in srcs} & ev
        out[f"hit@{k}"] = 1.0 if covered else 0.0
        out[f"evidence_recall@{k}"] = len(covered) / len(ev) if ev else float("nan")
    return out


def trace_set(memories: Sequence[Sequence[str]], evidence: Sequence[str]) -> dict[str, float]:
    """The same for an unranked set (the memories a recall block carries)."""
    ev = set(evidence)
    covered = {s for srcs in memories for s in srcs} & ev
    return {
        "hit": 1.0 if covered else 0.0,
        "evidence_recall": len(covered) / len(ev) if ev else float("nan"),
        "memories": float(len(memories)),
    }


def merge_by_score(lists: Sequence[Sequence[tuple[float, list[str]]]], k: int) -> list[list[str]]:
    """Best ``k`` of several (score, sources) lists; ties keep list order (stable)."""
    flat = [
        (score, i, j, srcs) for i, lst in enumerate(lists) for j, (score, srcs) in enumerate(lst)
    ]
    flat.sort(key=lambda x: (-x[0], x[1], x[2]))
    return [srcs for _, _, _, srcs in flat[:k]]


@dataclass
class LayerScores:
    """Per-question layer metrics and the per-conversation counts, accumulated."""

    search_rows: list[tuple[int, dict[str, float]]] = field(default_factory=list)
    recall_rows: list[tuple[int, dict[str, float]]] = field(default_factory=list)
    block_chars: list[float] = field(default_factory=list)
    search_ms: list[float] = field(default_factory=list)
    recall_ms: list[float] = field(default_factory=list)
    memories: dict[str, int] = field(default_factory=dict)
    memories_with_sources: int = 0
    derive_seconds: float = 0.0
    deriver: str = ""

    def summary(self) -> dict[str, Any]:
        def agg(rows: list[dict[str, float]], keys: Sequence[str]) -> dict[str, float]:
            return {k: mean(r[k] for r in rows) for k in keys} | {"n": float(len(rows))}

        def split(rows: list[tuple[int, dict[str, float]]], keys: Sequence[str]) -> dict[str, Any]:
            return {
                "overall": agg([m for _, m in rows], keys),
                "per_category": {
                    str(c): agg([m for cat, m in rows if cat == c], keys) for c in CATEGORIES
                },
            }

        total = sum(self.memories.values())
        return {
            "deriver": self.deriver,
            "perspectives": "each conversation captured twice: speaker A as the user "
            f"(<sample_id>) and speaker B as the user (<sample_id>{B_SUFFIX})",
            "memories_total": total,
            "memories_per_user": self.memories,
            "memories_with_sources": self.memories_with_sources,
            "derive_seconds": self.derive_seconds,
            "search": split(self.search_rows, _METRICS),
            "recall": split(self.recall_rows, _RECALL_METRICS),
            "recall_block_chars": {
                "p50": percentile(self.block_chars, 50),
                "p95": percentile(self.block_chars, 95),
                "max": max(self.block_chars, default=float("nan")),
            },
            "latency_ms": {
                "search_memories": {
                    "p50": percentile(self.search_ms, 50),
                    "p95": percentile(self.search_ms, 95),
                },
                "recall": {
                    "p50": percentile(self.recall_ms, 50),
                    "p95": percentile(self.recall_ms, 95),
                },
            },
        }


def capture_as_b(conv: Conversation, store: Store) -> None:
    """The conversation again, with speaker B in the user role, under ``<id>~b``."""
    from memstore.bench.locomo_index import turn_text

    by_session: dict[int, list[dict[str, Any]]] = {}
    for t in conv.turns:
        by_session.setdefault(t.session_index, []).append(
            {
                "role": "user" if t.speaker == conv.speaker_b else "assistant",
                "content": turn_text(t.speaker, t.text),  # as the A capture: cached vectors
                "timestamp": t.occurred_at,
                "id": t.dia_id,
            }
        )
    for n, msgs in sorted(by_session.items()):
        store.capture(conv.sample_id + B_SUFFIX, f"session_{n}", msgs)


def derive_all(conv: Conversation, store: Store, users: Sequence[str]) -> float:
    """End every session (extracts what is pending), then run L2/L3; seconds taken."""
    sessions = sorted({t.session_index for t in conv.turns})
    t0 = time.perf_counter()
    for user in users:
        for n in sessions:
            store.end_session(user, f"session_{n}", timeout_s=600)
        store.run_pipeline(user)
    return time.perf_counter() - t0


def run_layers_conversation(
    conv: Conversation,
    store: Store,
    questions: Sequence[Question],
    acc: LayerScores,
    *,
    progress: bool = True,
) -> None:
    """Derive, embed the memories, and score every question against the layers."""
    users = [conv.sample_id, conv.sample_id + B_SUFFIX]
    capture_as_b(conv, store)
    acc.deriver = (
        f"llm ({store.settings.llm.model})" if store.settings.llm.configured else "rules (offline)"
    )
    acc.derive_seconds += derive_all(conv, store, users)
    store.reindex()  # memory vectors (and the B capture, from the cache)
    # Memories do not change while the questions run: map ids to sources once.
    src_of: dict[str, list[str]] = {}
    for user in users:
        mems = store.list_memories(user)
        acc.memories[user] = len(mems)
        acc.memories_with_sources += sum(1 for m in mems if sources(m.to_dict()))
        src_of.update((m.memory_id, sources(m.to_dict())) for m in mems)
    for q in tqdm(questions, desc=f"layers {conv.sample_id}", disable=not progress, leave=False):
        lists: list[list[tuple[float, list[str]]]] = []
        t0 = time.perf_counter()
        for user in users:
            hits = store.search_memories(user, q.question, limit=SEARCH_LIMIT)
            lists.append([(float(h.score), src_of.get(str(h.ref), [])) for h in hits])
        acc.search_ms.append((time.perf_counter() - t0) * 1000)
        acc.search_rows.append(
            (q.category, trace_at_k(merge_by_score(lists, SEARCH_LIMIT), q.evidence))
        )
        t0 = time.perf_counter()
        recalls = [store.recall(user, q.question) for user in users]
        acc.recall_ms.append((time.perf_counter() - t0) * 1000)
        carried = [list(m.source_message_ids) for r in recalls for m in r.memories]
        acc.recall_rows.append((q.category, trace_set(carried, q.evidence)))
        acc.block_chars.append(float(sum(len(r.text) for r in recalls)))


def format_layers(res: dict[str, Any]) -> str:
    s, r = res["search"]["overall"], res["recall"]["overall"]
    bc, lat = res["recall_block_chars"], res["latency_ms"]
    lines = [
        f"memory layers (L1), deriver {res['deriver']}: {res['memories_total']} memories derived "
        f"({res['memories_with_sources']} with source turns) in {res['derive_seconds']:.1f} s",
        f"  {res['perspectives']}",
        f"{'L1 memories':<26}"
        + "".join(f"{h:>9}" for h in ("H@1", "H@5", "H@10", "ER@1", "ER@5", "ER@10"))
        + "".join(f"{'H@10 c' + str(c):>9}" for c in CATEGORIES),
        f"{'search_memories (top 10)':<26}"
        + "".join(f"{s[f'hit@{k}']:>9.3f}" for k in LAYER_KS)
        + "".join(f"{s[f'evidence_recall@{k}']:>9.3f}" for k in LAYER_KS)
        + "".join(f"{res['search']['per_category'][str(c)]['hit@10']:>9.3f}" for c in CATEGORIES),
        f"recall() block: hit {r['hit']:.3f}, evidence recall {r['evidence_recall']:.3f}, "
        f"{r['memories']:.1f} memories per question; block {bc['p50']:.0f} chars p50 / "
        f"{bc['p95']:.0f} p95 / {bc['max']:.0f} max (both speakers' blocks added)",
        f"latency: search_memories (2 users) p50 {lat['search_memories']['p50']:.1f} / p95 "
        f"{lat['search_memories']['p95']:.1f} ms; recall (2 users) p50 "
        f"{lat['recall']['p50']:.1f} / p95 {lat['recall']['p95']:.1f} ms",
        "  H = hit (a memory traces to >= 1 evidence turn), ER = evidence turns covered",
    ]
    return "\n".join(lines)
