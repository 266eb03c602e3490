"""The hashing embedder gives the vectors of its plain recipe
(tests/embeddings/hashing_oracle.py) bit for bit: stored vectors stay valid
and model_id keeps its version."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from memstore.bench.chattext import ChatText
from memstore.embeddings import hashing
from memstore.embeddings.hashing import HashingEmbedder
from tests.embeddings import hashing_oracle

ODD = [
    "",
    "!!! ... ???",
    "😀🎉",
    "我喜欢喝茶，你呢？",
    "東京で寿司を食べた。ラーメンも！",
    "안녕하세요 반갑습니다",
    "mixed 中文 text and 日本語 too, then latin again",
    "banana banana banana ana",
    "the the the a an",
    "snake_case and under_scores _x_",
    "Ünïcödé ﬁne ﬂow ẞtraße ΣΊΣΥΦΟΣ",
    "12 34 56 7th 8th 2024-05-06",
    "lone surrogate \ud800 and a NUL \x00 byte",
    "x" * 3000,
    "word " * 2000,  # a count past the damping table
    "I went hiking with Caroline on Saturday; she said the trail was muddy.",
]


def _texts(n: int) -> list[str]:
    gen = ChatText(11)
    out: list[str] = []
    while len(out) < n:
        out.extend(gen.turn())
    return out[:n] + ODD


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and bool(np.array_equal(a.view(np.uint32), b.view(np.uint32)))


@pytest.mark.parametrize("dimensions", [384, 64])
def test_vectors_equal_the_plain_recipe_bit_for_bit(dimensions: int) -> None:
    texts = _texts(1500)
    got = HashingEmbedder(dimensions).embed_documents(texts)
    want = np.stack([hashing_oracle.vector(t, dimensions) for t in texts])
    bad = [t[:40] for t, g, w in zip(texts, got, want, strict=True) if not _same(g, w)]
    assert not bad, bad
    # Again, now that every feature has an id.
    assert _same(HashingEmbedder(dimensions).embed_documents(texts), want)


def test_a_full_vocabulary_starts_over_and_changes_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(hashing, "_MAX_FEATURES", 300)
    monkeypatch.setattr(hashing, "_MAX_WORDS", 40)
    monkeypatch.setattr(hashing, "_vocab", hashing._Vocab())
    texts = _texts(200)
    vocabularies = set()
    e = HashingEmbedder()
    got = []
    for t in texts:
        got.append(e.embed_documents([t])[0])
        vocabularies.add(id(hashing._vocab))
    assert len(vocabularies) > 5  # it filled and started over, many times
    want = [hashing_oracle.vector(t) for t in texts]
    assert all(_same(g, w) for g, w in zip(got, want, strict=True))


def test_threads_sharing_a_new_vocabulary_get_the_same_vectors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(hashing, "_vocab", hashing._Vocab())
    texts = _texts(600)
    want = np.stack([hashing_oracle.vector(t) for t in texts])
    results: list[np.ndarray | BaseException] = [np.empty(0)] * 4
    start = threading.Barrier(4)

    def run(i: int) -> None:
        try:
            start.wait()
            # Each thread in its own order, so they add features at once.
            order = texts[i::4] + texts[:i] + texts
            vecs = HashingEmbedder().embed_documents(order)
            results[i] = vecs[len(order) - len(texts) :]
        except BaseException as e:  # the test looks at it
            results[i] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for r in results:
        assert isinstance(r, np.ndarray), r
        assert _same(r, want)
