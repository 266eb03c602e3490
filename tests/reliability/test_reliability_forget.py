"""Forgetting by an id that is not live in the active generation is refused
instead of reporting success while the fact stays."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from memstore import Settings
from memstore.cli import cli, main
from memstore.derive import api
from memstore.errors import NotFoundError
from memstore.store import Store
from tests.derive_support import open_store, say

pytestmark = pytest.mark.both_backends


@pytest.fixture
def fstore(target: str, settings: Settings) -> Iterator[Store]:
    store = open_store(target, settings)
    try:
        say(store, "u", "s", "My name is Dana and I love hiking. I am allergic to peanuts.")
        store.run_pipeline("u")
        yield store
    finally:
        store.close()


def _peanut_id(store: Store) -> str:
    [m] = [m for m in store.list_memories("u") if "peanuts" in m["content"]]
    return str(m["memory_id"])


def _contents(store: Store) -> list[str]:
    return sorted(m["content"] for m in store.list_memories("u"))


def test_old_generation_id_is_refused_and_the_fact_stays(fstore: Store) -> None:
    old = _peanut_id(fstore)
    api.rederive(fstore._derivation, "u", from_layer="l1")
    before = _contents(fstore)
    assert "The user is allergic to peanuts." in before
    with pytest.raises(NotFoundError, match="not to user 'u''s active generation"):
        fstore.forget_memory("u", old)
    assert _contents(fstore) == before
    # the live one can be forgotten
    fstore.forget_memory("u", _peanut_id(fstore))
    assert "The user is allergic to peanuts." not in _contents(fstore)


def test_the_refusal_names_the_live_copy(fstore: Store) -> None:
    old = _peanut_id(fstore)
    gen = api.rederive(fstore._derivation, "u", from_layer="l2")  # copies L1 as <id>@<gen>
    with pytest.raises(NotFoundError, match=f"live copy there is '{old}@{gen}'"):
        fstore.forget_memory("u", old)
    fstore.forget_memory("u", f"{old}@{gen}")
    assert "The user is allergic to peanuts." not in _contents(fstore)


def test_forgetting_twice_is_refused(fstore: Store) -> None:
    mid = _peanut_id(fstore)
    fstore.forget_memory("u", mid)
    with pytest.raises(NotFoundError, match="already retired"):
        fstore.forget_memory("u", mid)


def test_cli_exits_non_zero_for_an_old_id(
    fstore: Store,
    target: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MEMSTORE_EMBEDDER", "hashing")
    old = _peanut_id(fstore)
    api.rederive(fstore._derivation, "u", from_layer="l1")
    db = target  # where fstore lives
    with pytest.raises(SystemExit) as exit_info:
        main(["memories", "forget", "--db", db, "--user", "u", old])
    assert exit_info.value.code != 0
    out = capsys.readouterr()
    assert "forgot" not in out.out and "active generation" in out.err
    assert "The user is allergic to peanuts." in _contents(fstore)
    live = _peanut_id(fstore)
    ok = CliRunner().invoke(cli, ["memories", "forget", "--db", db, "--user", "u", live])
    assert ok.exit_code == 0 and "forgot" in ok.output
