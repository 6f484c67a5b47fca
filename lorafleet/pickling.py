"""What a frozen memory (store/memory.py) needs from a class that mypyc may have compiled (setup.py).

A compiled class has neither `__dict__` nor `__slots__` to read; mypyc lists its attributes in
`__mypyc_attrs__`. `attributes` reads whichever the class has, so one `__getstate__` serves both builds.
"""

from __future__ import annotations

import dataclasses
from typing import Any


def attributes(obj: object) -> dict[str, Any]:
    """The attributes `obj` has set, by name (compiled or not; slots of every class in its MRO included)."""
    cls = type(obj)
    names: list[str] = list(getattr(cls, "__mypyc_attrs__", ()))
    for klass in cls.__mro__:
        slots = klass.__dict__.get("__slots__", ())
        names.extend((slots,) if isinstance(slots, str) else slots)
    names.extend(getattr(obj, "__dict__", {}))
    found: dict[str, Any] = {}
    for name in names:
        if name not in found and name not in ("__dict__", "__weakref__") and hasattr(obj, name):
            found[name] = getattr(obj, name)
    return found


def restore(obj: object, state: dict[str, Any]) -> None:
    """Set each attribute of a state `attributes` read (a compiled class has no `__dict__` to update)."""
    for name, value in state.items():
        setattr(obj, name, value)


def rebuilt(obj: Any) -> tuple[Any, ...]:
    """`__reduce__` of a frozen dataclass: its class and its fields' values, so unpickling calls its constructor (a
    compiled frozen class cannot be set field by field, as unpickling otherwise does)."""
    return (type(obj), tuple(getattr(obj, f.name) for f in dataclasses.fields(obj)))


__all__ = ["attributes", "rebuilt", "restore"]
