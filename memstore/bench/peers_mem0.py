"""mem0 (``mem0ai``) as a LoCoMo peer, offline.

Setup, per conversation: ``Memory.from_config`` with mem0's default local
vector store (Qdrant, embedded, in a temporary directory), its stock OpenAI
embedder pointed at the loopback embedding server (memstore's e5 model), and
the history database in the same temporary directory. Each turn is added
with ``add([message], user_id=<conversation>, metadata={"dia_id": ...},
infer=False)``: no LLM is needed, every turn becomes one memory verbatim. Each
question is searched with ``search(question, filters={"user_id": ...},
top_k=20)``.

Asymmetric e5: mem0's stock OpenAI embedder sends one model name for both
documents and queries, but it passes ``memory_action`` ("add" / "update" /
"search") to ``embed``. A thin wrapper (``_ActionModel``) keeps mem0's own
embedder and client and only switches the model name per call from that
argument, so the server can prefix ``"query: "`` or ``"passage: "``.

Offline, mem0's keyword (BM25 sparse vectors through fastembed) and entity
boosts (spaCy) stay off: both download models at run time (``Qdrant/bm25``,
``en_core_web_sm``); neither package is installed here, and mem0 then scores
by the dense similarity alone (it logs that and carries on). Telemetry is
disabled (``MEM0_TELEMETRY=False``) and ``MEM0_DIR`` points at the temporary
directory, so nothing is written to the home directory.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tqdm import tqdm

from memstore.bench.peers_common import (
    PASSAGE_MODEL,
    QUERY_MODEL,
    TOP,
    PeerRun,
    dedupe,
    embedding_server,
    timed,
)

if TYPE_CHECKING:
    from memstore.bench.locomo_index import ConvIndex, Scores


class _ActionModel:
    """mem0's stock embedder, with the model name chosen by ``memory_action``."""

    def __init__(self, stock: Any) -> None:
        self._stock = stock
        self.config = stock.config

    def _use(self, memory_action: str | None) -> None:
        self._stock.config.model = QUERY_MODEL if memory_action == "search" else PASSAGE_MODEL

    def embed(self, text: str, memory_action: str | None = None) -> Any:
        self._use(memory_action)
        return self._stock.embed(text, memory_action)

    def embed_batch(self, texts: list[str], memory_action: str = "add") -> Any:
        self._use(memory_action)
        return self._stock.embed_batch(texts, memory_action)


def _config(base: Path, url: str, dims: int, collection: str) -> dict[str, Any]:
    return {
        "vector_store": {
            "provider": "qdrant",  # mem0's default; only its path is moved to the temp dir
            "config": {
                "path": str(base / "qdrant"),
                "collection_name": collection,
                "embedding_model_dims": dims,
            },
        },
        "embedder": {
            "provider": "openai",
            "config": {
                "model": PASSAGE_MODEL,
                "api_key": "offline",
                "openai_base_url": url,
                "embedding_dims": dims,
            },
        },
        # Never called with infer=False; configured so nothing points at api.openai.com.
        "llm": {"provider": "openai", "config": {"api_key": "offline", "openai_base_url": url}},
        "history_db_path": str(base / "history.db"),
    }


def run_mem0(
    indexes: Sequence[ConvIndex],
    scores: Scores,
    *,
    log: Callable[[str], None] = lambda _: None,
    progress: bool = True,
) -> PeerRun:
    from memstore.bench.locomo_index import turn_text

    run = PeerRun("mem0")
    try:
        run.version = importlib.metadata.version("mem0ai")
    except importlib.metadata.PackageNotFoundError:
        run.error = 'mem0ai is not installed (pip install "memstore-agent[peers]")'
        return run
    if not indexes:
        run.error = "no conversations"
        return run
    embedder = indexes[0].store.internals.embedder
    if embedder is None:
        run.error = "the store has no embedder to serve"
        return run
    run.notes += [
        "add(infer=False) per turn: no LLM; Qdrant local (mem0's default vector store)",
        f"{embedder.model_id} served on 127.0.0.1; query vs passage form chosen by "
        "mem0's memory_action (search vs add)",
        "keyword (fastembed BM25) and entity (spaCy) boosts off offline: they download models",
    ]
    with (
        tempfile.TemporaryDirectory(prefix="mem0-bench-") as tmp,
        embedding_server(embedder) as srv,
    ):
        # Read by mem0 at import time: keep it out of ~/.mem0 and off the network.
        os.environ["MEM0_DIR"] = str(Path(tmp) / "home")
        os.environ["MEM0_TELEMETRY"] = "False"
        # mem0 warns per search that BM25 is unavailable; once is enough.
        logging.getLogger("mem0").setLevel(logging.ERROR)
        try:
            memory_cls = importlib.import_module("mem0").Memory
        except Exception as exc:  # a peer's import failure is a result to report
            run.error = f"import mem0 failed: {type(exc).__name__}: {exc}"
            return run
        for idx in indexes:
            vec_by_id = dict(zip(idx.ids, idx.vecs, strict=True))
            for t in idx.conv.turns:
                if t.dia_id in vec_by_id:
                    srv.state.passages[turn_text(t.speaker, t.text)] = vec_by_id[t.dia_id]
        try:
            for idx in indexes:
                _one(
                    memory_cls, idx, Path(tmp), srv.url, embedder.dimensions, run, scores, progress
                )
                log(f"mem0 {idx.conv.sample_id}: done")
        except Exception as exc:  # reported, with the exception, as the peer's result
            run.error = f"{type(exc).__name__}: {exc}"
            return run
        finally:
            os.environ.pop("MEM0_DIR", None)
        served = srv.state.served
        run.notes.append(
            f"embedding server: {served['passage_cached']} passages from memstore's vectors, "
            f"{served['passage_computed']} computed, {served['query']} queries embedded live"
        )
    return run


def _one(
    memory_cls: Any,
    idx: ConvIndex,
    base: Path,
    url: str,
    dims: int,
    run: PeerRun,
    scores: Scores,
    progress: bool,
) -> None:
    from memstore.bench.locomo_index import scored_questions, turn_text

    conv = idx.conv
    sub = base / conv.sample_id
    sub.mkdir(parents=True, exist_ok=True)
    mem = memory_cls.from_config(_config(sub, url, dims, "locomo"))
    mem.embedding_model = _ActionModel(mem.embedding_model)
    user = conv.sample_id
    for t in tqdm(conv.turns, desc=f"mem0 add {user}", disable=not progress, leave=False):
        msg = {
            "role": "user" if t.speaker == conv.speaker_a else "assistant",
            "content": turn_text(t.speaker, t.text),
        }
        timed(run.add_ms, mem.add, [msg], user_id=user, metadata={"dia_id": t.dia_id}, infer=False)
    for q in tqdm(
        scored_questions(conv), desc=f"mem0 search {user}", disable=not progress, leave=False
    ):
        res = timed(run.search_ms, mem.search, q.question, filters={"user_id": user}, top_k=TOP)
        ids = [str((r.get("metadata") or {}).get("dia_id", "")) for r in res["results"]]
        scores.add(q.category, dedupe([i for i in ids if i]), q.evidence)
    close = getattr(getattr(mem, "vector_store", None), "client", None)
    if close is not None and hasattr(close, "close"):
        close.close()  # Qdrant local holds a file lock on its directory
