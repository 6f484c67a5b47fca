"""Simulated engines in log time: what replay runs against, and what stands in for the engines in shadow mode.

Each engine has one serial loader (engines load adapters one at a time on the request path). A load takes the
load-time model's cold time for its size. Demand loads go ahead of queued prefetches but never preempt the load
in progress, as an engine serves its waiting requests before idle work; among themselves they keep their
requests' order, as an engine's scheduler serves its waiting requests first come, first served (were the latest
first, a busy engine would leave a request waiting for as long as newer ones kept coming). A request that starts
waiting on a queued prefetch makes it a demand load, behind those already waiting. What each engine holds is
counted here from the decisions alone, not from the book, so a load past an engine's slots or bytes shows as a
violation even if the book were wrong. Instants are epoch seconds, as everywhere in the session; load times are
milliseconds.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from mypy_extensions import mypyc_attr

from lorafleet.inventory.capacity import LoadModel
from lorafleet.policy.core import DEMAND, EVICT, LOAD, UNLOAD, Decision
from lorafleet.policy.residency import Budget
from lorafleet.policy.value import Value


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class Completion(Value):
    """A load done: a value (policy/value.py), one made per load."""

    __slots__ = ("adapter", "done_at", "engine", "replaced")
    fields = ("done_at", "engine", "adapter", "replaced")

    def __init__(self, done_at: float, engine: str, adapter: str, replaced: bool) -> None:
        self.done_at = done_at  # epoch seconds
        self.engine = engine
        self.adapter = adapter
        self.replaced = replaced  # started by a loader a new budget replaced: the engine's new book never had it


class Loading(NamedTuple):
    """An engine's loader as it stands: the load in progress and when it completes, then the queue."""

    current: str | None
    done_at: float  # epoch seconds; inf when nothing is loading
    queue: tuple[str, ...]
    demands: int  # how many of the queue's first entries are demand loads


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class _Loader:
    """One engine's serialized loader."""

    __slots__ = ("busy_ms", "current", "demands", "done_at", "load", "queue")

    def __init__(self, load: LoadModel) -> None:
        self.load = load
        self.queue: deque[str] = deque()  # the demand loads first, in their requests' order; then prefetches
        self.demands = 0  # how many of the queue's first entries are demand loads
        self.current: str | None = None
        self.done_at = float("inf")  # when `current` completes
        self.busy_ms = 0.0

    def wait(self, adapter: str) -> None:
        """A request now waits on `adapter`: it joins the demand loads, behind those already there."""
        self.queue.insert(self.demands, adapter)
        self.demands += 1


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class SimulatedEngines:
    """Every engine's loader and holdings; the session applies decisions and takes completions in time order."""

    def __init__(self, loads: Mapping[str, LoadModel], budgets: Mapping[str, Budget], sizes: Mapping[str, int]):
        self.loaders: dict[str, _Loader] = {}
        self.budgets: dict[str, Budget] = {}
        self.held: dict[str, dict[str, int]] = {}
        self.sizes = sizes
        # (done at, seq, engine, adapter, the loader that started it; absent in a memory pickled before it was kept)
        self.completions: list[tuple[float, int, str, str, _Loader]] = []
        self.seq = 0
        self.last_done = float("-inf")
        self.violations = 0
        self.replace_engines(loads, budgets)

    def replace_engines(
        self, loads: Mapping[str, LoadModel], budgets: Mapping[str, Budget], sizes: Mapping[str, int] | None = None
    ) -> None:
        """A new inventory: engines that stay with the same budget keep their loader and holdings (as the book
        keeps theirs); new ones, and those whose budget changed, start empty; the adapters are the new ones'."""
        same = {k for k in loads if k in self.loaders and self.budgets.get(k) == budgets[k]}
        self.loaders = {k: self.loaders[k] if k in same else _Loader(load) for k, load in loads.items()}
        self.held = {k: self.held[k] if k in same else {} for k in loads}
        self.budgets = dict(budgets)
        if sizes is not None:
            self.sizes = sizes

    def apply(self, now: float, decisions: Iterable[Decision]) -> None:
        for d in decisions:
            action = d.action
            if action in (EVICT, UNLOAD):
                self.held[d.engine].pop(d.adapter, None)
            elif action == LOAD:
                self.queue(now, d.engine, d.adapter, d.reason == DEMAND, d.overrun)

    def queue(self, now: float, engine: str, adapter: str, demand: bool, overrun: bool) -> None:
        """`overrun`: the engine took the adapter itself past its budget (`Decision.overrun`): its doing, no
        violation of lorafleet's."""
        held = self.held[engine]
        held[adapter] = self.sizes[adapter]
        if not overrun:
            budget = self.budgets[engine]
            over_slots = budget.host_slots is not None and len(held) > budget.host_slots
            over_bytes = budget.budget_bytes is not None and sum(held.values()) > budget.budget_bytes
            self.violations += int(over_slots) + int(over_bytes)
        loader = self.loaders[engine]
        if demand:
            loader.wait(adapter)
        else:
            loader.queue.append(adapter)
        self.start_next(now, engine)

    def start_next(self, now: float, engine: str) -> None:
        loader = self.loaders.get(engine)
        if loader is None or loader.current is not None or not loader.queue:
            return
        adapter = loader.queue.popleft()
        if loader.demands:
            loader.demands -= 1
        loader.current = adapter
        duration = loader.load.cold_ms(self.held[engine].get(adapter) or self.sizes[adapter])  # a reload may drop it
        loader.busy_ms += duration
        done = loader.done_at = now + duration / 1000.0
        self.last_done = max(self.last_done, done)
        self.seq += 1
        heapq.heappush(self.completions, (done, self.seq, engine, adapter, loader))

    def loading(self, engine: str) -> Loading:
        loader = self.loaders[engine]
        return Loading(loader.current, loader.done_at, tuple(loader.queue), loader.demands)

    def take(self, now: float, engine: str, held: Mapping[str, int], loading: Loading) -> None:
        """The engine holds exactly these adapters (bytes each, those loading included) and its loader is
        `loading` (its copy was matched to another engine with loads in flight); the next load starts at `now`
        if none is in progress. Loads the old loader had started complete as `replaced`: nothing waits on them."""
        old = self.loaders[engine]
        loader = self.loaders[engine] = _Loader(old.load)
        loader.busy_ms = old.busy_ms
        self.held[engine] = dict(held)
        loader.queue = deque(loading.queue)
        loader.demands = loading.demands
        if loading.current is not None:
            loader.current, loader.done_at = loading.current, loading.done_at
            self.seq += 1
            heapq.heappush(self.completions, (loading.done_at, self.seq, engine, loading.current, loader))
        self.start_next(now, engine)

    def dropped(self, engine: str, adapter: str) -> None:
        """The engine lost an adapter by no decision of this session's (a live engine's reconcile found it gone)."""
        self.held[engine].pop(adapter, None)

    def promote(self, engine: str, adapter: str) -> None:
        """A request now waits on a queued load: a prefetch becomes a demand load, behind those already waiting
        (a demand load keeps its place: an earlier request waits on it already)."""
        loader = self.loaders[engine]
        queue = loader.queue
        if loader.current != adapter and adapter in queue and queue.index(adapter) >= loader.demands:
            queue.remove(adapter)
            loader.wait(adapter)

    def next_done(self) -> float:
        return self.completions[0][0] if self.completions else float("inf")

    def pop_done(self) -> Completion:
        """The earliest completion; the loader that started it is free from that instant. One started by a
        loader that a new budget has since replaced leaves the new loader as it is."""
        done, _, engine, adapter, started = heapq.heappop(self.completions)
        loader = self.loaders.get(engine)
        if loader is not None and started is loader:
            loader.current, loader.done_at = None, float("inf")
        return Completion(done, engine, adapter, loader is not None and started is not loader)

    @property
    def busy_ms(self) -> float:
        return sum(loader.busy_ms for loader in self.loaders.values())


__all__ = ["Completion", "Loading", "SimulatedEngines"]
