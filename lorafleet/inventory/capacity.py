"""An engine's capacity in time and room: how long an adapter's load takes, and how many adapters it keeps.

The one home of both rules, which every plan, view and simulation reads; a module of its own so that it is compiled
with the core (setup.py): the simulated and stand-in engines, the session and the policies ask for a load's time,
a copy's time or an engine's slots several times a request, and each call of a function left interpreted costs a
Python call (docs/benchmarks.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mypy_extensions import mypyc_attr

from lorafleet.pickling import rebuilt


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
@dataclass(frozen=True, slots=True)
class LoadModel:
    """Cold load = fixed overhead + disk read + host-to-device copy; a host-cached adapter pays the copy only."""

    load_fixed_ms: float = 15.0
    disk_gbps: float = 3.0
    h2d_gbps: float = 25.0

    def cold_ms(self, size_bytes: int) -> float:
        return self.load_fixed_ms + size_bytes / (self.disk_gbps * 1e9) * 1e3 + self.copy_ms(size_bytes)

    def copy_ms(self, size_bytes: int) -> float:
        return size_bytes / (self.h2d_gbps * 1e9) * 1e3

    def __reduce__(self) -> tuple[Any, ...]:
        return rebuilt(self)  # pickled by its constructor (lorafleet/pickling.py)


def slot_cap(gpu_slots: int, host_slots: int | None) -> int:
    """How many adapters an engine keeps resident: its host-cache slots, or its GPU slots where the host cache
    has no cap (SGLang without --max-loaded-loras). Planning, the policies and every view use this one rule."""
    return host_slots if host_slots is not None else gpu_slots


__all__ = ["LoadModel", "slot_cap"]
