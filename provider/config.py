"""Where the provider's settings come from, and what ``hermes memory setup`` asks for.

Order (later wins): memstore's own ``Settings.load()`` (defaults, its TOML
file with the provider's ``[hermes]`` table, ``MEMSTORE_*`` variables), then
``memory.memstore`` in ``$HERMES_HOME/config.yaml``, then the ``config`` given
to the provider's constructor; ``settings.py`` holds the provider's own keys.
The database is ``$MEMSTORE_DB``, else ``db_path`` from that config, else
``$HERMES_HOME/memstore.db``. Secrets (API keys) live only in the
environment, where Hermes puts what its setup wrote to ``$HERMES_HOME/.env``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memstore.config import SETTINGS, Settings, setting_paths
from memstore.errors import ConfigError

from .home import edit_config, provider_section, read_config, section
from .identity import USER_SCOPES
from .settings import HermesSettings, UserScope, hermes_settings, split

DB_FILENAME = "memstore.db"
# Bound for on_session_end / on_session_switch / shutdown: Hermes runs them on
# the user's thread (CLI exit, /new), so pending extraction must not hold it long.
DEFAULT_SESSION_END_TIMEOUT_S = 15.0
# Hermes waits 8 s for prefetch and then skips the provider while the stuck
# thread lives; memstore answers (possibly partially) well before that.
MAX_RECALL_TIMEOUT_S = 5.0

WHERE = "memory.memstore"
_SECRETS = {("llm", "api_key"), ("embedding", "api_key")}

CONFIG_SCHEMA: tuple[dict[str, Any], ...] = (
    {
        "key": "db_path",
        "description": "SQLite database file (default: memstore.db in the Hermes home)",
    },
    {
        "key": "user_scope",
        "description": "Whose memory a conversation uses: auto (the host's user, else its "
        "session key, else user_id, else per session), user, session_key, or shared (one "
        "memory for everybody, on purpose)",
        "default": "auto",
        "choices": list(USER_SCOPES),
    },
    {
        "key": "user_id",
        "description": "memstore user when the host names none (the CLI; a single-user "
        "api_server). Empty: 'default' on local platforms",
    },
    {
        "key": "embedder",
        "description": "Embeddings: auto (local e5 when installed, else hashing), e5, hashing, "
        "openai (an OpenAI-compatible endpoint), none",
        "default": "auto",
        "choices": ["auto", "e5", "hashing", "openai", "none"],
    },
    {
        "key": "embed_base_url",
        "description": "Embedding endpoint URL (embedder: openai)",
        "when": {"embedder": "openai"},
    },
    {"key": "embed_model", "description": "Embedding model", "when": {"embedder": "openai"}},
    {
        "key": "embed_api_key",
        "description": "Embedding endpoint API key",
        "secret": True,
        "env_var": "MEMSTORE_EMBED_API_KEY",
        "when": {"embedder": "openai"},
    },
    {
        "key": "llm_base_url",
        "description": "LLM endpoint for memory extraction (empty: Hermes' own model, "
        "or offline rule-based extraction when Hermes has none)",
    },
    {"key": "llm_model", "description": "LLM model for memory extraction"},
    {
        "key": "llm_api_key",
        "description": "LLM endpoint API key",
        "secret": True,
        "env_var": "MEMSTORE_LLM_API_KEY",
    },
    {
        "key": "extract_every",
        "description": "Extract memories every N user turns (a session end always extracts)",
        "default": "5",
    },
)


@dataclass(frozen=True)
class ProviderConfig:
    """The resolved database file, memstore's settings and the provider's own."""

    db_path: Path
    settings: Settings
    hermes: HermesSettings

    @property
    def user_id(self) -> str | None:
        # None when memory.memstore.user_id is not set: identity.resolve_identity
        # then decides from what the host passes (see provider/identity.py).
        # Unset is ""; anything else is an id, checked as given (" ada" is refused).
        return self.hermes.user_id or None

    @property
    def user_scope(self) -> UserScope:
        return self.hermes.user_scope

    @property
    def session_end_timeout_s(self) -> float:
        return self.hermes.session_end_timeout_s or DEFAULT_SESSION_END_TIMEOUT_S

    @property
    def store_linger_s(self) -> float | None:
        return self.hermes.store_linger_s


def _check_secrets(values: Mapping[str, Any]) -> None:
    paths = setting_paths(split(values, WHERE)[0], WHERE)  # also rejects unknown keys
    leaked = sorted(SETTINGS[p] for p in paths if p in _SECRETS and paths[p])
    if leaked:
        # A key in config.yaml is readable by anyone who can read the config:
        # refuse it rather than use it (constructor overrides may carry keys).
        raise ConfigError(
            f"{WHERE}: {leaked} belong in the environment "
            "(MEMSTORE_LLM_API_KEY / MEMSTORE_EMBED_API_KEY), not in config.yaml"
        )


def resolve(hermes_home: str | Path, overrides: Mapping[str, Any] | None = None) -> ProviderConfig:
    """The provider's configuration for a Hermes home (raises ConfigError)."""
    home = Path(hermes_home).expanduser()
    values: dict[str, Any] = provider_section(read_config(home))
    _check_secrets(values)
    values.update(overrides or {})
    core, own = split(values, WHERE)
    settings = Settings.load(where=WHERE, **core)
    hermes = hermes_settings(settings, {k: v for k, v in own.items() if v is not None}, WHERE)
    if settings.recall.timeout_s > MAX_RECALL_TIMEOUT_S:
        settings = settings.replace(recall_timeout_s=MAX_RECALL_TIMEOUT_S)
    env_db = os.environ.get("MEMSTORE_DB", "").strip()
    configured = hermes.db_path.strip()
    db = Path(env_db or configured or home / DB_FILENAME).expanduser()
    if not db.is_absolute():
        db = home / db
    return ProviderConfig(db_path=db, settings=settings, hermes=hermes)


def save(values: Mapping[str, Any], hermes_home: str | Path) -> Path:
    """Merge non-secret ``values`` (flat names) into ``memory.memstore`` of config.yaml."""
    clean = {k: v for k, v in values.items() if v not in (None, "")}
    core, own = split(clean, WHERE)  # rejects unknown keys
    paths = setting_paths(core, WHERE)
    kept = {SETTINGS[p]: v for p, v in paths.items() if p not in _SECRETS}
    kept.update(own)

    def mutate(data: Any) -> None:
        target = section(section(data, "memory"), "memstore")
        for key, value in kept.items():
            target[key] = value

    return edit_config(hermes_home, mutate)


__all__ = ["CONFIG_SCHEMA", "DB_FILENAME", "ProviderConfig", "resolve", "save"]
