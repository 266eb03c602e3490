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
