"""The Hermes provider's own settings: the ``hermes`` section.

memstore's core settings know no host; a table of memstore's config file that
names none of its sections is kept as written (``Settings.host_section``). The
provider's table is ``[hermes]`` there, and inside Hermes its keys also sit
directly under ``memory.memstore`` in ``$HERMES_HOME/config.yaml`` (flat, as
``hermes memory setup`` writes them) or as a ``hermes`` table or ``hermes.key``
there. No ``MEMSTORE_*`` variable sets them (``$MEMSTORE_DB`` is the
database's own, see ``config.resolve``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal

from memstore.config import FLAT_NAMES, SECTIONS, SETTINGS, Settings, parse_section, unknown_setting

SECTION = "hermes"

# Whose memory a Hermes conversation uses (identity.py explains each).
UserScope = Literal["auto", "user", "session_key", "shared"]


@dataclass(frozen=True)
class HermesSettings:
    """The provider's settings; a field's name is its key everywhere."""

    # Empty: $MEMSTORE_DB, else memstore.db in the Hermes home.
    db_path: str = ""
    # Empty: identity.py decides from what the host passes.
    user_id: str = ""
    user_scope: UserScope = "auto"
    # Bound for on_session_end / on_session_switch / shutdown: Hermes runs them on
    # the user's thread (CLI exit, /new), so pending extraction must not hold it long.
    session_end_timeout_s: float = 15.0
    # How long an idle shared store stays open after its last provider closes
    # (None: stores.DEFAULT_LINGER_S).
    store_linger_s: float | None = None


KEYS: tuple[str, ...] = tuple(f.name for f in fields(HermesSettings))
# Memstore's own flat names must never collide with the provider's keys,
# which sit beside them, flat, under memory.memstore.
assert not set(KEYS) & set(FLAT_NAMES), "a Hermes key shadows a memstore setting"


def split(values: Mapping[str, Any], where: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """``values`` (``memory.memstore``, constructor overrides) as memstore's
    settings and the provider's own; a key that is neither is a ConfigError
    naming the closest valid one."""
    core: dict[str, Any] = {}
    own: dict[str, Any] = {}
    for key, raw in values.items():
        if key in KEYS:
            own[key] = raw
        elif key == SECTION and isinstance(raw, Mapping):
            own.update({str(k): v for k, v in raw.items()})
        elif key.startswith(SECTION + "."):
            own[key.split(".", 1)[1]] = raw
        elif key in FLAT_NAMES or key in SECTIONS or tuple(key.split(".", 1)) in SETTINGS:
            core[key] = raw
        else:
            raise unknown_setting(key, [*FLAT_NAMES, *SECTIONS, *KEYS, SECTION], where)
    return core, own


def hermes_settings(
    settings: Settings, own: Mapping[str, Any] | None = None, where: str = "memory.memstore"
) -> HermesSettings:
    """The provider's settings: ``[hermes]`` of memstore's config file, then
    ``own`` (from ``split``); unknown keys and ill-typed values are ConfigErrors."""
    in_file = settings.host_section(SECTION)
    # Checked alone first, so an error in the file names the file's table.
    parse_section(HermesSettings, in_file, f"[{SECTION}] of the config file")
    return parse_section(HermesSettings, {**in_file, **(own or {})}, where)


__all__ = ["KEYS", "SECTION", "HermesSettings", "UserScope", "hermes_settings", "split"]
