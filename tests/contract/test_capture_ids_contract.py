"""One id, one message: a capture naming two different messages with the same
id is refused whole (storing either would silently lose the other); the same
message twice is a duplicate, reported as one."""

from __future__ import annotations

import pytest

from memstore.errors import InvalidInputError
from memstore.store import Store


def test_two_messages_with_one_id_and_different_content_are_refused(store: Store) -> None:
    msgs = [
        {"id": "same", "role": "user", "content": "first"},
        {"id": "same", "role": "user", "content": "second"},
    ]
    with pytest.raises(InvalidInputError, match="message 1 has id 'same'"):
        store.capture("u", "s", msgs)
    assert store.read_events(types=["l0.captured"]) == []
    res = store.capture("u", "s", [msgs[0], dict(msgs[0])])
    assert res.stored == ["same"] and res.duplicates == ["same"]
    again = store.capture("u", "s", [msgs[0]])
    assert again.stored == [] and again.duplicates == ["same"]
