"""Settings: sections, flat names, sources, unknown keys, and docs/CONFIG.md."""

from __future__ import annotations

import logging
import re
from dataclasses import fields
from pathlib import Path

import pytest
from memstore.hermes_provider.settings import KEYS as HERMES_KEYS
from memstore.hermes_provider.settings import SECTION as HERMES

from memstore.config import (
    SETTINGS,
    LLMSettings,
    Settings,
    env_var,
)
from memstore.errors import ConfigError
from memstore.gateway.config import GatewayConfig

DOC = Path(__file__).resolve().parents[2] / "docs" / "CONFIG.md"


def _rows() -> list[list[str]]:
    return [
        [cell.strip() for cell in line.strip().strip("|").split("|")]
        for line in DOC.read_text(encoding="utf-8").splitlines()
        if line.startswith("| `")
    ]


def test_every_setting_has_a_row_with_its_flat_name_and_variable() -> None:
    rows = {r[0]: r for r in _rows()}
    for (sec, name), flat in SETTINGS.items():
        row = rows.get(f"`{sec}.{name}`")
        assert row is not None, f"{sec}.{name} is not documented in docs/CONFIG.md"
        assert row[1] == f"`{flat}`", (sec, name, row)
        env = env_var((sec, name))
        assert row[2] == (f"`{env}`" if env else "—"), (sec, name, row)
        assert row[-1], f"{sec}.{name} has no description"


def test_every_documented_setting_exists() -> None:
    documented = {r[0].strip("`") for r in _rows() if "." in r[0] and r[0].count("`") == 2}
    hosts = {f"{HERMES}.{key}" for key in HERMES_KEYS}
    assert documented - {f"{s}.{n}" for s, n in SETTINGS} - hosts == set()


def test_the_hermes_tables_keys_are_documented() -> None:
    """The provider's own section (provider/settings.py): its keys have no
    MEMSTORE_* variable, and the key is its flat name under memory.memstore."""
    rows = {r[0]: r for r in _rows()}
    for key in HERMES_KEYS:
        row = rows.get(f"`{HERMES}.{key}`")
        assert row is not None, f"{HERMES}.{key} is not documented in docs/CONFIG.md"
        assert (row[1], row[2]) == (f"`{key}`", "—") and row[-1], row


def test_every_gateway_setting_is_documented() -> None:
    rows = {r[0].strip("`") for r in _rows()}
    for f in fields(GatewayConfig):
        assert f.name in rows, f"gateway setting {f.name} is not documented in docs/CONFIG.md"


def test_flat_names_of_existing_config_files_map_into_sections(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "config.toml"
    path.write_text(
        'llm_model = "m"\nbusy_timeout_ms = 250\nembedder = "hashing"\nwarmup = [2, 3]\n'
        "[recall]\nthreshold = 0.5\n[pipeline]\nscheduler = false\n",
        encoding="utf-8",
    )
    s = Settings.load(path)
    assert s.llm.model == "m" and s.storage.busy_timeout_ms == 250
    assert s.embedding.backend == "hashing" and s.pipeline.warmup == (2, 3)
    assert s.recall.threshold == 0.5 and s.pipeline.scheduler is False
    # The [memstore] table, and the environment over the file.
    path.write_text('[memstore]\nllm_model = "file"\n[memstore.llm]\nbase_url = "u"\n')
    monkeypatch.setenv("MEMSTORE_LLM_MODEL", "env")
    monkeypatch.setenv("MEMSTORE_PIPELINE_LEASE_TTL_S", "2.5")
    s = Settings.load(path)
    assert (s.llm.model, s.llm.base_url, s.pipeline.lease_ttl_s) == ("env", "u", 2.5)
    assert s.llm.configured


def test_unknown_keys_are_rejected_with_the_closest_valid_name(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('llm_modle = "m"\n', encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        Settings.load(path)
    text = str(info.value)
    assert str(path) in text and "did you mean 'llm_model'?" in text
    assert "busy_timeout_ms" in text and "recall_threshold" in text  # the valid names
    with pytest.raises(ConfigError, match=r"\[llm\].*'modle'.*did you mean 'model'"):
        Settings.from_mapping({"llm": {"modle": "m"}})
    with pytest.raises(ConfigError, match="did you mean 'recall_limit'"):
        Settings().replace(recall_limt=3)


def test_closed_sets_and_types_are_checked() -> None:
    with pytest.raises(ConfigError, match=r"durability.*choose one of normal, full"):
        Settings().replace(durability="paranoid")
    with pytest.raises(ConfigError, match="busy_timeout_ms"):
        Settings().replace(busy_timeout_ms="soon")
    s = Settings().replace(embedder=" Hashing ", deriver="RULES")
    assert s.embedding.backend == "hashing" and s.llm.deriver == "rules"


def test_replace_by_flat_name_by_dotted_name_and_by_section() -> None:
    s = Settings().replace(llm_model="a", recall={"limit": 2})
    assert (s.llm.model, s.recall.limit) == ("a", 2)
    s = Settings.from_mapping({"pipeline.max_scenes": 3})
    assert s.pipeline.max_scenes == 3
    s = Settings().replace(llm=LLMSettings(model="b"))
    assert s.llm == LLMSettings(model="b") and s.recall == Settings().recall


def test_a_misspelt_variable_is_logged(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("MEMSTORE_LLM_MODLE", "m")
    with caplog.at_level(logging.WARNING, logger="memstore.config"):
        Settings.load()
    assert "MEMSTORE_LLM_MODLE" in caplog.text and "MEMSTORE_LLM_MODEL" in caplog.text


def test_a_hosts_table_is_kept_as_written_and_never_read(tmp_path: Path) -> None:
    """A table naming no section belongs to a host (the Hermes provider reads
    ``[hermes]``, tests/provider/test_provider_settings.py): kept, unchecked."""
    path = tmp_path / "config.toml"
    path.write_text('llm_model = "m"\n[myhost]\nanything = 1\n', encoding="utf-8")
    s = Settings.load(path, **{"myhost.colour": "blue"})
    assert s.llm.model == "m"
    assert s.host_section("myhost") == {"anything": 1, "colour": "blue"}
    assert s.host_section("other") == {}
    s = s.replace(myhost={"anything": 2}, recall_limit=3)
    assert s.host_section("myhost") == {"anything": 2, "colour": "blue"}
    assert s.recall.limit == 3 and hash(s) == hash(s.replace())
    # A misspelt section is not taken for a host's table.
    with pytest.raises(ConfigError, match="did you mean 'recall'"):
        Settings().replace(recal={"limit": 2})
    # Flat names stay memstore's: an unknown one is an error, as before.
    with pytest.raises(ConfigError, match="unknown setting 'colour'"):
        Settings().replace(colour="blue")


def test_the_core_settings_read_no_upstream_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """The upstream's TDAI_* names belong to the paths that speak its language
    (memstore/porting/upstream_env.py, tests/porting/test_import_upstream.py)."""
    monkeypatch.setenv("TDAI_LLM_MODEL", "upstream")
    assert Settings.load().llm.model == ""
    assert Settings.load(fallbacks={"llm_model": "given"}).llm.model == "given"
    monkeypatch.setenv("MEMSTORE_LLM_MODEL", "ours")
    assert Settings.load(fallbacks={"llm_model": "given"}).llm.model == "ours"


def test_flat_names_are_unique_and_readme_names_are_settings() -> None:
    assert len(set(SETTINGS.values())) == len(SETTINGS)
    readme = (DOC.parents[1] / "README.md").read_text(encoding="utf-8")
    known = {"MEMSTORE_" + flat.upper() for flat in SETTINGS.values()}
    outside = {"MEMSTORE_DB", "MEMSTORE_CONFIG", "MEMSTORE_USER", "MEMSTORE_SQLITE_MODULE"}
    for name in set(re.findall(r"MEMSTORE_[A-Z0-9_]*[A-Z0-9]", readme)):
        # The gateway's and PostgreSQL's (scripts/pg.sh, db/postgres.py) are their own,
        # and MEMSTORE_TEST_* / MEMSTORE_TESTS_* belong to the test suite (tests/conftest.py).
        own = ("MEMSTORE_GATEWAY", "MEMSTORE_PG_", "MEMSTORE_TEST")
        if not name.startswith(own) and name != "MEMSTORE_LLM":
            assert name in known | outside, f"README names {name}, which is no setting"
