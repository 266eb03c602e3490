"""The suite never touches the developer's home."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from memstore.hermes_provider.home import hermes_home

from memstore.config import default_db_path
from tests.conftest import CLEARED_ENV, REAL_HOME

# HOME while this module is imported (collection): already not the developer's,
# so a package that writes under ~ at import time (hermes-agent) writes in tmp.
HOME_AT_IMPORT = Path.home()


def test_collection_runs_with_a_temporary_home() -> None:
    assert HOME_AT_IMPORT.resolve() != Path(REAL_HOME).resolve()
    assert HOME_AT_IMPORT.name.startswith("memstore-tests-home-")


def test_home_and_hermes_home_are_temporary(hermetic_home: Path) -> None:
    assert Path.home() == hermetic_home
    assert Path(REAL_HOME).resolve() != hermetic_home.resolve()
    assert hermes_home().resolve().is_relative_to(hermetic_home.resolve())
    assert default_db_path().resolve().is_relative_to(hermetic_home.resolve())


def test_child_processes_inherit_the_temporary_home(hermetic_home: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", "import os, pathlib; print(pathlib.Path.home())"],
        capture_output=True,
        text=True,
        check=True,
        env=dict(os.environ),
    )
    assert Path(out.stdout.strip()) == hermetic_home


def test_settings_variables_are_cleared(hermetic_home: Path) -> None:
    assert not [v for v in os.environ if v.startswith(CLEARED_ENV)]
    for var in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME"):
        assert Path(os.environ[var]).is_relative_to(hermetic_home)
