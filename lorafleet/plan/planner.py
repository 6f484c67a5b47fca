"""Which adapters stay resident where: the placement a residency plan is made of. Pure: it reads the inventory
and the demand only, so `plan`, the sizing curve and the benchmarks place the same way."""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping

from lorafleet.inventory.model import Inventory
from lorafleet.policy.placement import Placement, PlannedResidency, pin_limit_for, serving_pools, unservable_reason
from lorafleet.policy.residency import budget_of

REPLICA_DISCOUNT = 0.5  # each further copy of an adapter is worth half the one before: resilience, not hits


def plan_residency(
    inventory: Inventory,
    rates: Mapping[str, float],
    pins: Iterable[str] = (),
    max_replicas: int = 3,
) -> PlannedResidency:
    """Choose per engine the adapters to keep resident: pins first and always (within the pin limit), then by
    expected requests served warm — each adapter once, in falling order of its rate, on the engine of its pool
    with the most room left; then extra copies of hot adapters, each worth half the one before, on other hosts and
    providers first, while room is left. Never more than an engine's slots or bytes. Deterministic."""
    planner = _Planner(inventory, rates)
    for adapter in dict.fromkeys(p for p in pins if p in inventory.adapters):
        planner.place_pinned(adapter)
    for adapter in sorted((a for a in inventory.adapters if a not in planner.held), key=planner.busiest_first):
        planner.place_once(adapter)
    planner.make_room_by_moving()
    planner.add_copies(max_replicas)
    return planner.result()


class _Planner:
    """The room left on every engine as adapters are placed, and the placements so far."""

    def __init__(self, inventory: Inventory, rates: Mapping[str, float]) -> None:
        self.inventory = inventory
        self.rates = rates
        self.engines = {e.key: e for e in inventory.engines}
        self.pools = serving_pools(inventory)
        self.slots_left = {k: e.slot_cap for k, e in self.engines.items()}
        self.bytes_left = {k: e.lora_budget_bytes for k, e in self.engines.items()}
        self.pins_left = {k: pin_limit_for(e.profile, budget_of(e)) for k, e in self.engines.items()}
        self.provider = {h.name: h.provider for h in inventory.hosts}
        self.position = _Positions(self.pools)
        self.held: dict[str, list[str]] = {}  # adapter -> the engines it is placed on
        self.placements: list[Placement] = []
        self.unplaced: dict[str, str] = {}
        self.heaps: dict[tuple[str, ...], list[tuple[int, int, str]]] = {}  # per pool: (-room, index, engine)

    def busiest_first(self, adapter: str) -> tuple[float, str]:
        return -self.rates.get(adapter, 0.0), adapter

    # --- the stages ---------------------------------------------------------------------------------------
    def place_pinned(self, adapter: str) -> None:
        key = self.best_engine(adapter, pin=True)
        if key is None:
            self.unplaced[adapter] = self._why_unplaced(adapter, "pinned")
        else:
            self.put(adapter, key, True)

    def place_once(self, adapter: str) -> None:
        """An adapter not placed yet, unpinned: a pin the pin limit refused is placed here too, where there is
        room, and is then no longer unplaced."""
        key = self.first_engine(adapter)
        if key is None:
            self.unplaced[adapter] = self._why_unplaced(adapter, "budget")
        else:
            self.unplaced.pop(adapter, None)
            self.put(adapter, key, False)

    def make_room_by_moving(self) -> None:
        """An adapter left out may fit where a placed one sits, if that one can go elsewhere (an engine of a
        narrower pool — a lower max_lora_rank — filled first by a flexible adapter)."""
        if not any(v >= 1 for v in self.slots_left.values()):
            return
        for adapter in sorted(self.unplaced, key=self.busiest_first):
            if any(self._move_aside(adapter, key) for key in self.pools[adapter]):
                del self.unplaced[adapter]

    def add_copies(self, max_replicas: int) -> None:
        """A further copy must be worth more than an average adapter's only copy: rate x 0.5^copy > the mean."""
        rates, adapters = self.rates, self.inventory.adapters
        mean_rate = sum(rates.get(a, 0.0) for a in adapters) / max(1, len(adapters))
        for copy in range(1, min(max_replicas, len(self.inventory.engines))):  # a copy per engine at most
            for adapter in sorted(self.held, key=self.busiest_first):
                worth = rates.get(adapter, 0.0) * REPLICA_DISCOUNT**copy
                if worth <= mean_rate or len(self.held[adapter]) != copy:
                    continue
                key = self.best_engine(adapter, pin=False)
                if key is not None:
                    self.put(adapter, key, False)

    def result(self) -> PlannedResidency:
        rates, adapters = self.rates, self.inventory.adapters
        total = sum(rates.get(a, 0.0) for a in adapters)
        warm = sum(rates.get(a, 0.0) for a in self.held)
        expected = warm / total if total > 0 else (1.0 if not self.unplaced else 0.0)
        return PlannedResidency(tuple(self.placements), tuple(sorted(self.unplaced.items())), expected)

    # --- room ---------------------------------------------------------------------------------------------
    def fits(self, adapter: str, key: str) -> bool:
        budget = self.bytes_left[key]
        return self.slots_left[key] >= 1 and (budget is None or self.inventory.adapters[adapter].size_bytes <= budget)

    def put(self, adapter: str, key: str, pin: bool) -> None:
        self.slots_left[key] -= 1
        if self.bytes_left[key] is not None:
            self.bytes_left[key] = (self.bytes_left[key] or 0) - self.inventory.adapters[adapter].size_bytes
        if pin:
            self.pins_left[key] -= 1
        self.held.setdefault(adapter, []).append(key)
        self.placements.append(Placement(adapter, key, pin))

    def unput(self, index: int) -> Placement:
        p = self.placements.pop(index)
        self.slots_left[p.engine] += 1
        if self.bytes_left[p.engine] is not None:
            self.bytes_left[p.engine] = (self.bytes_left[p.engine] or 0) + self.inventory.adapters[p.adapter].size_bytes
        self.held[p.adapter].remove(p.engine)
        if not self.held[p.adapter]:
            del self.held[p.adapter]
        return p

    # --- which engine -------------------------------------------------------------------------------------
    def best_engine(self, adapter: str, pin: bool) -> str | None:
        """Away from the hosts (then providers) that already hold it, then the most room left; pool order last."""
        engines, provider = self.engines, self.provider
        others = self.held.get(adapter, [])
        hosts = {engines[k].host for k in others}
        providers = {provider.get(engines[k].host) for k in others}
        candidates = [
            k
            for k in self.pools[adapter]
            if k not in others and self.fits(adapter, k) and (not pin or self.pins_left[k] > 0)
        ]
        if not candidates:
            return None
        order = self.position[adapter]
        return min(
            candidates,
            key=lambda k: (
                engines[k].host in hosts,
                provider.get(engines[k].host) in providers,
                -self.slots_left[k],
                order[k],
            ),
        )

    def first_engine(self, adapter: str) -> str | None:
        """best_engine for an adapter not placed yet (no hosts to avoid): the pool's engine with the most room,
        from a heap per pool refreshed lazily, so 10,000 adapters over 1,000 engines stay fast."""
        slots_left = self.slots_left
        pool = tuple(self.pools[adapter])
        heap = self.heaps.get(pool)
        if heap is None:
            heap = self.heaps[pool] = [(-slots_left[k], i, k) for i, k in enumerate(pool)]
            heapq.heapify(heap)
        skipped: list[tuple[int, int, str]] = []
        found = None
        while heap:
            room, i, k = heapq.heappop(heap)
            if -room != slots_left[k]:  # stale: push back with its current room
                if slots_left[k] > 0:
                    heapq.heappush(heap, (-slots_left[k], i, k))
                continue
            if self.fits(adapter, k):
                found = (room, i, k)
                break
            skipped.append((room, i, k))  # full by bytes for this adapter; a smaller one may still fit
        for entry in skipped:
            heapq.heappush(heap, entry)
        if found is None:
            return None
        key = found[2]
        if slots_left[key] > 1:
            heapq.heappush(heap, (-(slots_left[key] - 1), found[1], key))
        return key

    def _move_aside(self, adapter: str, key: str) -> bool:
        """Place `adapter` on engine `key` by moving one unpinned adapter from there to another engine of its pool
        with room; False (nothing changed) when no such move exists."""
        for index, placed in enumerate(self.placements):
            if placed.engine != key or placed.pinned:
                continue
            for other in self.pools[placed.adapter]:
                if other == key or not self.fits(placed.adapter, other):
                    continue
                self.unput(index)
                if self.fits(adapter, key):
                    self.put(placed.adapter, other, False)
                    self.put(adapter, key, False)
                    return True
                self.put(placed.adapter, key, False)  # undo: it did not make room after all
                return False
        return False

    def _why_unplaced(self, adapter: str, what: str) -> str:
        if not self.pools[adapter]:
            return unservable_reason(self.inventory, self.inventory.adapters[adapter])
        if what == "pinned":
            return "pinned, but every engine that can serve it is full or at its pin limit"
        return "budget exhausted: every engine that can serve it is full (slots or lora_budget_mb)"


class _Positions(dict[str, dict[str, int]]):
    """Per adapter, each engine's index in its pool (built on first use)."""

    def __init__(self, pools: Mapping[str, list[str]]) -> None:
        super().__init__()
        self.pools = pools

    def __missing__(self, adapter: str) -> dict[str, int]:
        index = {k: i for i, k in enumerate(self.pools[adapter])}
        self[adapter] = index
        return index
