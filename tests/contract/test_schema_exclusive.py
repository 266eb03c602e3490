"""Schema changes are exclusive: ``memstore db upgrade``/``downgrade`` refuse,
changing nothing, while any process has the store open (a live store would
otherwise see a table vanish under it), and run once it is gone, also after
it was killed; a store opening during a schema change waits for it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from memstore import Settings
from memstore.cli import main
from memstore.db import migrate, presence
from memstore.db.connect import open_database
from memstore.errors import LockedError, MigrationError
from memstore.store import Store

_HOLDER = textwrap.dedent(
    """
    import sys
    from memstore import Settings
    from memstore.store import Store
    s = Settings().replace(embedder="hashing", scheduler=False, background_indexer=False)
    store = Store.open(sys.argv[1], settings=s)
    print("open", flush=True)
    sys.stdin.read()
    """
)


def _revision(target: str) -> str | None:
    db = open_database(target if "://" in target else Path(target))
    try:
        return migrate.current_revision(db)
    finally:
        db.close()


def _cli(*args: str) -> int:
    try:
        main(list(args))
    except SystemExit as e:
        return int(e.code or 0)
    return 0


def test_schema_change_refused_while_another_process_has_the_store_open(
    target: str, settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    Store.open(target, settings=settings).close()
    head = _revision(target)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTORE_")}
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, target],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "open"
        capsys.readouterr()
        assert _cli("db", "downgrade", "0020_l1kw", "--db", target) == 1
        err = capsys.readouterr().err
        assert "is open in" in err and "nothing was changed" in err
        assert len(err.strip().splitlines()) == 1
        assert _cli("db", "upgrade", "--db", target) == 1
        assert _revision(target) == head
    finally:
        holder.send_signal(signal.SIGKILL)  # a crash: nothing is left holding it
        holder.wait(30)
    assert _cli("db", "downgrade", "0020_l1kw", "--db", target) == 0
    assert _revision(target) == "0020_l1kw"
    assert _cli("db", "upgrade", "--db", target) == 0
    assert _revision(target) == head


def test_refused_while_this_process_has_it_open(target: str, settings: Settings) -> None:
    store = Store.open(target, settings=settings)
    try:
        assert _cli("db", "upgrade", "--db", target) == 1
    finally:
        store.close()
    assert _cli("db", "upgrade", "--db", target) == 0


def test_a_store_opening_during_a_schema_change_waits_for_it(
    target: str, settings: Settings
) -> None:
    Store.open(target, settings=settings).close()
    db = open_database(target if "://" in target else Path(target))
    try:
        hold = presence.hold_exclusive(db)
        with pytest.raises(LockedError, match="schema change"):
            Store.open(target, settings=settings.replace(schema_wait_s=0.3))
        hold.release()
        Store.open(target, settings=settings).close()
    finally:
        db.close()


def test_an_automatic_upgrade_waits_for_other_stores_to_close(
    target: str, settings: Settings
) -> None:
    Store.open(target, settings=settings).close()
    head = _revision(target)
    assert _cli("db", "downgrade", "0020_l1kw", "--db", target) == 0
    db = open_database(target if "://" in target else Path(target))
    try:
        other = presence.hold_shared(db)  # a store of an older memstore, still open
        with pytest.raises(MigrationError, match="schema change"):
            Store.open(target, settings=settings.replace(busy_timeout_ms=300))
        assert _revision(target) == "0020_l1kw"
        other.release()
        Store.open(target, settings=settings).close()
        assert _revision(target) == head
    finally:
        db.close()


@pytest.mark.slow
def test_processes_opening_a_new_store_at_once_all_succeed(target: str) -> None:
    """Each finds the schema missing; one upgrades, the others wait for it
    (up to ``schema_wait_s``, not only their busy timeout)."""
    script = _HOLDER.replace('print("open", flush=True)\nsys.stdin.read()', "store.close()")
    assert script != _HOLDER
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTORE_")}
    procs = [
        subprocess.Popen([sys.executable, "-c", script, target], env=env, stderr=subprocess.PIPE)
        for _ in range(4)
    ]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err.decode()
    assert _revision(target) == migrate.head_revision()
