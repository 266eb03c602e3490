"""Event payload types, their registry, and upcasters.

A payload class is a frozen dataclass with a stable ``TYPE`` string (never the
Python path, so renaming a class does not orphan stored rows) and a
``VERSION``. When a payload's shape changes, bump ``VERSION`` and register an
upcaster from the old version; stored rows are upgraded on read and never
rewritten.

What the log stores is :meth:`Event.pack`: the field dict as JSON, unless a
type stores a smaller JSON array (``l0.captured``, one per capture, is most
of the log). An array is turned back into the field dict by the type's
:meth:`Event.unpack` for the stored version, before any upcaster runs, so
upcasters, exports and imports only ever see the dict form.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

from memstore.errors import EventError, UnknownEventTypeError, UpcastError

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]


@dataclasses.dataclass(frozen=True)
class Event:
    """Base of every payload. Fields must be JSON types (str, int, float, bool,
    None, list, dict) so the stored JSON is the whole truth."""

    TYPE: ClassVar[str] = ""
    VERSION: ClassVar[int] = 1

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _field_names(type(self))}

    def pack(self) -> dict[str, Any] | list[Any]:
        """The JSON value the log stores for this payload."""
        return self.to_dict()

    @classmethod
    def unpack(cls, version: int, data: list[Any]) -> dict[str, Any]:
        """The field dict of a payload :meth:`pack` stored as an array."""
        raise EventError(f"{cls.TYPE} v{version}: stored as an array, which this type never writes")

    @classmethod
    def from_packed(cls, version: int, data: list[Any]) -> Event:
        """The payload :meth:`pack` stored as an array, at this code's version
        (no upcaster to run): by default :meth:`unpack`, then :meth:`from_dict`.
        A type whose arrays are most of the log may build the event directly."""
        return cls.from_dict(cls.unpack(version, data))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Event:
        if not data.keys() <= _field_set(cls):
            unknown = set(data).difference(_field_names(cls))
            raise EventError(f"{cls.TYPE}: unexpected payload fields {sorted(unknown)}")
        return cls(**data)


_FIELDS: dict[type, tuple[str, ...]] = {}
_FIELD_SETS: dict[type, frozenset[str]] = {}


def _field_names(cls: type[Event]) -> tuple[str, ...]:
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return names


def _field_set(cls: type[Event]) -> frozenset[str]:
    names = _FIELD_SETS.get(cls)
    if names is None:
        names = _FIELD_SETS[cls] = frozenset(_field_names(cls))
    return names


E = TypeVar("E", bound=type[Event])


class Registry:
    def __init__(self) -> None:
        self._types: dict[str, type[Event]] = {}
        self._upcasters: dict[tuple[str, int], Upcaster] = {}

    def register(self, cls: E) -> E:
        name = cls.TYPE
        if not name:
            raise EventError(f"{cls.__name__} has no TYPE")
        existing = self._types.get(name)
        if existing is not None and existing is not cls:
            raise EventError(f"event type {name!r} registered twice")
        self._types[name] = cls
        return cls

    def add_upcaster(self, type_name: str, from_version: int, fn: Upcaster) -> None:
        self._upcasters[(type_name, from_version)] = fn

    def get(self, type_name: str) -> type[Event]:
        try:
            return self._types[type_name]
        except KeyError:
            raise UnknownEventTypeError(type_name) from None

    def known(self) -> list[str]:
        return sorted(self._types)

    def decode(self, type_name: str, version: int, data: Any) -> Event:
        """The payload of a stored row: ``data`` is the row's parsed JSON (a
        field dict, or the array :meth:`Event.pack` wrote) at ``version``."""
        cls = self.get(type_name)
        if isinstance(data, list):
            if version == cls.VERSION:
                try:
                    return cls.from_packed(version, data)
                except TypeError as exc:
                    raise EventError(f"{type_name} v{version}: does not fit: {exc}") from exc
            data = cls.unpack(version, data)
        elif not isinstance(data, dict):
            raise EventError(f"{type_name} v{version}: payload is {type(data).__name__}")
        v = version
        while v < cls.VERSION:
            fn = self._upcasters.get((type_name, v))
            if fn is None:
                raise UpcastError(
                    f"{type_name}: stored at version {v}, code is at {cls.VERSION}, "
                    f"and no upcaster from version {v} is registered"
                )
            data = fn(dict(data))
            v += 1
        if v > cls.VERSION:
            raise UpcastError(
                f"{type_name}: stored at version {version}, newer than this code "
                f"({cls.VERSION}); upgrade memstore"
            )
        try:
            return cls.from_dict(data)
        except TypeError as exc:
            raise EventError(f"{type_name} v{version}: payload does not fit: {exc}") from exc


registry = Registry()


def upcaster(type_name: str, from_version: int) -> Callable[[Upcaster], Upcaster]:
    """Decorator: ``@upcaster("l0.captured", 1)`` turns a v1 payload dict into v2."""

    def deco(fn: Upcaster) -> Upcaster:
        registry.add_upcaster(type_name, from_version, fn)
        return fn

    return deco
