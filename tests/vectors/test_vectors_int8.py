"""int8 vector spaces (memstore.db.elements): what they store, how they
rank next to float32, and the stores and paths that must keep working."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import text

from memstore import Settings
from memstore.db import backend, elements, migrate
from memstore.db.engine import SqliteDatabase
from memstore.errors import ConfigError
from memstore.store import Store, default_projections
from memstore.vectors import spaces
from tests.porting_support import run_cli
from tests.vectors.test_vectors_hot import TEXTS as HOT_TEXTS

pytestmark = pytest.mark.both_backends

TEXTS = [
    *HOT_TEXTS,
    "Our flight to Tokyo leaves at seven in the morning",
    "The garden needs new tomato plants this spring",
    "I broke my left wrist skiing last winter",
    "Book club meets on the first Monday of the month",
]
QUERIES = ["cat kitten", "trip to the Alps", "piano lessons in Lisbon", "tomato garden", "flight"]


def _fill(store: Store, user: str = "alice") -> None:
    for i, t in enumerate(TEXTS * 2):
        store.capture_turn(user, f"s{i % 3}", f"{t} ({i})", "ok")
    store.reindex()


def _ranked(store: Store, query: str, user: str = "alice") -> list[tuple[str, float | None]]:
    hits = store.search_conversations(user, query, strategy="vector", limit=10)
    return [(h.ref, h.similarity) for h in hits]


def _space(store: Store, kind: str = "l0") -> spaces.Space:
    with store._db.read() as conn:
        got = [sp for sp in spaces.list_spaces(conn) if sp.kind == kind]
    assert len(got) == 1
    return got[0]


def _ddl(store: Store, table: str) -> str:
    with store._db.read() as conn:
        return str(
            conn.execute(
                text("SELECT sql FROM sqlite_master WHERE name = :t"), {"t": table}
            ).scalar_one()
        )


@pytest.fixture
def open_store(
    new_target: Callable[[str], str], settings: Settings
) -> Iterator[Callable[[str, str], Store]]:
    """Stores of the test's engine with the given element type."""
    opened: list[Store] = []

    def make(name: str, element: str) -> Store:
        s = Store.open(new_target(name), settings=settings.replace(vector_element=element))
        opened.append(s)
        return s

    yield make
    for s in opened:
        s.close()


def test_quantize_scales_each_vector_to_127() -> None:
    v = np.array([[0.5, -0.25, 0.0, 0.125], [0.0, 0.0, 0.0, 0.0]], dtype=np.float32)
    q = elements.quantize(v)
    assert q.dtype == np.int8
    assert q[0].tolist() == [127, -64, 0, 32]  # round(-63.5) is -64 (half to even)
    assert q[1].tolist() == [0, 0, 0, 0]
    back = elements.unit_rows(q)
    assert float(np.linalg.norm(back[0])) == pytest.approx(1.0, abs=1e-6)
    assert back[1].tolist() == [0.0] * 4
    with pytest.raises(ConfigError, match="unknown vector element type 'int4'"):
        elements.check("int4")


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)  # vec0's own tables
def test_an_int8_space_stores_one_byte_a_dimension(store: Store) -> None:
    _fill(store)
    sp = _space(store)
    assert sp.element == "int8"  # the default
    assert f"embedding int8[{sp.dims}]" in _ddl(store, sp.table_name)
    with store._db.read() as conn:
        blobs = [
            bytes(r[0])
            for r in conn.execute(text(f'SELECT vectors FROM "{sp.table_name}_vector_chunks00"'))
        ]
        ids = [int(r[0]) for r in conn.execute(text("SELECT id FROM l0_messages"))]
        got = backend.of(conn).vectors_by_id(conn, sp.table_name, ids, sp.element)
    # One 128-slot chunk per user, a byte a dimension (float32: four).
    assert [len(b) for b in blobs] == [128 * sp.dims]
    # Read back as unit float32 vectors, the direction of what was embedded.
    assert store._embedder is not None
    for blob in got.values():
        v = np.frombuffer(blob, dtype=np.float32)
        assert v.shape == (sp.dims,) and float(np.linalg.norm(v)) == pytest.approx(1.0, abs=1e-5)
    first = min(got)
    want = store._embedder.embed_documents([f"{TEXTS[0]} (0)"])[0]
    assert float(np.frombuffer(got[first], dtype=np.float32) @ want) > 0.9999


def test_int8_ranks_as_float32_on_a_small_set(open_store: Callable[[str, str], Store]) -> None:
    f32, i8 = open_store("f32", "float32"), open_store("i8", "int8")
    for s in (f32, i8):
        _fill(s)
    assert _space(i8).element == ("int8" if i8._db.dialect == "sqlite" else "float32")
    assert _space(f32).element == "float32"
    for q in QUERIES:
        a, b = _ranked(f32, q), _ranked(i8, q)
        assert [r for r, _ in a[:5]] == [r for r, _ in b[:5]], q
        for (_, x), (_, y) in zip(a, b, strict=True):
            assert x is not None and y is not None and abs(x - y) < 0.01


def test_hybrid_and_memories_work_on_int8(store: Store) -> None:
    _fill(store)
    store.write_memory("alice", "add", "Alice has a grey kitten", type="persona")
    store.reindex()
    hits = store.search_conversations("alice", "grey kitten")
    assert "grey kitten" in hits[0].text
    mem = store.search_memories("alice", "kitten", strategy="vector")
    assert [m.text for m in mem] == ["Alice has a grey kitten"]
    assert store.search_memories("alice", "kitten", type="episodic") == []  # a vec0 filter


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)  # int8 is SQLite's
def test_convert_gives_the_vectors_int8_would_have_stored(
    open_store: Callable[[str, str], Store],
) -> None:
    f32, i8 = open_store("f32", "float32"), open_store("i8", "int8")
    for s in (f32, i8):
        _fill(s)
    before = {q: _ranked(f32, q) for q in QUERIES}
    old = _space(f32)
    with f32._db.write() as conn:
        done = spaces.convert(conn, "int8")
    assert sorted(n for n, _ in done) == sorted(sp.name for sp in _spaces(f32))
    new = _space(f32)
    assert (new.element, new.epoch, new.cursor, new.ready) == ("int8", old.epoch + 1, old.cursor, 1)
    assert "int8[" in _ddl(f32, new.table_name)
    for q in QUERIES:
        # The very scores of a store that was int8 from the start.
        assert _ranked(f32, q) == _ranked(i8, q)
        assert [r for r, _ in _ranked(f32, q)[:5]] == [r for r, _ in before[q][:5]]
    # New messages go into the converted space; nothing is left pending.
    f32.capture_turn("alice", "s9", "A parrot named Kiwi whistles the anthem", "ok")
    f32.reindex()
    assert _top_text(f32, "parrot Kiwi")
    assert f32.pending_embeddings() == 0
    with f32._db.write() as conn:
        assert spaces.convert(conn, "int8") == []  # already so


def _spaces(store: Store) -> list[spaces.Space]:
    with store._db.read() as conn:
        return spaces.list_spaces(conn)


def _top_text(store: Store, query: str) -> bool:
    hits = store.search_conversations("alice", query, strategy="vector", limit=1)
    return bool(hits) and "Kiwi" in hits[0].text


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_postgresql_keeps_float32(store: Store) -> None:
    """pgvector stores float32: a space asked to be int8 records float32, and
    converting says why it cannot."""
    _fill(store)
    assert {sp.element for sp in _spaces(store)} == {"float32"}
    with store._db.write() as conn, pytest.raises(ConfigError, match="float32 only"):
        spaces.convert(conn, "int8")


def test_a_wrong_dimension_is_still_a_clear_error(store: Store) -> None:
    _fill(store)
    sp = _space(store)
    with store._db.write() as conn, pytest.raises(ConfigError, match="now reports 128 dimensions"):
        spaces.ensure_space(conn, "l0", sp.model_id, 128, "2026-12-05T00:00:00Z", "int8")


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)  # vec0's column type
def test_a_vector_of_the_wrong_length_is_refused_by_vec0(store: Store) -> None:
    _fill(store)
    sp = _space(store)
    row = {"id": 999_999, "u": "alice", "m0": "s0", "v": np.ones(sp.dims // 2, "<f4").tobytes()}
    with store._db.write() as conn, pytest.raises(Exception, match=r"[Dd]imension"):
        backend.of(conn).write_vectors(conn, sp.table_name, "l0", [row], sp.element)


def test_erasure_carries_int8_vectors_over_unchanged(store: Store) -> None:
    _fill(store, "alice")
    _fill(store, "bob")
    before = {q: _ranked(store, q) for q in QUERIES}
    sp = _space(store)
    store.forget_user("bob")
    after = _space(store)
    assert after.element == sp.element and after.table_name != sp.table_name
    if store._db.dialect == "sqlite":
        assert f"{sp.element.replace('float32', 'float')}[" in _ddl(store, after.table_name)
    for q in QUERIES:
        got = _ranked(store, q)
        # alice's rows were renumbered; their order and scores stay.
        assert [s for _, s in got] == [s for _, s in before[q]]
    assert store.search_conversations("bob", "cat", strategy="vector") == []
    store.rebuild()
    assert [s for _, s in _ranked(store, "cat kitten")] == [s for _, s in before["cat kitten"]]


# On a SQLite file (db_path): downgrading to an older schema in place.
def test_an_old_float32_store_keeps_searching_after_the_upgrade(
    db_path: Path, settings: Settings
) -> None:
    old_settings = settings.replace(vector_element="float32")
    with Store.open(db_path, settings=old_settings) as s:
        _fill(s)
        before = {q: _ranked(s, q) for q in QUERIES}
        table = _space(s).table_name
    db = SqliteDatabase(db_path)
    try:
        # The schema as the version before int8 left it: no element column.
        migrate.downgrade(db, "0023_scrub", owners=migrate.projection_tables(default_projections()))
        with db.read() as conn:
            cols = [r[1] for r in conn.exec_driver_sql("PRAGMA table_info(vector_spaces)")]
        assert "element" not in cols
    finally:
        db.close()
    # Opened by the new code, whose default for new spaces is int8.
    with Store.open(db_path, settings=settings) as s:
        sp = _space(s)
        assert (sp.element, sp.table_name) == ("float32", table)
        assert "float[" in _ddl(s, table)
        for q in QUERIES:
            assert _ranked(s, q) == before[q]
        s.capture_turn("alice", "s9", "A parrot named Kiwi whistles the anthem", "ok")
        s.reindex()
        assert _top_text(s, "parrot Kiwi")
        assert _space(s).table_name == table and s.pending_embeddings() == 0


# On a SQLite file (db_path): int8 tables are SQLite's.
def test_downgrade_turns_int8_spaces_back_into_float32(db_path: Path, settings: Settings) -> None:
    with Store.open(db_path, settings=settings) as s:
        _fill(s)
        before = {q: [r for r, _ in _ranked(s, q)[:5]] for q in QUERIES}
    db = SqliteDatabase(db_path)
    try:
        migrate.downgrade(db, "0023_scrub", owners=migrate.projection_tables(default_projections()))
        with db.read() as conn:
            tables = [r[0] for r in conn.exec_driver_sql("SELECT table_name FROM vector_spaces")]
            ddl = [
                str(
                    conn.exec_driver_sql(
                        "SELECT sql FROM sqlite_master WHERE name = ?", (t,)
                    ).one()[0]
                )
                for t in tables
            ]
        assert ddl and all("float[" in d for d in ddl)
    finally:
        db.close()
    with Store.open(db_path, settings=settings) as s:
        assert {sp.element for sp in _spaces(s)} == {"float32"}
        for q in QUERIES:
            assert [r for r, _ in _ranked(s, q)[:5]] == before[q]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)  # int8 is SQLite's
def test_reindex_converts_an_existing_store(
    target: str, settings: Settings, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with Store.open(target, settings=settings.replace(vector_element="float32")) as s:
        _fill(s)
        before = {q: [r for r, _ in _ranked(s, q)[:5]] for q in QUERIES}
    monkeypatch.setenv("MEMSTORE_DB", target)
    monkeypatch.setenv("MEMSTORE_EMBEDDER", "hashing")
    monkeypatch.setenv("MEMSTORE_CONFIG", str(tmp_path / "none.toml"))
    r = run_cli("reindex", "--vector-element", "int8")
    assert r.exit_code == 0, r.stderr
    assert f"{len(TEXTS) * 4} vector(s) now stored as int8" in r.stdout
    assert "already" in run_cli("reindex", "--vector-element", "int8").stdout
    with Store.open(target, settings=settings) as s:
        assert {sp.element for sp in _spaces(s)} == {"int8"}
        for q in QUERIES:
            assert [r for r, _ in _ranked(s, q)[:5]] == before[q]
