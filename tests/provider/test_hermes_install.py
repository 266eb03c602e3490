"""`memstore hermes install / uninstall`, checked with Hermes' own `hermes memory status`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from memstore.cli import cli
from tests.hermes_support import hermes_home_fixture, installed  # noqa: F401

pytestmark = pytest.mark.hermes

EXISTING = """\
# my Hermes settings
model:
  default: some-model   # keep this comment
memory:
  memory_enabled: true
  provider: holographic
  holographic:
    db_path: /somewhere/else.db
display:
  skin: dark
"""


def run(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_install_keeps_other_settings_and_uninstall_restores(hermes_home: Path) -> None:
    pytest.importorskip("ruamel.yaml")
    (hermes_home / "config.yaml").write_text(EXISTING, encoding="utf-8")
    out = run("hermes", "install", "--hermes-home", str(hermes_home))
    assert "plugins/memstore" in out

    plugin = hermes_home / "plugins" / "memstore"
    init = (plugin / "__init__.py").read_text(encoding="utf-8")
    # What Hermes 0.19.0's loader looks for: the text "MemoryProvider" and register(ctx).
    assert "MemoryProvider" in init and "def register(ctx)" in init
    assert "memstore.hermes_provider" in init
    assert "name: memstore" in (plugin / "plugin.yaml").read_text(encoding="utf-8")

    text = (hermes_home / "config.yaml").read_text(encoding="utf-8")
    assert "provider: memstore" in text
    for kept in ("# my Hermes settings", "# keep this comment", "skin: dark", "/somewhere/else.db"):
        assert kept in text
    run("hermes", "install", "--hermes-home", str(hermes_home))  # idempotent

    run("hermes", "uninstall", "--hermes-home", str(hermes_home))
    assert not plugin.exists()
    assert (hermes_home / "config.yaml").read_text(encoding="utf-8") == EXISTING


def test_install_into_an_empty_home_and_refuse_foreign_folder(hermes_home: Path) -> None:
    run("hermes", "install", "--hermes-home", str(hermes_home), "--db", str(hermes_home / "m.db"))
    import yaml

    data = yaml.safe_load((hermes_home / "config.yaml").read_text(encoding="utf-8"))
    assert data["memory"]["provider"] == "memstore"
    assert data["memory"]["memstore"]["db_path"] == str((hermes_home / "m.db").resolve())
    run("hermes", "uninstall", "--hermes-home", str(hermes_home))
    data = yaml.safe_load((hermes_home / "config.yaml").read_text(encoding="utf-8"))
    assert data["memory"]["provider"] == ""

    foreign = hermes_home / "plugins" / "memstore"
    foreign.mkdir(parents=True)
    (foreign / "__init__.py").write_text("# someone else's plugin\n")
    result = CliRunner().invoke(cli, ["hermes", "install", "--hermes-home", str(hermes_home)])
    assert result.exit_code != 0 and "--force" in result.output
    result = CliRunner().invoke(cli, ["hermes", "uninstall", "--hermes-home", str(hermes_home)])
    assert result.exit_code != 0 and foreign.exists()


def test_help_has_examples() -> None:
    for args in (["hermes"], ["hermes", "install"], ["hermes", "uninstall"]):
        assert "Example:" in run(*args, "--help")


@pytest.mark.slow
def test_hermes_memory_status_lists_memstore_as_active(hermes_home: Path, tmp_path: Path) -> None:
    pytest.importorskip("hermes_cli.main")
    if not installed(tmp_path):
        pytest.skip("memstore.hermes_provider is importable only once memstore is installed")
    run("hermes", "install", "--hermes-home", str(hermes_home))
    env = {**os.environ, "HERMES_HOME": str(hermes_home), "MEMSTORE_EMBEDDER": "hashing"}
    proc = subprocess.run(
        [sys.executable, "-m", "hermes_cli.main", "memory", "status"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    out = proc.stdout
    assert proc.returncode == 0, proc.stderr
    assert "Provider:  memstore" in out
    assert "installed ✓" in out and "available ✓" in out
    assert "memstore" in out and "← active" in out.split("memstore  (")[-1]
    # Status only looks: it must not have created the database.
    assert not (hermes_home / "memstore.db").exists()


def test_the_shim_defines_register_before_anything_slow(hermes_home: Path) -> None:
    """Hermes 0.19.0 puts the plugin module into sys.modules before running it;
    a concurrent request that finds it without register() runs without memory.
    So register() is the module's first statement after the docstring, and
    memstore is imported only inside it."""
    import ast

    run("hermes", "install", "--hermes-home", str(hermes_home))
    tree = ast.parse((hermes_home / "plugins" / "memstore" / "__init__.py").read_text())
    body = tree.body
    assert isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
    assert isinstance(body[1], ast.FunctionDef) and body[1].name == "register"
    assert not any(isinstance(n, ast.Import | ast.ImportFrom) for n in body)
    assert any(isinstance(n, ast.ImportFrom) for n in ast.walk(body[1]))


def test_the_gateway_hook_preloads_the_provider(
    hermes_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hook Hermes' gateway imports at startup leaves a fully loaded plugin
    module behind; concurrent loads afterwards all get a provider."""
    pytest.importorskip("plugins.memory")
    import importlib.util
    import threading

    from memstore.hermes_provider.install import hook_dir
    from plugins import memory as hermes_memory

    from tests.hermes_support import provider_module

    provider_module()  # importable as the shim imports it, installed or not
    run("hermes", "install", "--hermes-home", str(hermes_home))
    hook = hook_dir(hermes_home)
    assert "gateway:startup" in (hook / "HOOK.yaml").read_text()
    module_name = "_hermes_user_memory.memstore"
    monkeypatch.delitem(sys.modules, module_name, raising=False)
    spec = importlib.util.spec_from_file_location("memstore_hook_test", hook / "handler.py")
    assert spec is not None and spec.loader is not None
    spec.loader.exec_module(importlib.util.module_from_spec(spec))  # what the gateway does
    loaded = sys.modules.get(module_name)
    assert loaded is not None and callable(getattr(loaded, "register", None))

    found: list[object] = []
    start = threading.Barrier(8)

    def load() -> None:
        start.wait(10)
        found.append(hermes_memory.load_memory_provider("memstore"))

    threads = [threading.Thread(target=load) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(found) == 8 and all(p is not None and p.name == "memstore" for p in found)
    sys.modules.pop(module_name, None)

    run("hermes", "uninstall", "--hermes-home", str(hermes_home))
    assert not hook.exists()
