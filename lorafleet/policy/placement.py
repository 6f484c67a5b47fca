"""Which engines can serve an adapter, and which of them to use: the one home of placement.

The policy core routes and prefetches with it, `warm` chooses its targets with it, the `lorafleet` policy's
preload pins with it, and `plan` places with it (plan/planner.py). Pure: it reads the inventory and the
residency book only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mypy_extensions import mypyc_attr

from lorafleet.inventory.model import Adapter, Engine, Inventory
from lorafleet.kinds import EngineKind
from lorafleet.pickling import rebuilt
from lorafleet.policy.residency import Budget, EngineResidency, ResidencyBook


def why_not(adapter: Adapter, engine: Engine) -> str | None:
    """Why this engine can never serve this adapter (base model, rank, whole byte budget), or None."""
    if engine.base_model != adapter.base_model:
        return f"{engine.key} serves {engine.base_model}, not {adapter.id}'s base model {adapter.base_model}"
    if engine.max_lora_rank is not None and adapter.rank > engine.max_lora_rank:
        return f"{adapter.id} has rank {adapter.rank}, above {engine.key}'s max_lora_rank {engine.max_lora_rank}"
    budget = engine.lora_budget_bytes
    if budget is not None and adapter.size_bytes > budget:
        return f"{adapter.id} needs {adapter.size_bytes} bytes, more than {engine.key}'s whole lora_budget_mb"
    return None


def can_serve(adapter: Adapter, engine: Engine) -> bool:
    return why_not(adapter, engine) is None


def serving_pools(inventory: Inventory) -> dict[str, list[str]]:
    """Per adapter id, the keys of the engines that can serve it, in inventory order. Adapters alike in what
    can-serve reads (base model, rank, size) share one pool, so a big fleet is checked once per kind of adapter;
    pools alike in content are one list (one least-loaded order each in the book's index)."""
    engines = inventory.engines
    shared: dict[tuple[str, int, int], list[str]] = {}
    alike: dict[tuple[str, ...], list[str]] = {}
    out = {}
    for a in inventory.adapters.values():
        key = (a.base_model, a.rank, a.size_bytes)
        pool = shared.get(key)
        if pool is None:
            keys = [e.key for e in engines if can_serve(a, e)]
            pool = shared[key] = alike.setdefault(tuple(keys), keys)
        out[a.id] = pool
    return out


def pool_members(pools: Mapping[str, Sequence[str]]) -> dict[str, frozenset[str]]:
    """The pools as sets, for membership (one set per pool sequence, shared as the pools are)."""
    sets: dict[int, frozenset[str]] = {}
    out = {}
    for adapter, pool in pools.items():
        members = sets.get(id(pool))
        if members is None:
            members = sets[id(pool)] = frozenset(pool)
        out[adapter] = members
    return out


def unservable_reason(inventory: Inventory, adapter: Adapter) -> str:
    """Why no engine of the fleet can serve the adapter (for one that has an empty pool)."""
    same_base = [e for e in inventory.engines if e.base_model == adapter.base_model]
    if not same_base:
        return f"no engine serves {adapter.base_model}"
    return why_not(adapter, same_base[0]) or f"no engine can serve {adapter.id}"


def _default_load(state: EngineResidency) -> tuple[int, int]:
    return state.placement_load()


def rank_engines(
    adapter: str,
    pool: Sequence[str],
    engines: Mapping[str, EngineResidency],
    load: Callable[[str], int] | None = None,
) -> list[str]:
    """The pool in order of preference: engines where the adapter is resident, then those loading it (each in
    pool order), then the rest least loaded first (by `load`, else fewest loads in flight and then fewest
    adapters held, no more than the slots: `EngineResidency.placement_load`; pool order breaks ties), so the
    choice is deterministic and its first is `choose_engine`'s."""

    def key(item: tuple[int, str]) -> tuple[int, tuple[int, ...], int]:
        index, engine = item
        state = engines[engine]
        stage = 0 if adapter in state.resident else 1 if adapter in state.in_flight else 2
        if stage < 2:
            return stage, (), index
        return stage, (load(engine),) if load is not None else _default_load(state), index

    return [engine for _, engine in sorted(enumerate(pool), key=key)]


def choose_engine(adapter: str, pool: Sequence[str], engines: Mapping[str, EngineResidency]) -> str | None:
    """The first of `rank_engines` with the default load, without sorting (the replay hot path)."""
    if not pool:
        return None
    if len(pool) == 1:
        return pool[0]
    for key in pool:
        if adapter in engines[key].resident:
            return key
    for key in pool:
        if adapter in engines[key].in_flight:
            return key
    # The least loaded, the first of equals: `min` by `placement_load`, written out (compiled, a key function is
    # a generic call per engine, and this runs at every miss and prefetch).
    best, best_flight, best_used = pool[0], 0, 0
    for i, key in enumerate(pool):
        flight, used = engines[key].placement_load()
        if i == 0 or flight < best_flight or (flight == best_flight and used < best_used):
            best, best_flight, best_used = key, flight, used
    return best


SCAN_MAX = 8  # pools up to this size are scanned (cheaper than the index); larger ones use the book's index


def place_in(adapter: str, pool: Sequence[str], book: ResidencyBook) -> str | None:
    """`choose_engine` over the book's engines, exactly, without scanning a large pool: the first engine in pool
    order where the adapter is resident (from the book's holder index), else the first loading it, else the top
    of the pool's least-loaded heap (fewest loads in flight, then fewest slots used, then pool order)."""
    if len(pool) <= SCAN_MAX:
        return choose_engine(adapter, pool, book.engines)
    index = book.indexed()
    group = index.group(pool)
    position = group.position
    for table in (index.resident, index.loading):
        holders = table.get(adapter)
        if holders:
            best = -1
            for key in holders:
                at = position.get(key, -1)
                if at >= 0 and (best < 0 or at < best):
                    best = at
            if best >= 0:
                return group.keys[best]
    return group.least_loaded(index.version)


def pin_limit_for(profile: EngineKind, budget: Budget) -> int:
    """How many adapters may be pinned on an engine: its kind's limit, and one host slot always left free."""
    limits = [profile.max_pinned(budget.gpu_slots)]
    if budget.host_slots is not None:
        limits.append(budget.host_slots - 1)
    return max(0, min(limits))


def pin_limit(state: EngineResidency) -> int:
    return pin_limit_for(state.profile, state.budget)


def can_pin(state: EngineResidency, adapter: str) -> bool:
    return adapter in state.pins or len(state.pins) < pin_limit(state)


# --- what a plan is made of (plan/planner.py makes one) ------------------------------------------------------
@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
@dataclass(frozen=True)
class Placement:
    adapter: str
    engine: str
    pinned: bool

    def __reduce__(self) -> tuple[Any, ...]:
        return rebuilt(self)  # pickled by its constructor (lorafleet/pickling.py)


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
@dataclass(frozen=True)
class PlannedResidency:
    placements: tuple[Placement, ...]
    unplaced: tuple[tuple[str, str], ...]  # (adapter, reason)
    expected_hit_ratio: float  # share of the window's adapter requests whose adapter is placed somewhere

    def __reduce__(self) -> tuple[Any, ...]:
        return rebuilt(self)  # pickled by its constructor (lorafleet/pickling.py)
