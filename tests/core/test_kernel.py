"""The kernel's one append path: projections and hooks inside the write
transaction, on-commit hooks after it, nothing at all for an empty append."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Connection, text

from memstore.config import Settings
from memstore.errors import StorageError
from memstore.events.log import NewEvent, StoredEvent
from memstore.kernel import Batch, Hooks, Kernel
from memstore.projections.stats import StatsProjection
from memstore.store import Store
from tests.backends import Targets
from tests.helpers_events import Noted

pytestmark = pytest.mark.both_backends


@pytest.fixture
def kernel(new_target: Targets) -> Iterator[Kernel]:
    s = Settings().replace(embedder="none", scheduler=False, background_indexer=False)
    with Store.open(new_target("k.db"), settings=s, projections=[StatsProjection()]) as store:
        yield store._kernel


def _noted(n: int = 0) -> NewEvent:
    return NewEvent("test/k", Noted("x", n), user_id="u")


def _counted(conn: Connection) -> int:
    return int(conn.execute(text("SELECT coalesce(sum(n), 0) FROM event_counts")).scalar_one())


def test_hooks_see_the_projection_inside_the_transaction_and_run_after_commit(
    kernel: Kernel,
) -> None:
    seen: list[str] = []

    def in_txn(conn: Connection, stored: list[StoredEvent]) -> object:
        # The inline projection already applied, in this same transaction.
        seen.append(f"txn:{len(stored)}:{_counted(conn)}")
        return lambda: seen.append("deferred")

    kernel.add_hooks(in_transaction=in_txn, on_commit=lambda st: seen.append(f"commit:{len(st)}"))
    stored = kernel.append([_noted(1), _noted(2)])
    assert [e.position for e in stored] == [1, 2]
    assert seen == ["txn:2:2", "deferred", "commit:2"]


def test_an_empty_append_writes_nothing_and_runs_no_hook(kernel: Kernel) -> None:
    calls: list[str] = []
    kernel.add_hooks(
        in_transaction=lambda _c, _s: calls.append("txn"), on_commit=lambda _s: calls.append("c")
    )
    assert kernel.append_if(lambda _conn: []) == []
    assert calls == [] and kernel.head() == 0


def test_a_failing_hook_rolls_the_append_back(kernel: Kernel) -> None:
    def boom(_conn: Connection, _stored: list[StoredEvent]) -> None:
        raise RuntimeError("hook failed")

    with pytest.raises(RuntimeError):
        kernel.append([_noted()], hooks=Hooks(in_transaction=[boom]))
    assert kernel.head() == 0
    with kernel.db.read() as conn:
        assert _counted(conn) == 0
    # The stream's cached head was forgotten with the rollback: seq starts at 1 again.
    [again] = kernel.append([_noted()], hooks=Hooks())
    assert (again.position, again.seq) == (1, 1)


def test_the_builder_decides_inside_the_transaction(kernel: Kernel) -> None:
    kernel.append([_noted()])

    def only_if_empty(conn: Connection) -> list[NewEvent]:
        return [_noted()] if _counted(conn) == 0 else []

    assert kernel.append_if(only_if_empty) == []
    assert kernel.head() == 1


def test_a_batch_sets_a_position_floor_and_runs_then_in_the_transaction(kernel: Kernel) -> None:
    after: list[int] = []

    def build(_conn: Connection) -> Batch:
        return Batch(
            [_noted()],
            after=10,
            then=lambda conn, st: after.append(_counted(conn) + st[0].position),
        )

    [ev] = kernel.append_if(build)
    assert ev.position == 11 and after == [12]


def test_explicit_hooks_replace_the_registered_ones(kernel: Kernel) -> None:
    calls: list[str] = []
    kernel.add_hooks(on_commit=lambda _s: calls.append("registered"))
    kernel.append([_noted()], hooks=Hooks(on_commit=[lambda _s: calls.append("mine")]))
    assert calls == ["mine"]


def test_a_closed_kernel_refuses_appends_and_reads(kernel: Kernel) -> None:
    kernel.close()
    with pytest.raises(StorageError, match="store is closed"):
        kernel.append([_noted()])
    with pytest.raises(StorageError, match="store is closed"):
        kernel.head()
