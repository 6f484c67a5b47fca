"""When each adapter was held on each engine: a request learned from its log line is judged by then.

A line is read after its request ended, and lines come in the order requests end, not the order they came: the
engine served the request at its arrival, from what it held then. Every session (drive/session.py) keeps, per
adapter and engine, the stretches of time it held the adapter — what simulated engines did (an expert's copy of
the fleet, shadow mode), or what the book knew of live ones — so a request is judged by what was held when it
came, not by what is held when its line is read; and a line that reveals a load the engine made at an arrival (a
miss then) adds that stretch, which later lines of requests that came meanwhile are judged by.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable

from mypy_extensions import mypyc_attr

INF = float("inf")


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class Stays:
    """Per adapter and engine, the stretches [start, end) it was held, as one sorted list of their bounds (start,
    end, start, end, ...; a stay still going ends at +inf): an instant is inside a stay when an odd number of
    bounds are at or before it. Stays that ended more than `keep_s` before the newest bound are dropped: a line
    is judged at its request's arrival, so the record need reach back only as far as requests last (`reach`);
    until a line with a duration comes, only each adapter's latest stay per engine is kept (the record is part
    of what a daemon keeps across a restart, written every second)."""

    __slots__ = ("keep_s", "on")

    def __init__(self, keep_s: float = 0.0) -> None:
        self.keep_s = keep_s
        self.on: dict[str, dict[str, list[float]]] = {}

    def began(self, engine: str, adapter: str, at: float) -> None:
        """It is held from `at` on (a load done)."""
        self.add(engine, adapter, at, INF)

    def ended(self, engine: str, adapter: str, at: float) -> None:
        """It is held no more from `at` on (evicted, unloaded, lost)."""
        bounds = self.on.get(adapter, {}).get(engine)
        if bounds:
            i = bisect_left(bounds, at)
            if i % 2:  # inside a stay: it ends there
                bounds[i:] = [at]
            else:
                del bounds[i:]

    def add(self, engine: str, adapter: str, start: float, end: float) -> None:
        """It was held over [start, end), merged with the stays known there."""
        if end <= start:
            return
        bounds = self.on.setdefault(adapter, {}).setdefault(engine, [])
        i, j = bisect_left(bounds, start), bisect_right(bounds, end)
        if i % 2:  # starts inside (or where one ends): that stay begins it
            i -= 1
            start = bounds[i]
        if j % 2:  # ends inside (or where one starts): that stay ends it
            end = bounds[j]
            j += 1
        bounds[i:j] = [start, end]
        newest = end if end != INF else start
        if len(bounds) > 2 and bounds[1] < newest - self.keep_s:
            cut = bisect_left(bounds, newest - self.keep_s)
            del bounds[: cut - cut % 2]

    def reach(self, span_s: float) -> None:
        """Judgements will look `span_s` back (a request that long): keep twice that, at least."""
        if 2.0 * span_s > self.keep_s:
            self.keep_s = 2.0 * span_s

    def forget(self, engines: Iterable[str]) -> None:
        """These engines hold nothing they held before (left the fleet, or started anew)."""
        for engine in set(engines):
            for per in self.on.values():
                per.pop(engine, None)

    def known(self, engine: str, adapter: str) -> bool:
        return engine in self.on.get(adapter, {})

    def held(self, engine: str, adapter: str, at: float) -> bool:
        """Whether it was held at `at` (only where `known`)."""
        bounds = self.on.get(adapter, {}).get(engine)
        return bool(bounds) and bisect_right(bounds, at) % 2 == 1  # type: ignore[arg-type]

    def since(self, engine: str, adapter: str) -> float:
        """When its latest stay there began (-inf: not known)."""
        bounds = self.on.get(adapter, {}).get(engine)
        return bounds[-2] if bounds else -INF

    def engines(self, adapter: str) -> Iterable[str]:
        """The engines it has been held on, as far as kept."""
        return self.on.get(adapter, {}).keys()


__all__ = ["Stays"]
