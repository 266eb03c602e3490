"""Shared helpers for the tests that drive the real hermes-agent.

The provider ships as ``memstore.hermes_provider`` (pyproject maps ``provider/``
onto it), which exists once memstore is installed (``pip install -e .``). From a
bare source tree the same files are loaded under that name here, so the tests
run either way.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent


def provider_module() -> ModuleType:
    try:
        return importlib.import_module("memstore.hermes_provider")
    except ModuleNotFoundError as exc:
        if exc.name != "memstore.hermes_provider":
            raise
    spec = importlib.util.spec_from_file_location(
        "memstore.hermes_provider",
        ROOT / "provider" / "__init__.py",
        submodule_search_locations=[str(ROOT / "provider")],
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["memstore.hermes_provider"] = mod
    spec.loader.exec_module(mod)
    return mod


def installed(cwd: Path) -> bool:
    """True when a fresh Python (as Hermes runs in a subprocess) imports the provider."""
    import subprocess

    probe = subprocess.run(
        [sys.executable, "-c", "import memstore.hermes_provider"],
        cwd=cwd,
        capture_output=True,
        check=False,
    )
    return probe.returncode == 0


def config(**extra: Any) -> dict[str, Any]:
    """Provider config for tests: offline embedder, stores close with the last holder.

    The pipeline's timers run, as they do in Hermes."""
    return {"embedder": "hashing", "store_linger_s": 0, **extra}


@pytest.fixture(name="hermes_home")
def hermes_home_fixture(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty Hermes home as $HERMES_HOME (conftest.hermetic_home keeps the
    developer's config and MEMSTORE_* variables out)."""
    home = tmp_path / "hermes-home"
    home.mkdir()
    monkeypatch.setenv("HERMES_HOME", str(home))
    try:
        yield home
    finally:
        # Through provider_module: from a bare source tree the package exists
        # only once it has loaded it.
        stores = importlib.import_module(provider_module().__name__ + ".stores")
        stores.shared_stores().close_all()


def memory_texts(result_json: str) -> list[str]:
    import json

    data = json.loads(result_json)
    assert "error" not in data, data
    return [r["text"] for r in data["results"]]
