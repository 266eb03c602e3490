"""The upstream's (TencentDB Agent Memory's) environment names for memstore's LLM settings.

Honoured by the paths that speak the upstream's language, so a migrating
user's environment keeps working there: ``memstore serve`` (the upstream's
gateway routes; its ``TDAI_GATEWAY_*`` names are in memstore/gateway/config.py)
and ``memstore import --format upstream|seed``. Each applies only to a setting
that memstore's own sources (config file, ``MEMSTORE_*``) leave unset. The
core settings (memstore/config.py) read none of these names.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from memstore.config import Settings
from memstore.errors import ConfigError

# memstore setting -> the upstream's variable, same unit.
LLM_ENV: dict[str, str] = {
    "llm.base_url": "TDAI_LLM_BASE_URL",
    "llm.api_key": "TDAI_LLM_API_KEY",
    "llm.model": "TDAI_LLM_MODEL",
    "llm.max_tokens": "TDAI_LLM_MAX_TOKENS",
}
# The upstream's timeout is in milliseconds, memstore's llm.timeout_s in seconds.
TIMEOUT_MS_ENV = "TDAI_LLM_TIMEOUT_MS"


def settings_fallbacks(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The LLM settings the upstream's variables give (for ``Settings.load(fallbacks=...)``)."""
    env = os.environ if environ is None else environ
    out: dict[str, Any] = {name: env[var] for name, var in LLM_ENV.items() if env.get(var)}
    timeout_ms = env.get(TIMEOUT_MS_ENV)
    if timeout_ms:
        try:
            out["llm.timeout_s"] = float(timeout_ms) / 1000.0
        except ValueError:
            raise ConfigError(f"{TIMEOUT_MS_ENV}: not a number: {timeout_ms!r}") from None
    return out


def load_settings(**overrides: Any) -> Settings:
    """``Settings.load`` with the upstream's names for the LLM settings left unset."""
    return Settings.load(fallbacks=settings_fallbacks(), **overrides)


__all__ = ["LLM_ENV", "TIMEOUT_MS_ENV", "load_settings", "settings_fallbacks"]
