"""Any OpenAI-compatible ``/embeddings`` endpoint (OpenAI, vLLM, Ollama, LiteLLM, ...).

Retries are the ``openai`` client's own: exponential backoff with jitter on
connection errors, timeouts, 408/409/429 and 5xx, ``max_retries`` times, and
it honours ``Retry-After``. Whatever still fails becomes ``EmbeddingError``
naming the endpoint and model, never the API key.

The dimension is either configured (and then sent as ``dimensions``, which
text-embedding-3 models use to shorten their vectors) or learned from the
first response; after that every response must match it.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import urlsplit

import numpy as np

from memstore.embeddings.base import (
    Embedder,
    FloatArray,
    check_vectors,
    embedding_text,
    l2_normalize,
)
from memstore.errors import EmbeddingError
from memstore.redact import install_log_redaction, redact, strip_credentials

if TYPE_CHECKING:
    import openai

# Sent when no key is configured: local servers ignore it, and the openai
# client refuses to start without one (or silently uses $OPENAI_API_KEY).
_NO_KEY = "no-key"
_PROBE_TEXT = "dimension probe"


class OpenAIEmbedder(Embedder):
    """Embeddings over HTTP with the ``openai`` client.

    ``query_prefix`` / ``document_prefix`` are prepended to the texts, for
    models that expect them (e5 served remotely: ``"query: "``/``"passage: "``).
    Non-empty prefixes, like a configured dimension, are part of ``model_id``
    because they change the vectors.
    """

    kind: ClassVar[str] = "openai"

    def __init__(
        self,
        base_url: str,
        api_key: str,
        model: str,
        dimensions: int = 0,
        batch_size: int = 64,
        timeout: float = 30.0,
        max_retries: int = 3,
        *,
        query_prefix: str = "",
        document_prefix: str = "",
    ) -> None:
        if not base_url or not model:
            raise ValueError("OpenAIEmbedder needs both base_url and model")
        if dimensions < 0 or batch_size < 1:
            raise ValueError(f"bad dimensions={dimensions} or batch_size={batch_size}")
        import openai  # deferred: the client costs ~0.3 s to import

        install_log_redaction()

        # Shown and keyed on without credentials: a rotated password is the same
        # endpoint (the same vectors), and no secret reaches a table or a log.
        self.base_url = strip_credentials(base_url.rstrip("/"))
        self.model = model
        self.batch_size = batch_size
        self.query_prefix = query_prefix
        self.document_prefix = document_prefix
        self._requested_dims = dimensions
        self.dimensions = dimensions
        self._api_key = api_key
        self._dims_lock = threading.Lock()
        self.model_id = _model_id(self.base_url, model, dimensions, query_prefix, document_prefix)
        # openai.OpenAI is documented as thread-safe (one httpx pool inside).
        self._client: openai.OpenAI = openai.OpenAI(
            base_url=base_url.rstrip("/"),
            api_key=api_key or _NO_KEY,
            timeout=timeout,
            max_retries=max_retries,
        )

    def embed_documents(self, texts: Sequence[str]) -> FloatArray:
        if isinstance(texts, str):
            raise TypeError("embed_documents takes a sequence of texts, not one string")
        prepared = [_prepare(self.document_prefix, t) for t in texts]
        if not prepared:
            return np.zeros((0, max(self.dimensions, 0)), dtype=np.float32)
        chunks = [
            self._request(prepared[i : i + self.batch_size])
            for i in range(0, len(prepared), self.batch_size)
        ]
        return chunks[0] if len(chunks) == 1 else np.concatenate(chunks)

    def embed_query(self, text: str) -> FloatArray:
        vector: FloatArray = self._request([_prepare(self.query_prefix, text)])[0]
        return vector

    def resolve_dimensions(self) -> int:
        if self.dimensions == 0:
            self._request([_PROBE_TEXT])
        return self.dimensions

    def close(self) -> None:
        """Close the HTTP connection pool (also done when the object is collected)."""
        self._client.close()

    def _where(self) -> str:
        return f"embedding endpoint {self.base_url} (model {self.model!r})"

    def _request(self, batch: list[str]) -> FloatArray:
        import openai

        kwargs: dict[str, Any] = {"model": self.model, "input": batch}
        if self._requested_dims:
            kwargs["dimensions"] = self._requested_dims
        try:
            response = self._client.embeddings.create(**kwargs)
        except openai.APIStatusError as exc:
            raise EmbeddingError(
                f"{self._where()} answered HTTP {exc.status_code}: {self._scrub(exc.message)}"
            ) from exc
        except openai.APITimeoutError as exc:
            raise EmbeddingError(f"{self._where()} timed out after retries") from exc
        except openai.APIConnectionError as exc:
            raise EmbeddingError(f"cannot reach {self._where()}: {self._scrub(str(exc))}") from exc
        except (openai.OpenAIError, ValueError, TypeError) as exc:
            # ValueError: the client's own check for an empty "data" list.
            raise EmbeddingError(
                f"{self._where()} returned an unusable response: {self._scrub(str(exc))}"
            ) from exc

        try:
            # The client does not validate bodies, so a wrong shape surfaces here.
            data = sorted(response.data, key=lambda d: d.index)
            if len(data) != len(batch):
                raise EmbeddingError(
                    f"{self._where()} returned {len(data)} vectors for {len(batch)} texts"
                )
            raw = np.array([d.embedding for d in data], dtype=np.float32)
        except (AttributeError, TypeError, ValueError) as exc:
            raise EmbeddingError(
                f"{self._where()} returned a malformed embedding response ({exc})"
            ) from exc
        source = self._where()
        if self.dimensions == 0:
            vectors = check_vectors(raw, 0, rows=len(batch), source=source)
            with self._dims_lock:
                # Another thread may have discovered it first; then we must agree.
                if self.dimensions == 0:
                    self.dimensions = int(vectors.shape[1])
        vectors = check_vectors(raw, self.dimensions, rows=len(batch), source=source)
        # Not every compatible server normalises (OpenAI does; many local ones
        # do not), and cosine/dot-product search assumes unit vectors.
        return l2_normalize(vectors)

    def _scrub(self, message: str) -> str:
        message = redact(message)
        # Some proxies echo request headers in error bodies.
        if self._api_key and len(self._api_key) >= 4:
            message = message.replace(self._api_key, "***")
        return message


def _prepare(prefix: str, text: str) -> str:
    text = embedding_text(text)
    if not text.strip():
        # The OpenAI API rejects empty strings with HTTP 400; a single space
        # gives the same "no content" vector every time instead.
        text = " "
    return prefix + text


def _model_id(base_url: str, model: str, dims: int, qp: str, dp: str) -> str:
    # Host (and port) rather than the full URL: "https://h/v1" and "https://h/v1/"
    # or http vs https are the same model; two ports may be two servers.
    host = urlsplit(strip_credentials(base_url)).netloc or base_url
    model_id = f"openai:{host}/{model}"
    if dims:
        model_id += f"@{dims}"
    if qp or dp:
        tag = hashlib.sha256(f"{qp}\x00{dp}".encode()).hexdigest()[:8]
        model_id += f"+p{tag}"
    return model_id


__all__ = ["OpenAIEmbedder"]
