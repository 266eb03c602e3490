"""Imports never resurrect, on both backends: records merged or deleted in the
upstream's vectors.db stay out, and an erased user's data is not imported
again without an explicit allowance."""

from __future__ import annotations

from pathlib import Path

import pytest

from memstore.errors import InvalidInputError
from memstore.porting.erased import Erased
from memstore.porting.report import ImportReport
from memstore.porting.upstream import read_upstream
from memstore.porting.upstream_apply import import_upstream
from memstore.store import Store
from tests.porting_support import (
    DELETED,
    MERGED,
    MERGED_INTO,
    build_upstream_dir,
    with_gone_records,
)


def test_gone_records_stay_out_and_erasure_holds(store: Store, tmp_path: Path) -> None:
    root = with_gone_records(build_upstream_dir(tmp_path / "up"))
    report = ImportReport()
    import_upstream(store, read_upstream(root, report), "alice", report)
    contents = {m["content"] for m in store.list_memories("alice", include_retired=True)}
    assert MERGED_INTO in contents and not {MERGED, DELETED} & contents

    store.forget_user("alice", vacuum_full=True)
    with pytest.raises(InvalidInputError, match="was erased"):
        import_upstream(store, read_upstream(root, ImportReport()), "alice", ImportReport())
    assert store.list_memories("alice") == []
    allowed = Erased(store, allow=True)
    import_upstream(
        store, read_upstream(root, ImportReport()), "alice", ImportReport(), None, allowed
    )
    assert MERGED_INTO in {m["content"] for m in store.list_memories("alice")}
