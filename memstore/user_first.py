"""``user_id`` comes first in every per-user ``Store`` method.

Each one takes the user as its first parameter, positionally or as
``user_id=``: ``store.list_memories("alice")``, ``store.recall("alice",
"where do I live?")``, ``store.search_memories(user_id="alice",
query="Lisbon")``. The search and recall methods used to take the query first
and ``user_id=`` by keyword only; ``user_id_first`` keeps that spelling
working, with a ``DeprecationWarning``, for one minor version.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


def user_id_first(method: F) -> F:
    """Accept the old ``method(query, user_id=...)`` call of ``method(user_id,
    query)``: a ``user_id`` keyword beside positional arguments can only be
    that spelling (the first positional argument would be the user), so the
    positional arguments are moved one place to the right."""

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        if args and "user_id" in kwargs:
            warnings.warn(
                f"Store.{method.__name__}(query, user_id=...) is deprecated and will be"
                f" removed in memstore 0.3; pass the user first:"
                f" {method.__name__}(user_id, query, ...)",
                DeprecationWarning,
                stacklevel=2,
            )
            args = (kwargs.pop("user_id"), *args)
        return method(self, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


__all__ = ["user_id_first"]
