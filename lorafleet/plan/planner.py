"""Which adapters stay resident where: the placement a residency plan is made of. Pure: it reads the inventory
and the demand only, so `plan`, the sizing curve and the benchmarks place the same way."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping

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
    engines = {e.key: e for e in inventory.engines}
    pools = serving_pools(inventory)
    slots_left = {k: e.slot_cap for k, e in engines.items()}
    bytes_left = {k: e.lora_budget_bytes for k, e in engines.items()}
    pins_left = {k: pin_limit_for(e.profile, budget_of(e)) for k, e in engines.items()}
    held: dict[str, list[str]] = {}
    placements: list[Placement] = []
    unplaced: dict[str, str] = {}
    pinned = list(dict.fromkeys(p for p in pins if p in inventory.adapters))

    def fits(adapter: str, key: str) -> bool:
        budget = bytes_left[key]
        return slots_left[key] >= 1 and (budget is None or inventory.adapters[adapter].size_bytes <= budget)

    def put(adapter: str, key: str, pin: bool) -> None:
        slots_left[key] -= 1
        if bytes_left[key] is not None:
            bytes_left[key] = (bytes_left[key] or 0) - inventory.adapters[adapter].size_bytes
        if pin:
            pins_left[key] -= 1
        held.setdefault(adapter, []).append(key)
        placements.append(Placement(adapter, key, pin))

    provider = {h.name: h.provider for h in inventory.hosts}
    position = _Positions(pools)

    def unput(index: int) -> Placement:
        p = placements.pop(index)
        slots_left[p.engine] += 1
        if bytes_left[p.engine] is not None:
            bytes_left[p.engine] = (bytes_left[p.engine] or 0) + inventory.adapters[p.adapter].size_bytes
        held[p.adapter].remove(p.engine)
        if not held[p.adapter]:
            del held[p.adapter]
        return p

    def best_engine(adapter: str, pin: bool) -> str | None:
        others = held.get(adapter, [])
        hosts = {engines[k].host for k in others}
        providers = {provider.get(engines[k].host) for k in others}
        candidates = [
            k for k in pools[adapter] if k not in others and fits(adapter, k) and (not pin or pins_left[k] > 0)
        ]
        if not candidates:
            return None
        # Away from the hosts (then providers) that already hold it, then the most room left; pool order last.
        order = position[adapter]
        return min(
            candidates,
            key=lambda k: (
                engines[k].host in hosts,
                provider.get(engines[k].host) in providers,
                -slots_left[k],
                order[k],
            ),
        )

    heaps: dict[tuple[str, ...], list[tuple[int, int, str]]] = {}

    def first_engine(adapter: str) -> str | None:
        """best_engine for an adapter not placed yet (no hosts to avoid): the pool's engine with the most room,
        from a heap per pool refreshed lazily, so 10,000 adapters over 1,000 engines stay fast."""
        pool = tuple(pools[adapter])
        heap = heaps.get(pool)
        if heap is None:
            heap = heaps[pool] = [(-slots_left[k], i, k) for i, k in enumerate(pool)]
            heapq.heapify(heap)
        skipped: list[tuple[int, int, str]] = []
        found = None
        while heap:
            room, i, k = heapq.heappop(heap)
            if -room != slots_left[k]:  # stale: push back with its current room
                if slots_left[k] > 0:
                    heapq.heappush(heap, (-slots_left[k], i, k))
                continue
            if fits(adapter, k):
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

    for adapter in pinned:
        key = best_engine(adapter, pin=True)
        if key is None:
            unplaced[adapter] = _why_unplaced(inventory, adapter, pools, "pinned")
        else:
            put(adapter, key, True)
    ordered = sorted((a for a in inventory.adapters if a not in held), key=lambda a: (-rates.get(a, 0.0), a))
    for adapter in ordered:
        key = first_engine(adapter)
        if key is None:
            unplaced[adapter] = _why_unplaced(inventory, adapter, pools, "budget")
        else:
            put(adapter, key, False)
    # Make room by moving: an adapter left out may fit where a placed one sits, if that one can go elsewhere
    # (an engine of a narrower pool — a lower max_lora_rank — filled first by a flexible adapter).
    room_somewhere = any(v >= 1 for v in slots_left.values())
    for adapter in sorted(unplaced, key=lambda a: (-rates.get(a, 0.0), a)) if room_somewhere else ():
        for key in pools[adapter]:
            moved = _move_aside(adapter, key, placements, pools, fits, put, unput)
            if moved:
                del unplaced[adapter]
                break
    # A further copy must be worth more than an average adapter's only copy: rate x 0.5^copy > the mean rate.
    mean_rate = sum(rates.get(a, 0.0) for a in inventory.adapters) / max(1, len(inventory.adapters))
    for copy in range(1, max_replicas):
        for adapter in sorted(held, key=lambda a: (-rates.get(a, 0.0), a)):
            worth = rates.get(adapter, 0.0) * REPLICA_DISCOUNT**copy
            if worth <= mean_rate or len(held[adapter]) != copy:
                continue
            key = best_engine(adapter, pin=False)
            if key is not None:
                put(adapter, key, False)
    total = sum(rates.get(a, 0.0) for a in inventory.adapters)
    warm = sum(rates.get(a, 0.0) for a in held)
    return PlannedResidency(
        tuple(placements),
        tuple(sorted(unplaced.items())),
        warm / total if total > 0 else (1.0 if not unplaced else 0.0),
    )


class _Positions(dict[str, dict[str, int]]):
    """Per adapter, each engine's index in its pool (built on first use)."""

    def __init__(self, pools: Mapping[str, list[str]]) -> None:
        super().__init__()
        self.pools = pools

    def __missing__(self, adapter: str) -> dict[str, int]:
        index = {k: i for i, k in enumerate(self.pools[adapter])}
        self[adapter] = index
        return index


def _move_aside(
    adapter: str,
    key: str,
    placements: list[Placement],
    pools: Mapping[str, list[str]],
    fits: Callable[[str, str], bool],
    put: Callable[[str, str, bool], None],
    unput: Callable[[int], Placement],
) -> bool:
    """Place `adapter` on engine `key` by moving one unpinned adapter from there to another engine of its pool
    with room; False (nothing changed) when no such move exists."""
    for index, placed in enumerate(placements):
        if placed.engine != key or placed.pinned:
            continue
        for other in pools[placed.adapter]:
            if other == key or not fits(placed.adapter, other):
                continue
            unput(index)
            if fits(adapter, key):
                put(placed.adapter, other, False)
                put(adapter, key, False)
                return True
            put(placed.adapter, key, False)  # undo: it did not make room after all
            return False
    return False


def _why_unplaced(inventory: Inventory, adapter: str, pools: Mapping[str, list[str]], what: str) -> str:
    if not pools[adapter]:
        return unservable_reason(inventory, inventory.adapters[adapter])
    if what == "pinned":
        return "pinned, but every engine that can serve it is full or at its pin limit"
    return "budget exhausted: every engine that can serve it is full (slots or lora_budget_mb)"
