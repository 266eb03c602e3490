"""Reading and editing a Hermes home (``$HERMES_HOME/config.yaml``) without needing Hermes.

memstore does not depend on hermes-agent, so YAML libraries are imported
lazily: ruamel.yaml (installed with Hermes) edits round-trip, keeping the
user's comments and key order; PyYAML is the fallback (keeps every setting,
loses comments). With neither, only a missing config.yaml can be created.
"""

from __future__ import annotations

import importlib
import os
import tempfile
import threading
from collections.abc import Callable, MutableMapping
from pathlib import Path
from typing import Any

from memstore.errors import ConfigError

PROVIDER_NAME = "memstore"
CONFIG_SECTION = "memory"

Mutation = Callable[[MutableMapping[str, Any]], None]


def hermes_home(explicit: str | Path | None = None) -> Path:
    """``explicit``, else ``$HERMES_HOME``, else ``~/.hermes`` (what Hermes itself uses)."""
    if explicit:
        return Path(explicit).expanduser()
    env = os.environ.get("HERMES_HOME", "").strip()
    return Path(env).expanduser() if env else Path.home() / ".hermes"


_cache_lock = threading.Lock()
_cache: dict[Path, tuple[int, int, dict[str, Any]]] = {}


def read_config(home: str | Path) -> dict[str, Any]:
    """The parsed ``config.yaml`` of a Hermes home ({} when there is none).

    Cached by modification time and size: providers read it on every
    ``initialize`` and a warm initialize must stay cheap."""
    path = Path(home) / "config.yaml"
    try:
        st = path.stat()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc
    with _cache_lock:
        hit = _cache.get(path)
        if hit is not None and hit[0] == st.st_mtime_ns and hit[1] == st.st_size:
            return hit[2]
    try:
        yaml: Any = importlib.import_module("yaml")  # untyped; comes with hermes-agent
    except ImportError as exc:
        raise ConfigError(f"reading {path} needs PyYAML (installed with hermes-agent)") from exc
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8-sig")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path} does not hold a mapping")
    with _cache_lock:
        _cache[path] = (st.st_mtime_ns, st.st_size, data)
    return data


def provider_section(config: dict[str, Any]) -> dict[str, Any]:
    """``memory.memstore`` of a parsed config: memstore's own settings in Hermes."""
    memory = config.get(CONFIG_SECTION)
    section = memory.get(PROVIDER_NAME) if isinstance(memory, dict) else None
    return dict(section) if isinstance(section, dict) else {}


def edit_config(home: str | Path, mutate: Mutation) -> Path:
    """Apply ``mutate`` to the top-level mapping of ``config.yaml`` and write it back
    atomically, keeping everything else. Returns the file's path."""
    path = Path(home) / "config.yaml"
    original = path.read_text(encoding="utf-8-sig") if path.exists() else ""
    text = _edit_text(original, mutate, path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".config.", suffix=".yaml", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        if path.exists():
            os.chmod(tmp, path.stat().st_mode & 0o7777)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _edit_text(original: str, mutate: Mutation, path: Path) -> str:
    try:
        return _edit_ruamel(original, mutate, path)
    except ImportError:
        pass
    try:
        return _edit_pyyaml(original, mutate, path)
    except ImportError:
        pass
    if original.strip():
        raise ConfigError(
            f"editing {path} needs ruamel.yaml or PyYAML (both come with hermes-agent: "
            "pip install hermes-agent)"
        )
    data: dict[str, Any] = {}
    mutate(data)
    return _dump_plain(data)


def _edit_ruamel(original: str, mutate: Mutation, path: Path) -> str:
    import io

    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    yaml = YAML()  # round-trip: comments, order and quoting survive
    yaml.preserve_quotes = True
    try:
        data = yaml.load(original) if original.strip() else None
    except YAMLError as exc:
        raise ConfigError(f"cannot parse {path}: {exc}") from exc
    if data is None:
        from ruamel.yaml.comments import CommentedMap

        data = CommentedMap()
    if not isinstance(data, MutableMapping):
        raise ConfigError(f"{path} does not hold a mapping")
    mutate(data)
    out = io.StringIO()
    yaml.dump(data, out)
    return out.getvalue()


def _edit_pyyaml(original: str, mutate: Mutation, path: Path) -> str:
    yaml: Any = importlib.import_module("yaml")

    try:
        data = yaml.safe_load(original) if original.strip() else {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"cannot parse {path}: {exc}") from exc
    data = data or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path} does not hold a mapping")
    mutate(data)
    return str(yaml.safe_dump(data, default_flow_style=False, sort_keys=False))


def _dump_plain(data: dict[str, Any], indent: int = 0) -> str:
    # Only for a brand-new file without any YAML library: nested mappings of
    # scalars, which is all install writes.
    lines: list[str] = []
    for key, value in data.items():
        if isinstance(value, dict):
            lines.append(" " * indent + f"{key}:")
            lines.append(_dump_plain(value, indent + 2).rstrip("\n"))
        else:
            lines.append(" " * indent + f"{key}: {_scalar(value)}")
    return "\n".join(lines) + "\n"


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def section(data: MutableMapping[str, Any], key: str) -> MutableMapping[str, Any]:
    """``data[key]`` as a mapping, created (or replacing a non-mapping) when needed."""
    value = data.get(key)
    if not isinstance(value, MutableMapping):
        value = {}
        data[key] = value
    return value


__all__ = [
    "CONFIG_SECTION",
    "PROVIDER_NAME",
    "edit_config",
    "hermes_home",
    "provider_section",
    "read_config",
    "section",
]
