"""Where an engine action goes: the (adapter, engine) pairs `warm` and `unload` act on, chosen before anything
is sent — named engines (checked), a plan's placements, or the engines that can serve each adapter."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import nullcontext, suppress

from lorafleet.engines import EngineError, make_client
from lorafleet.engines.executor import EngineExecutor, Outcome
from lorafleet.errors import InputError
from lorafleet.inventory.lookup import resolve_engines
from lorafleet.inventory.model import Adapter, Engine, Inventory
from lorafleet.policy.placement import Placement, rank_engines, serving_pools, unservable_reason, why_not
from lorafleet.policy.residency import ResidencyBook
from lorafleet.stopping import DeadlinePassed


def registry_size(engine: Engine) -> int:
    """How many adapters an engine has registered now (an unreachable engine sorts last): `warm --replicas`
    ranks engines by it."""
    try:
        with make_client(engine, backoff=()) as client:
            return len(client.registry())
    except EngineError:
        return UNREACHABLE


UNREACHABLE = 1 << 30  # an engine whose registry could not be read sorts last


def registry_sizes(engines: Sequence[Engine], parallel: int, deadline_s: float | None) -> dict[str, int]:
    """`registry_size` of each engine, read once, `parallel` at a time, within the run's deadline (engines not
    answered by then count as unreachable), on the executor's daemon threads: one stuck on a dead engine never
    holds the process past a signal or the run's end."""
    sizes = {e.key: UNREACHABLE for e in engines}

    def read(outcome: Outcome[Engine, int]) -> None:
        if outcome.result is not None:
            sizes[outcome.engine] = outcome.result

    with suppress(DeadlinePassed):  # what answered in time is known; the rest sort last
        EngineExecutor[Engine, int](parallel).run(
            {e.key: [e] for e in engines}, lambda _key: nullcontext(registry_size), read, deadline_s=deadline_s
        )
    return sizes


def plan_targets(
    inventory: Inventory, placements: Sequence[Placement], adapters: Sequence[str] = ()
) -> list[tuple[Adapter, Engine]]:
    """The (adapter, engine) pairs of a plan's placements (only `adapters`' when given)."""
    wanted = set(adapters)
    pairs = []
    for p in placements:
        engine = inventory.engine(p.engine)
        if engine is not None and (not wanted or p.adapter in wanted):
            pairs.append((inventory.adapters[p.adapter], engine))
    return pairs


def choose_targets(
    inventory: Inventory,
    adapters: Sequence[Adapter],
    engine_keys: Sequence[str] = (),
    replicas: int | None = None,
    load_of: Callable[[Engine], int] | None = None,
    book: ResidencyBook | None = None,
) -> list[tuple[Adapter, Engine]]:
    """(adapter, engine) pairs to warm. Named engines are checked and must suit every adapter; otherwise every
    engine that can serve the adapter, limited to `replicas` in the placement rule's order (resident first, then
    least loaded by `load_of`)."""
    pairs: list[tuple[Adapter, Engine]] = []
    if engine_keys:
        engines = resolve_engines(inventory, engine_keys)
        for adapter in adapters:
            for engine in engines:
                reason = why_not(adapter, engine)
                if reason is not None:
                    raise InputError(f"refusing to warm: {reason}")
                pairs.append((adapter, engine))
        return pairs
    pools = serving_pools(inventory)
    book = book or ResidencyBook.from_inventory(inventory)
    for adapter in adapters:
        pool = pools[adapter.id]
        if not pool:
            raise InputError(f"refusing to warm {adapter.id}: {unservable_reason(inventory, adapter)}")
        if replicas is not None and replicas < len(pool):
            load = None
            if load_of is not None:
                loads = {key: load_of(inventory.engine(key)) for key in pool}  # type: ignore[arg-type]
                load = loads.__getitem__
            pool = rank_engines(adapter.id, pool, book.engines, load)[:replicas]
        pairs.extend((adapter, engine) for engine in (inventory.engine(k) for k in pool) if engine is not None)
    return pairs


def unload_targets(
    inventory: Inventory, adapters: Sequence[Adapter], engine_keys: Sequence[str] = ()
) -> list[tuple[Adapter, Engine]]:
    """(adapter, engine) pairs: the named engines, else every engine of the adapter's base model."""
    engines = resolve_engines(inventory, engine_keys)
    pairs: list[tuple[Adapter, Engine]] = []
    for adapter in adapters:
        pool = engines or [e for e in inventory.engines if e.base_model == adapter.base_model]
        pairs.extend((adapter, e) for e in pool if e.base_model == adapter.base_model)
    if not pairs:
        raise InputError("no engine of these adapters' base models to unload from")
    return pairs
