"""``memstore memories list`` reads the bare database: it loads no Store, no
embedder, no migration code and no LLM client (its start-up time is measured
by `memstore bench cli-startup`; here the imports are checked, not timed), and it
lists what ``Store.list_memories`` lists."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from memstore import Settings, Store
from tests.porting_support import cli_env, run_cli

__all__ = ["cli_env"]

HEAVY = ("openai", "numpy", "memstore.store", "alembic", "apscheduler", "tqdm")


def test_memories_list_loads_no_engine(cli_env: Path) -> None:
    run_cli("capture", "--user", "alice", "--session", "s1", "--user-text", "I like green tea")
    assert run_cli("pipeline", "run", "--user", "alice").exit_code == 0
    code = (
        "import sys\n"
        "from memstore.cli import main\n"
        f"try:\n    main(['memories', 'list', '--user', 'alice', '--db', {str(cli_env)!r}])\n"
        "except SystemExit:\n    pass\n"
        f"print('HEAVY', [m for m in {HEAVY!r} if m in sys.modules])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "green tea" in out.stdout, out.stdout + out.stderr
    assert "HEAVY []" in out.stdout, out.stdout + out.stderr


def test_memories_list_matches_the_store(cli_env: Path) -> None:
    run_cli("capture", "--user", "alice", "--session", "s1",
            "--user-text", "I like green tea. I live in Lisbon.")  # fmt: skip
    assert run_cli("pipeline", "run", "--user", "alice").exit_code == 0
    listed = run_cli("memories", "list", "--user", "alice", "--all", "--json")
    assert listed.exit_code == 0, listed.output
    s = Settings().replace(embedder="hashing", scheduler=False, background_indexer=False)
    with Store.open(cli_env, settings=s) as store:
        expected = [m.to_dict() for m in store.list_memories("alice", include_retired=True)]
    assert expected and json.loads(listed.output) == expected


def test_memories_list_checks_its_arguments_and_creates_nothing(
    cli_env: Path, tmp_path: Path
) -> None:
    missing = tmp_path / "nope.db"
    done = run_cli("memories", "list", "--user", "alice", "--db", str(missing))
    assert done.exit_code != 0 and "no database" in done.output
    assert not missing.exists()
    run_cli("capture", "--user", "alice", "--session", "s1", "--user-text", "I like green tea")
    bad = run_cli("memories", "list", "--user", "al\x00ice")
    assert bad.exit_code != 0 and "user_id" in bad.output


def test_search_of_a_current_store_loads_no_migration_code_or_scheduler(cli_env: Path) -> None:
    # The search itself needs numpy (BM25) and an embedder; not the store's
    # upgrade path (alembic), its pipeline and scheduler, or an LLM client.
    run_cli("capture", "--user", "alice", "--session", "s1", "--user-text", "I like green tea")
    assert run_cli("pipeline", "run", "--user", "alice").exit_code == 0
    heavy = ("alembic", "apscheduler", "memstore.store", "memstore.pipeline.service", "openai")
    for kind in ("conversations", "memories"):
        code = (
            "import sys\n"
            "from memstore.cli import main\n"
            f"try:\n    main(['search', {kind!r}, 'tea', '--user', 'alice', "
            f"'--db', {str(cli_env)!r}])\n"
            "except SystemExit:\n    pass\n"
            f"print('HEAVY', [m for m in {heavy!r} if m in sys.modules])\n"
        )
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
        )
        assert "green tea" in out.stdout, out.stdout + out.stderr
        assert "HEAVY []" in out.stdout, out.stdout + out.stderr
