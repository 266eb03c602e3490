"""Pick a DB-API SQLite module that can load sqlite-vec.

Many Pythons (pyenv builds, macOS system Python, several CI images) ship a
``sqlite3`` without ``enable_load_extension``. We prefer the stdlib module when
it can load extensions, else ``sqlean`` (sqlean.py bundles a recent SQLite with
loading enabled), else ``pysqlite3``. ``MEMSTORE_SQLITE_MODULE`` forces one.
"""

from __future__ import annotations

import functools
import importlib
import os
from types import ModuleType
from typing import Any

from memstore.errors import ExtensionError

_CANDIDATES = ("sqlite3", "sqlean", "pysqlite3.dbapi2")


def vec_path() -> str:
    """Where sqlite-vec's loadable extension is, found without importing the package:
    its ``__init__`` imports numpy (~0.2 s of CPU), which a short command must not pay."""
    import importlib.util
    import os

    spec = importlib.util.find_spec("sqlite_vec")
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    if not folders:
        import sqlite_vec  # an unusual install: let the package say where it is

        return str(sqlite_vec.loadable_path())
    return os.path.normpath(os.path.join(folders[0], "vec0"))


def load_vec(dbapi_conn: Any) -> None:
    """Load sqlite-vec into a raw DB-API connection."""
    try:
        dbapi_conn.enable_load_extension(True)
        try:
            dbapi_conn.load_extension(vec_path())
        finally:
            dbapi_conn.enable_load_extension(False)
    except Exception as exc:  # driver-specific error classes differ per module
        raise ExtensionError(f"cannot load sqlite-vec: {exc}") from exc


def _usable(mod: ModuleType) -> bool:
    conn_cls = getattr(mod, "Connection", None)
    if conn_cls is None or not hasattr(conn_cls, "enable_load_extension"):
        return False
    conn = mod.connect(":memory:")
    try:
        load_vec(conn)
        conn.execute("CREATE VIRTUAL TABLE t USING fts5(x)")
        return True
    except Exception:  # any failure means "try the next module"; reported by doctor
        return False
    finally:
        conn.close()


@functools.cache
def sqlite_module() -> ModuleType:
    forced = os.environ.get("MEMSTORE_SQLITE_MODULE")
    names = (forced,) if forced else _CANDIDATES
    tried: list[str] = []
    for name in names:
        try:
            mod = importlib.import_module(name)
        except ImportError:
            tried.append(f"{name}: not installed")
            continue
        if _usable(mod):
            return mod
        tried.append(f"{name}: cannot load extensions, sqlite-vec or FTS5")
    raise ExtensionError(
        "no SQLite module here can load sqlite-vec with FTS5 ("
        + "; ".join(tried)
        + "). Install one: pip install 'sqlean.py>=3.49' (or pysqlite3-binary)."
    )


def module_name(mod: ModuleType) -> str:
    return mod.__name__.split(".")[0]
