"""Simulated engines in log time: what replay runs against, and what stands in for the engines in shadow mode.

Each engine has one serial loader (engines load adapters one at a time on the request path). A load takes the
load-time model's cold time for its size. Demand loads go ahead of queued prefetches but never preempt the load
in progress, as an engine serves its waiting requests before idle work; a request that starts waiting on a
queued prefetch moves it to the front. What each engine holds is counted here from the decisions alone, not
from the book, so a load past an engine's slots or bytes shows as a violation even if the book were wrong.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from lorafleet.inventory.model import LoadModel
from lorafleet.policy.core import DEMAND, EVICT, LOAD, Decision
from lorafleet.policy.residency import Budget


@dataclass(frozen=True, slots=True)
class Completion:
    done_ms: float
    engine: str
    adapter: str


class _Loader:
    """One engine's serialized loader."""

    __slots__ = ("busy_ms", "current", "load", "queue")

    def __init__(self, load: LoadModel) -> None:
        self.load = load
        self.queue: deque[str] = deque()
        self.current: str | None = None
        self.busy_ms = 0.0


class SimulatedEngines:
    """Every engine's loader and holdings; the driver applies decisions and takes completions in time order."""

    def __init__(self, loads: Mapping[str, LoadModel], budgets: Mapping[str, Budget], sizes: Mapping[str, int]):
        self.loaders = {key: _Loader(load) for key, load in loads.items()}
        self.budgets = dict(budgets)
        self.sizes = sizes
        self.held: dict[str, dict[str, int]] = {key: {} for key in loads}
        self.completions: list[tuple[float, int, str, str]] = []  # (done ms, seq, engine, adapter)
        self.seq = 0
        self.last_done_ms = 0.0
        self.violations = 0

    def apply(self, now_ms: float, decisions: Iterable[Decision]) -> None:
        for d in decisions:
            held = self.held[d.engine]
            if d.action == EVICT:
                held.pop(d.adapter, None)
                continue
            if d.action != LOAD:
                continue
            held[d.adapter] = self.sizes[d.adapter]
            budget = self.budgets[d.engine]
            over_slots = budget.host_slots is not None and len(held) > budget.host_slots
            over_bytes = budget.budget_bytes is not None and sum(held.values()) > budget.budget_bytes
            self.violations += int(over_slots) + int(over_bytes)
            loader = self.loaders[d.engine]
            if d.reason == DEMAND:
                loader.queue.appendleft(d.adapter)
            else:
                loader.queue.append(d.adapter)
            self.start_next(now_ms, d.engine)

    def start_next(self, now_ms: float, engine: str) -> None:
        loader = self.loaders[engine]
        if loader.current is not None or not loader.queue:
            return
        adapter = loader.queue.popleft()
        loader.current = adapter
        duration = loader.load.cold_ms(self.sizes[adapter])
        loader.busy_ms += duration
        self.last_done_ms = max(self.last_done_ms, now_ms + duration)
        self.seq += 1
        heapq.heappush(self.completions, (now_ms + duration, self.seq, engine, adapter))

    def promote(self, engine: str, adapter: str) -> None:
        """A request now waits on a queued prefetch: it goes to the front, as a demand load would."""
        loader = self.loaders[engine]
        if loader.current != adapter and adapter in loader.queue:
            loader.queue.remove(adapter)
            loader.queue.appendleft(adapter)

    def next_done_ms(self) -> float:
        return self.completions[0][0] if self.completions else float("inf")

    def pop_done(self) -> Completion:
        """The earliest completion; the engine's loader starts its next queued load at that instant."""
        done_ms, _, engine, adapter = heapq.heappop(self.completions)
        self.loaders[engine].current = None
        return Completion(done_ms, engine, adapter)

    def cold_ms(self, engine: str, adapter: str) -> float:
        return self.loaders[engine].load.cold_ms(self.sizes[adapter])

    def copy_ms(self, engine: str, adapter: str) -> float:
        return self.loaders[engine].load.copy_ms(self.sizes[adapter])

    @property
    def busy_ms(self) -> float:
        return sum(loader.busy_ms for loader in self.loaders.values())


__all__ = ["Completion", "SimulatedEngines"]
