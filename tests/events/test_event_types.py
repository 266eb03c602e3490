"""What a store can read does not depend on what a process imported: every
event type memstore defines is in ``memstore.event_types``, and a store
registers that table itself."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
import textwrap

import pytest

import memstore
from memstore.event_types import EVENT_TYPES
from memstore.events.types import Event

pytestmark = pytest.mark.both_backends


def _subclasses(cls: type) -> set[type]:
    out = set()
    for sub in cls.__subclasses__():
        out |= {sub, *_subclasses(sub)}
    return out


def test_the_table_lists_every_event_type_memstore_defines() -> None:
    for mod in pkgutil.walk_packages(memstore.__path__, "memstore."):
        if not mod.name.startswith("memstore.bench") and not mod.name.endswith("__main__"):
            importlib.import_module(mod.name)
    defined = {
        c
        for c in _subclasses(Event)
        if c.__module__.startswith("memstore.") and not c.__module__.startswith("memstore.bench")
    }
    assert defined == set(EVENT_TYPES)
    assert len({c.TYPE for c in EVENT_TYPES}) == len(EVENT_TYPES)


def test_importing_an_event_module_registers_nothing_and_a_store_registers_all(
    target: str,
) -> None:
    code = textwrap.dedent(
        """
        import sys
        from memstore.events.types import registry
        import memstore.derive.messages.events, memstore.derive.events
        assert registry.known() == [], registry.known()
        from memstore import Settings
        from memstore.store import Store
        s = Settings().replace(embedder="none", scheduler=False, background_indexer=False)
        with Store.open(sys.argv[1], settings=s) as store:
            store.capture_turn("u", "s", "hello there", "hi")
            assert [e.type for e in store.read_events()] == ["l0.captured"]
        assert "l1.extracted" in registry.known()
        """
    )
    done = subprocess.run([sys.executable, "-c", code, target], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
