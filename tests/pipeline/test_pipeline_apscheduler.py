"""APScheduler through its public API: jobs stored as
textual references with plain arguments, each job firing into the service
of its own scheduler (no process-wide registry), the timer bookkeeping of a
capture off the capture's transaction and written once per idle period,
jobs of older versions replaced by reconcile, no private APScheduler name
used by memstore's pipeline."""

from __future__ import annotations

import ast
import pickle
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from apscheduler.executors.base import BaseExecutor
from apscheduler.executors.pool import BasePoolExecutor
from apscheduler.job import Job
from apscheduler.jobstores.base import BaseJobStore
from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.schedulers.base import BaseScheduler
from sqlalchemy import event, text

from memstore import Settings
from memstore.pipeline import PipelineService, scheduler
from memstore.pipeline.scheduler import JOB_TABLE, idle_job_id
from memstore.store import Store
from memstore.timeutil import timedelta
from tests.backends import Targets
from tests.pipeline_support import FakeClock, FakeDeriver, capture, open_store

pytestmark = pytest.mark.both_backends

PIPELINE = Path(scheduler.__file__).parent

# The extension contract of a custom executor (BaseExecutor's abstract
# method and its completion callback): the only underscore names allowed.
EXECUTOR_HOOKS = {"_do_submit_job", "_run_job_success"}
# SQLAlchemy's Row._mapping is public API (underscored so no column shadows it).
PUBLIC_UNDERSCORED = {"_mapping"}


def _apscheduler_private_names() -> set[str]:
    names: set[str] = set()
    for cls in (
        BaseScheduler,
        BackgroundScheduler,
        BaseExecutor,
        BasePoolExecutor,
        BaseJobStore,
        SQLAlchemyJobStore,
        Job,
    ):
        names |= {n for n in dir(cls) if n.startswith("_") and not n.startswith("__")}
    # Attributes set in __init__ (not visible on the class).
    names |= {"_thread", "_event", "_jobstores", "_executors", "_pool", "_instances"}
    return names


def _apscheduler_classes(tree: ast.Module) -> set[str]:
    """Names the module imports from apscheduler."""
    return {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("apscheduler")
        for alias in node.names
    }


def private_uses(source: str, name: str) -> list[str]:
    """Private APScheduler names a module touches: ``obj._x`` on any object
    but ``self``/``cls`` (that is also reaching into, say, the database's
    lock), and ``self._x`` or ``def _x`` in classes derived from APScheduler's."""
    private = _apscheduler_private_names() - EXECUTOR_HOOKS
    tree = ast.parse(source)
    aps = _apscheduler_classes(tree)
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            owner = node.value
            on_self = isinstance(owner, ast.Name) and owner.id in ("self", "cls")
            public = node.attr.startswith("__") or node.attr in PUBLIC_UNDERSCORED
            if not on_self and not public:
                found.append(f"{name}:{node.lineno} {ast.unparse(node)}")
        if isinstance(node, ast.ClassDef) and any(
            isinstance(b, ast.Name) and b.id in aps for b in node.bases
        ):
            for inner in ast.walk(node):
                if isinstance(inner, ast.Attribute) and inner.attr in private:
                    found.append(f"{name}:{inner.lineno} {ast.unparse(inner)}")
                elif isinstance(inner, ast.FunctionDef) and inner.name in private:
                    found.append(f"{name}:{inner.lineno} def {inner.name}")
    return found


def test_the_pipeline_uses_no_private_apscheduler_name() -> None:
    found: list[str] = []
    for path in sorted(PIPELINE.glob("*.py")):
        found += private_uses(path.read_text(encoding="utf-8"), path.name)
    assert found == []


def test_the_check_above_catches_what_the_old_code_did() -> None:
    old = """
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore

class _Scheduler(BackgroundScheduler):
    def _process_jobs(self):
        return super()._process_jobs()

class _Store(SQLAlchemyJobStore):
    def start(self, scheduler, alias):
        self._logger = None

def due(sched, db):
    lock = db._write_lock
    return sched._lookup_jobstore("default")
"""
    found = private_uses(old, "old.py")
    for expected in (
        "def _process_jobs",
        "self._logger",
        "db._write_lock",
        "sched._lookup_jobstore",
    ):
        assert any(expected in f for f in found), (expected, found)


def test_a_timer_is_a_textual_reference_with_plain_arguments(
    env: tuple[Store, PipelineService, FakeDeriver], clock: FakeClock
) -> None:
    store, svc, _ = env
    capture(store, svc, "u", "s")
    svc.drain()
    capture(store, svc, "u", "s")  # below threshold 2: the idle timer
    with store._db.read() as conn:
        rows = dict(conn.execute(text(f"SELECT id, job_state FROM {JOB_TABLE}")).all())
    state = pickle.loads(rows[idle_job_id("u", "s")])
    assert state["func"] == "memstore.pipeline.scheduler:idle_timer"
    assert state["args"] == ("u", "s") and state["kwargs"] == {}
    assert not any(isinstance(v, (Store, PipelineService)) for v in state.values())


_PROBES: list[tuple[str, Any]] = []
_PROBED = threading.Condition()


def _probe(tag: str, *, target: Any = None) -> None:
    with _PROBED:
        _PROBES.append((tag, target))
        _PROBED.notify_all()


def _scheduler_store(path: Path) -> Store:
    s = Settings().replace(
        embedder="hashing",
        scheduler=True,
        background_indexer=False,
        pipeline_lease_ttl_s=0.6,
    )
    return Store.open(path, settings=s)


def _wait(cond: Any, timeout: float = 30.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.05)
    return False


def test_two_stores_in_one_process_fire_into_their_own_service(new_target: Targets) -> None:
    with _scheduler_store(new_target("a.db")) as a, _scheduler_store(new_target("b.db")) as b:
        assert a._pipeline is not None and b._pipeline is not None
        assert _wait(lambda: a._pipeline.timers.running and b._pipeline.timers.running)  # type: ignore[union-attr]
        _PROBES.clear()
        for name, store in (("a", a), ("b", b)):
            assert store._pipeline is not None
            store._pipeline.timers.set("probe", f"{__name__}:_probe", [name], store._clock())
        with _PROBED:
            assert _PROBED.wait_for(lambda: len(_PROBES) == 2, timeout=30)
        assert dict(_PROBES) == {"a": a._pipeline, "b": b._pipeline}


def test_a_job_of_an_older_version_is_replaced_by_reconcile(
    env: tuple[Store, PipelineService, FakeDeriver], clock: FakeClock
) -> None:
    """Jobs once named a module function and the file's path; such a row
    cannot be restored now: APScheduler deletes it and reconcile re-arms."""
    store, svc, _ = env
    capture(store, svc, "u", "s")
    svc.drain()
    capture(store, svc, "u", "s")
    idle = idle_job_id("u", "s")
    with store._db.write() as conn:
        blob = conn.execute(
            text(f"SELECT job_state FROM {JOB_TABLE} WHERE id = :i"), {"i": idle}
        ).scalar_one()
        state = pickle.loads(blob)
        state["func"] = "memstore.pipeline.scheduler:fire_l1_idle"
        state["args"] = (str(store.path), "u", "s")
        conn.execute(
            text(f"UPDATE {JOB_TABLE} SET job_state = :b WHERE id = :i"),
            {"b": pickle.dumps(state), "i": idle},
        )
    assert svc.reconcile()["timers_armed"] == 1
    assert svc.timers.get(idle) == clock() + timedelta(seconds=600)
    clock.advance(600)
    assert idle in svc.timers.run_due(clock())


@pytest.fixture
def statements(
    new_target: Targets,
) -> Iterator[tuple[Store, PipelineService, list[tuple[str, str]]]]:
    """A pipeline store whose SQL statements are recorded with their thread."""
    store = open_store(new_target("m.db"), warmup=(50,), extract_every=50)
    svc = PipelineService(store._derivation, deriver=FakeDeriver())
    svc.timers.jobs()  # the job table exists
    seen: list[tuple[str, str]] = []

    def record(_conn: Any, _cur: Any, statement: str, *_: Any) -> None:
        seen.append((threading.current_thread().name, statement))

    event.listen(store._db.engine, "before_cursor_execute", record)
    try:
        yield store, svc, seen
    finally:
        event.remove(store._db.engine, "before_cursor_execute", record)
        svc.stop()
        store.close()


def _job_writes(seen: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [
        (thread, sql)
        for thread, sql in seen
        if JOB_TABLE in sql and sql.lstrip().upper().startswith(("INSERT", "UPDATE", "DELETE"))
    ]


def test_captures_write_no_timer_in_their_transaction_and_one_per_idle_period(
    statements: tuple[Store, PipelineService, list[tuple[str, str]]],
) -> None:
    store, svc, seen = statements
    me = threading.current_thread().name
    for i in range(20):
        capture(store, svc, "u", f"s{i % 2}")
    writes = _job_writes(seen)
    # Two sessions, twenty captures: one idle timer each, written by the timer
    # thread; nothing about timers on the capturing thread.
    assert len(writes) == 2, writes
    assert all(thread != me for thread, _ in writes)
    assert not any(JOB_TABLE in sql for thread, sql in seen if thread == me)
    assert {j for j, _ in svc.timers.jobs()} == {idle_job_id("u", "s0"), idle_job_id("u", "s1")}


def test_arming_survives_another_process_deleting_the_timer_row(
    env: tuple[Store, PipelineService, FakeDeriver], clock: FakeClock
) -> None:
    """serve --workers N: APScheduler arms by insert, then update on conflict;
    between the two another process may fire the timer and delete its row.
    The update must put the row back, not raise JobLookupError (seen in CI)."""
    store, svc, _ = env
    when = clock() + timedelta(seconds=60)
    svc.timers.set("race", f"{__name__}:_probe", ["x"], when)
    job = svc.timers.scheduler().get_job("race", jobstore="memstore")
    assert job is not None
    jobstore = svc.timers.store
    assert jobstore is not None
    with store._db.write() as conn:  # the other process fired and deleted it
        conn.execute(text(f"DELETE FROM {JOB_TABLE} WHERE id = 'race'"))
    jobstore.update_job(job)
    assert svc.timers.get("race") == when
    later = when + timedelta(seconds=60)
    svc.timers.set("race", f"{__name__}:_probe", ["x"], later)  # the ordinary path still updates
    assert svc.timers.get("race") == later
