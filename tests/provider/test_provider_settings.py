"""The provider's own settings (provider/settings.py): the ``[hermes]`` table of
memstore's config file, flat keys under ``memory.memstore``, constructor
overrides; memstore's core settings carry the table without reading it.

Needs no hermes-agent: installing and configuring work without it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from memstore.hermes_provider import config as provider_config
from memstore.hermes_provider.settings import HermesSettings, hermes_settings, split

from memstore.config import Settings
from memstore.errors import ConfigError


def _home(tmp_path: Path, yaml: str = "") -> Path:
    home = tmp_path / "hermes-home"
    home.mkdir(exist_ok=True)
    (home / "config.yaml").write_text(yaml, encoding="utf-8")
    return home


def test_every_source_of_the_hermes_section_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    toml = tmp_path / "config.toml"
    toml.write_text(
        '[hermes]\nuser_scope = "shared"\nuser_id = "file"\nsession_end_timeout_s = 3\n'
        "[recall]\nlimit = 4\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("MEMSTORE_CONFIG", str(toml))
    home = _home(
        tmp_path,
        "memory:\n  memstore:\n    user_id: yaml\n    db_path: m.db\n    recall_limit: 6\n",
    )
    cfg = provider_config.resolve(home, {"store_linger_s": "", "hermes.user_scope": "user"})
    assert cfg.hermes == HermesSettings(
        db_path="m.db", user_id="yaml", user_scope="user", session_end_timeout_s=3.0
    )
    assert cfg.db_path == home / "m.db" and cfg.settings.recall.limit == 6
    assert (cfg.user_id, cfg.user_scope, cfg.store_linger_s) == ("yaml", "user", None)
    # The same file, read by anything else (the CLI, Store.open): the table is kept, unread.
    assert Settings.load().host_section("hermes")["user_id"] == "file"


def test_errors_name_the_key_and_where_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = _home(tmp_path)
    with pytest.raises(ConfigError, match=r"memory.memstore: unknown .*'user_scop'.*'user_scope'"):
        provider_config.resolve(home, {"user_scop": "user"})
    with pytest.raises(ConfigError, match=r"memory.memstore\.store_linger_s: cannot use 'soon'"):
        provider_config.resolve(home, {"store_linger_s": "soon"})
    with pytest.raises(ConfigError, match=r"did you mean 'llm_model'"):
        split({"llm_modle": "m"}, "memory.memstore")
    toml = tmp_path / "config.toml"
    toml.write_text('[hermes]\nuser_scope = "everyone"\n', encoding="utf-8")
    monkeypatch.setenv("MEMSTORE_CONFIG", str(toml))
    with pytest.raises(ConfigError, match=r"\[hermes\] of the config file.*choose one of auto"):
        provider_config.resolve(home)
    toml.write_text('user_scope = "user"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"unknown setting 'user_scope'.*under its own table"):
        provider_config.resolve(home)
    toml.write_text('[hermes]\nuser_scpoe = "user"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"\[hermes\] of the config file.*'user_scope'"):
        hermes_settings(Settings.load())


def test_secrets_stay_out_of_config_yaml_and_save_keeps_the_providers_keys(
    tmp_path: Path,
) -> None:
    home = _home(tmp_path, "memory:\n  memstore:\n    llm_api_key: sk-x\n")
    with pytest.raises(ConfigError, match="belong in the environment"):
        provider_config.resolve(home)
    home = _home(tmp_path)
    provider_config.save({"db_path": "x.db", "user_scope": "shared", "llm_api_key": "k"}, home)
    text = (home / "config.yaml").read_text(encoding="utf-8")
    assert "db_path: x.db" in text and "user_scope: shared" in text and "sk" not in text
    assert "llm_api_key" not in text


def test_settings_and_install_import_without_hermes_agent() -> None:
    """``memstore hermes install`` and reading the config run in a Python that
    has no hermes-agent; only the provider class needs it."""
    probe = (
        "import sys\n"
        "sys.modules['agent'] = None\n"  # importing hermes-agent now fails
        "import memstore.hermes_provider.home, memstore.hermes_provider.install\n"
        "import memstore.hermes_provider.settings, memstore.hermes_provider.config\n"
        "import memstore.hermes_provider.stores, memstore.hermes_provider.sessions\n"
        "from memstore.hermes_provider import home\n"
        "try:\n"
        "    from memstore.hermes_provider import MemstoreProvider\n"
        "except ImportError:\n"
        "    print('provider needs hermes-agent')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "provider needs hermes-agent", out.stderr
