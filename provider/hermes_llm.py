"""Hermes' own model for derivation, through Hermes' auxiliary-LLM client.

Inside Hermes the user already has a model. When memstore has no endpoint of
its own (``memory.memstore.llm_*`` / ``MEMSTORE_LLM_*``), L1/L2/L3 derivation
asks ``agent.auxiliary_client.call_llm(task="memstore_derive", ...)``, which
resolves the provider, model and credentials the way Hermes does for its own
side tasks: ``auxiliary.memstore_derive`` in config.yaml when set, else the
main ``model``. Every provider Hermes supports works, with no second key.

Where it is lent: to the store (``Store.use_host_llm``), not per provider
instance. Derivation runs on the pipeline's threads and timers,
often after the instance that opened the store is gone (the api_server builds
a provider per request), while the process-wide shared store lives on. Those
threads do not see the per-turn runtime Hermes sets for its own agent loop
(a context variable), so derivation follows the model of Hermes'
configuration, not a ``/model`` switch made inside one session.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy.exc import SQLAlchemyError

from memstore.config import Settings
from memstore.db.engine import SqliteDatabase
from memstore.derive.fallback import describe_failures, output_failures
from memstore.derive.runs import describe_derivation, last_derivation
from memstore.errors import LLMError, MemstoreError
from memstore.llm import ChatAnswer
from memstore.llm.backend import text_of, usage_of
from memstore.llm.openai_backend import one_line
from memstore.redact import strip_credentials

from .home import read_config

if TYPE_CHECKING:
    from memstore.store import Store

log = logging.getLogger("memstore.hermes")

TASK = "memstore_derive"


@dataclass(frozen=True)
class HermesModel:
    """What Hermes' configuration says the derivation task will use."""

    provider: str  # "auto" when Hermes picks it
    model: str  # "" when the provider's default applies


def configured_model(config: Mapping[str, Any]) -> HermesModel | None:
    """The model Hermes' auxiliary client resolves for derivation, read from a parsed
    config.yaml; None when neither ``auxiliary.memstore_derive`` nor ``model`` names one."""
    aux_all = config.get("auxiliary")
    aux = aux_all.get(TASK) if isinstance(aux_all, Mapping) else None
    aux = aux if isinstance(aux, Mapping) else {}
    aux_provider = str(aux.get("provider") or "").strip()
    aux_model = str(aux.get("model") or "").strip()
    if aux_model.lower() == "auto":  # Hermes reads "auto" as "inherit"
        aux_model = ""
    main = config.get("model")
    if isinstance(main, Mapping):
        main_model = str(main.get("default") or main.get("model") or "").strip()
        main_provider = str(main.get("provider") or "").strip()
    else:
        main_model, main_provider = str(main or "").strip(), ""
    if aux.get("base_url") or aux_provider not in ("", "auto"):
        return HermesModel(aux_provider or "custom", aux_model or main_model)
    if main_model or main_provider:
        return HermesModel(main_provider or "auto", aux_model or main_model)
    return None


def available() -> bool:
    """True when this Hermes ships the auxiliary client (0.19.0 does)."""
    try:
        module = importlib.import_module("agent.auxiliary_client")
    except ImportError:
        return False
    return callable(getattr(module, "call_llm", None))


class HermesBackend:
    """A ``memstore.llm.ChatBackend`` answering through Hermes' ``call_llm``."""

    deriver = "hermes"

    def __init__(self, settings: Settings, configured: HermesModel) -> None:
        self._configured = configured
        self._temperature = settings.llm.temperature
        self._max_tokens = settings.llm.max_tokens
        self._timeout = settings.llm.timeout_s
        self._max_chars = settings.llm.max_answer_bytes

    @property
    def model(self) -> str:
        return self._configured.model

    def describe(self) -> str:
        c = self._configured
        return (
            f"Hermes' model (provider {c.provider}, model {c.model or 'provider default'}) "
            f"via Hermes' auxiliary client, task {TASK}"
        )

    def close(self) -> None:
        """Hermes owns the clients and their connections."""

    def __repr__(self) -> str:
        return f"HermesBackend({self._configured!r})"

    def chat(self, kind: str, messages: Sequence[Mapping[str, str]]) -> ChatAnswer:
        where = f"LLM {kind} via Hermes (model {self._configured.model or 'default'})"
        try:
            module: Any = importlib.import_module("agent.auxiliary_client")
        except ImportError as exc:
            raise LLMError(f"{where}: hermes-agent is not importable: {exc}") from exc
        try:
            response = module.call_llm(
                task=TASK,
                messages=[dict(m) for m in messages],
                temperature=self._temperature,
                max_tokens=self._max_tokens,
                timeout=self._timeout,
            )
        except Exception as exc:
            # Hermes fronts dozens of provider SDKs (and raises RuntimeError when
            # none is configured), after its own retries and fallbacks: whatever
            # comes out of the call is this boundary's LLMError.
            raise LLMError(f"{where} failed: {type(exc).__name__}: {one_line(str(exc))}") from exc
        try:
            choice = response.choices[0]
            content = choice.message.content
        except (AttributeError, IndexError, TypeError) as exc:
            raise LLMError(f"{where}: the answer has no choices[0].message") from exc
        text = text_of(content)
        if len(text) > self._max_chars:
            # Hermes has read the body already; at least do not parse or keep it.
            raise LLMError(
                f"{where}: the answer has {len(text):,} characters, more than "
                f"llm_max_answer_bytes ({self._max_chars:,})"
            )
        model = getattr(response, "model", None)
        finish = getattr(choice, "finish_reason", None)
        return ChatAnswer(
            text=text,
            model=model if isinstance(model, str) and model else self._configured.model,
            usage=usage_of(getattr(response, "usage", None)),
            finish_reason=finish if isinstance(finish, str) else None,
        )


def derivation_model(settings: Settings, home: Path) -> str:
    """One line for ``hermes memory status``: who derives for this configuration."""
    if settings.llm.deriver == "rules":
        return 'rules: offline rule-based deriver (forced by deriver = "rules")'
    if settings.llm.configured:
        where = strip_credentials(settings.llm.base_url)
        return f"llm: memstore's endpoint {where} (model {settings.llm.model})"
    configured = _configured(home)
    if configured is not None and available():
        return f"hermes: {HermesBackend(settings, configured).describe()}"
    return "rules: offline rule-based deriver (no memstore llm_* and no Hermes model)"


def status(settings: Settings, home: Path, db: Path) -> dict[str, str]:
    """What ``hermes memory status`` adds: the deriver configured now, and the
    deriver and model of the newest derivation in the database (what really ran)."""
    shown = {"derivation": derivation_model(settings, home)}
    if not db.exists():
        shown["last derivation"] = "none yet"
        return shown
    try:
        database = SqliteDatabase(db)
        try:
            with database.read() as conn:
                last = last_derivation(conn)
                failing = describe_failures(*output_failures(conn), settings.llm.fallback_after)
        finally:
            database.close()
    except (MemstoreError, SQLAlchemyError) as exc:
        shown["last derivation"] = f"unknown ({one_line(str(exc))})"
        return shown
    shown["last derivation"] = describe_derivation(last)
    if failing is not None:
        shown["llm output"] = failing
    return shown


def attach(store: Store, settings: Settings, home: Path) -> None:
    """Let ``store`` derive with Hermes' model unless memstore has its own endpoint.

    Cheap after the first call for a store (providers call it on every initialize).
    """
    if settings.llm.configured or store.host_llm is not None:
        return
    configured = _configured(home)
    if configured is None or not available():
        log.info("memstore: no Hermes model configured; deriving with the offline rules")
        return
    backend = HermesBackend(settings, configured)
    store.use_host_llm(backend)
    log.info("memstore: deriving with %s", backend.describe())


def _configured(home: Path) -> HermesModel | None:
    try:
        return configured_model(read_config(home))
    except MemstoreError as exc:
        log.warning("memstore: cannot read Hermes' model from its config: %s", exc)
        return None


__all__ = [
    "TASK",
    "HermesBackend",
    "HermesModel",
    "attach",
    "available",
    "configured_model",
    "derivation_model",
    "status",
]
