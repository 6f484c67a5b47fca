"""The base of the small values the hot path makes many of (a decision, a session's answers, a load's completion).

Each writes its constructor out: the one a dataclass or a NamedTuple generates stays interpreted where the rest is
compiled, and makes an object about 8 (NamedTuple) to 20 (frozen dataclass) times slower than a class's own
`__init__` (docs/benchmarks.md). What such a value must still be — equal and hashed by its fields, shown and pickled
by them — is here once: a subclass names its fields (`fields`) and returns their values (`values`), in order.
"""

from __future__ import annotations

from typing import Any, ClassVar

from mypy_extensions import mypyc_attr


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class Value:
    """A value of its own kind: equal to another of the same class with the same fields, hashed by them, shown as
    `Name(field=value, ...)` and pickled by its constructor. Never changed once made (by convention, as the
    NamedTuples it replaces could not be)."""

    __slots__ = ()
    fields: ClassVar[tuple[str, ...]] = ()

    def values(self) -> tuple[Any, ...]:
        """The fields' values, in the order of `fields` (the constructor's arguments)."""
        return tuple(getattr(self, name) for name in self.fields)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and isinstance(other, Value) and self.values() == other.values()

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash(self.values())

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={value!r}" for name, value in zip(self.fields, self.values(), strict=True))
        return f"{type(self).__name__}({shown})"

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), self.values()


__all__ = ["Value"]
