"""Hermes' bundled ``holographic`` memory provider as a LoCoMo peer.

It is what a Hermes 0.19.0 user has offline without memstore: SQLite facts
with FTS5 candidates reranked by Jaccard overlap, HRR (holographic reduced
representation) similarity and a trust score. No embedding model.

Per conversation: a fresh provider (``HolographicMemoryProvider``, its own
database file in a temporary ``HERMES_HOME``), ``initialize``, then every
turn added through the provider's own tool, ``handle_tool_call("fact_store",
{"action": "add", ...})``: the path an agent's tool call takes. Each
question is searched with ``{"action": "search", "query": ..., "limit":
20}`` and its ``prefetch(query)`` (what Hermes injects before a turn: the
top 5) is timed separately. Fact ids map back to ``dia_id``s; the provider
deduplicates identical texts into one fact, so one fact may stand for
several turns, and all of them count as retrieved.

Its add cost grows with the number of facts (each add rebuilds the
category's HRR bank), which the add p95 shows.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import logging
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tqdm import tqdm

from memstore.bench.peers_common import TOP, PeerRun, dedupe, timed

if TYPE_CHECKING:
    from memstore.bench.locomo_index import ConvIndex, Scores


class CountWarnings(logging.Filter):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if "near capacity" in record.getMessage():
            self.count += 1
            return False
        return True


def run_holographic(
    indexes: Sequence[ConvIndex],
    scores: Scores,
    *,
    log: Callable[[str], None] = lambda _: None,
    progress: bool = True,
) -> PeerRun:
    run = PeerRun("holographic")
    try:
        run.version = "hermes-agent " + importlib.metadata.version("hermes-agent")
    except importlib.metadata.PackageNotFoundError:
        run.error = 'hermes-agent is not installed (pip install "memstore-agent[hermes]")'
        return run
    run.notes.append(
        "adds through its fact_store tool (handle_tool_call), search action limit 20; "
        "no embeddings (FTS5 + Jaccard + HRR)"
    )
    # One "HRR storage near capacity" warning per add past ~400 facts: counted, not printed.
    capacity = CountWarnings()
    hrr_log = logging.getLogger("plugins.memory.holographic.holographic")
    hrr_log.addFilter(capacity)
    old_home = os.environ.get("HERMES_HOME")
    with tempfile.TemporaryDirectory(prefix="holo-bench-") as tmp:
        # get_hermes_home() reads HERMES_HOME: keep the provider out of ~/.hermes.
        os.environ["HERMES_HOME"] = tmp
        try:
            provider_cls = importlib.import_module(
                "plugins.memory.holographic"
            ).HolographicMemoryProvider
            for idx in indexes:
                _one(provider_cls, idx, Path(tmp), run, scores, progress)
                log(f"holographic {idx.conv.sample_id}: done")
        except Exception as exc:  # a peer's failure is a result to report
            run.error = f"{type(exc).__name__}: {exc}"
        finally:
            hrr_log.removeFilter(capacity)
            if capacity.count:
                run.notes.append(
                    f"it warned {capacity.count} times that HRR storage is near capacity "
                    "(dim 1024), i.e. its retrieval may degrade at this size"
                )
            if old_home is None:
                os.environ.pop("HERMES_HOME", None)
            else:
                os.environ["HERMES_HOME"] = old_home
    return run


def _one(
    provider_cls: Any, idx: ConvIndex, base: Path, run: PeerRun, scores: Scores, progress: bool
) -> None:
    from memstore.bench.locomo_index import scored_questions, turn_text

    conv = idx.conv
    provider = provider_cls(config={"db_path": str(base / f"{conv.sample_id}.db")})
    provider.initialize(f"locomo-{conv.sample_id}", hermes_home=str(base), platform="cli")
    try:
        turns_of: dict[int, list[str]] = {}
        for t in tqdm(
            conv.turns, desc=f"holo add {conv.sample_id}", disable=not progress, leave=False
        ):
            args: dict[str, Any] = {
                "action": "add",
                "content": turn_text(t.speaker, t.text),
                "category": "general",
            }
            reply = json.loads(timed(run.add_ms, provider.handle_tool_call, "fact_store", args))
            if "fact_id" not in reply:
                raise RuntimeError(f"fact_store add answered {reply}")
            turns_of.setdefault(int(reply["fact_id"]), []).append(t.dia_id)
        for q in tqdm(
            scored_questions(conv),
            desc=f"holo search {conv.sample_id}",
            disable=not progress,
            leave=False,
        ):
            args = {"action": "search", "query": q.question, "limit": TOP}
            reply = json.loads(timed(run.search_ms, provider.handle_tool_call, "fact_store", args))
            if "results" not in reply:
                raise RuntimeError(f"fact_store search answered {reply}")
            ids = [d for r in reply["results"] for d in turns_of.get(int(r["fact_id"]), [])]
            scores.add(q.category, dedupe(ids), q.evidence)
            timed(run.prefetch_ms, provider.prefetch, q.question)
    finally:
        provider.shutdown()
