"""memstore's Hermes host: everything that knows Hermes lives in this package.

Installed as ``memstore.hermes_provider`` (pyproject.toml maps ``provider/``
onto that name). Its modules:

``provider``   the ``MemoryProvider`` (``MemstoreProvider``) and ``register(ctx)``
``settings``   the provider's own settings section (``HermesSettings``)
``config``     where the provider's settings come from (config.yaml, overrides)
``home``       the Hermes home and its config.yaml
``install``    ``memstore hermes install``: the plugin shim and config entries
``cli``        the ``memstore hermes`` command group
``stores``     one shared ``Store`` per database file per process, leased
``sessions``   ``SessionRegistry``: one long-lived host object per session

Only ``provider`` needs hermes-agent (it subclasses Hermes' ``MemoryProvider``),
so this package imports it on first use of one of its names: installing into a
Hermes home, reading its config or the settings works without hermes-agent.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .provider import NAME, MemstoreProvider, register

# `from memstore.hermes_provider import home` asks this module for "home"
# before importing the submodule: answer with the submodule, never by
# importing hermes-agent.
_SUBMODULES = frozenset(
    {
        "cli",
        "config",
        "hermes_llm",
        "home",
        "identity",
        "install",
        "provider",
        "sessions",
        "settings",
        "stores",
        "tools",
        "turns",
    }
)


def __getattr__(name: str) -> Any:
    # `from memstore.hermes_provider import MemstoreProvider` (the entry point
    # and the plugin shim) and the provider module's other names.
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    if name.startswith("__"):
        raise AttributeError(name)
    module = importlib.import_module(f"{__name__}.provider")
    try:
        return getattr(module, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


__all__ = ["NAME", "MemstoreProvider", "register"]
