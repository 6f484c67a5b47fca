"""Launch flags a plan needs per engine, and the sizing curve: the hit ratio replayed at each slot count."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from lorafleet.inventory import sizing
from lorafleet.inventory.model import Engine, Inventory
from lorafleet.policy.placement import PlannedResidency
from lorafleet.units import GIB

SIZING_SLOTS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def with_slots(inventory: Inventory, host_slots: int) -> Inventory:
    """The same fleet with every engine holding `host_slots` adapters (GPU slots capped to it)."""
    hosts = tuple(
        replace(
            h,
            engines=tuple(replace(e, host_slots=host_slots, gpu_slots=min(e.gpu_slots, host_slots)) for e in h.engines),
        )
        for h in inventory.hosts
    )
    return replace(inventory, hosts=hosts)


def sizing_points(
    inventory: Inventory, slot_counts: Sequence[int], replay_at: Callable[[Inventory], float]
) -> list[tuple[int, float]]:
    """(slots per engine, hit ratio) for each count, each replayed by `replay_at` (the same simulator and
    policy as `replay`); counts past the number of adapters add nothing and are skipped."""
    most = max(1, len(inventory.adapters))
    counts = [n for n in slot_counts if n <= most] or [most]
    return [(n, replay_at(with_slots(inventory, n))) for n in counts]


@dataclass(frozen=True)
class FlagAdvice:
    engine: str
    flags: dict[str, int]  # launch flag -> value
    reserved_bytes: int  # GPU memory the slots reserve at start: slots x a max_lora_rank adapter on every module
    free_bytes: int | None
    fits: bool | None


def recommend_flags(
    inventory: Inventory, plan: PlannedResidency, free_gb: float | None, slots: int | None = None
) -> list[FlagAdvice]:
    """Per engine, the slot and rank flags the plan needs (at least `slots` host slots, when given: the sizing's
    recommendation), and whether the slots' reserved memory fits."""
    per_engine: dict[str, list[str]] = {}
    for p in plan.placements:
        per_engine.setdefault(p.engine, []).append(p.adapter)
    out = []
    for engine in inventory.engines:
        planned = per_engine.get(engine.key, [])
        kind = engine.profile
        host = max(len(planned), engine.gpu_slots, 1, slots or 0)
        gpu = min(engine.gpu_slots, host)
        top = max((inventory.adapters[a].rank for a in planned), default=engine.max_lora_rank or 16)
        rank = _allowed_rank(engine, top)
        base = inventory.base_models[engine.base_model]
        reserved = gpu * sizing.estimate_bytes(base, rank, sizing.KNOWN_MODULES)
        free = None if free_gb is None else int(free_gb * GIB)
        flags = {kind.flag(kind.gpu_slots_key): gpu, kind.flag(kind.host_slots_key): host, "--max-lora-rank": rank}
        out.append(FlagAdvice(engine.key, flags, reserved, free, None if free is None else reserved <= free))
    return out


def _allowed_rank(engine: Engine, rank: int) -> int:
    ranks = engine.profile.ranks
    if ranks is None:
        return int(2 ** math.ceil(math.log2(max(1, rank))))
    return next((r for r in ranks if r >= rank), ranks[-1])
