"""Residency plans: demand over a window, the plan file (versioned, line-checked), diffs and launch flags.

The placement itself is pure and lives in policy/placement.py (`plan_residency`); this module gives it demand
from request events, writes and reads the plan file `warm --plan`, `replay --plan` and the daemon start from,
compares two plans, and works out the engine flags a plan needs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from lorafleet.errors import InputError, InventoryError, Problem
from lorafleet.inventory import sizing
from lorafleet.inventory.fields import Checker, describe
from lorafleet.inventory.model import Engine, Inventory
from lorafleet.inventory.yamlsource import LDict, LList, load_yaml
from lorafleet.policy.events import ADAPTER, RequestEvent
from lorafleet.policy.placement import Placement, PlannedResidency
from lorafleet.units import GIB

PLAN_VERSION = 1


@dataclass(frozen=True)
class Demand:
    """Per adapter over the window: mean request rate (req/s), its tenants, and its busiest minute (req/s)."""

    window_s: float
    rates: dict[str, float]
    peaks: dict[str, float]
    tenants: dict[str, tuple[str, ...]]
    requests: int


def demand_from_events(events: Sequence[RequestEvent], window_s: float) -> Demand:
    """The last `window_s` seconds of the events (ending at the newest one)."""
    adapter_events = [e for e in events if e.kind == ADAPTER and e.adapter is not None]
    if not adapter_events:
        return Demand(window_s, {}, {}, {}, 0)
    end = max(e.time for e in adapter_events)
    start = end - window_s
    counts: dict[str, int] = {}
    minutes: dict[tuple[str, int], int] = {}
    tenants: dict[str, set[str]] = {}
    used = 0
    first = end
    for e in adapter_events:
        if e.time < start:
            continue
        assert e.adapter is not None
        used += 1
        first = min(first, e.time)
        counts[e.adapter] = counts.get(e.adapter, 0) + 1
        key = (e.adapter, int(e.time // 60))
        minutes[key] = minutes.get(key, 0) + 1
        if e.tenant is not None:
            tenants.setdefault(e.adapter, set()).add(e.tenant)
    span = max(60.0, min(window_s, end - first + 1.0))
    peaks: dict[str, float] = {}
    for (adapter, _), n in minutes.items():
        peaks[adapter] = max(peaks.get(adapter, 0.0), n / 60.0)
    return Demand(
        window_s,
        {a: n / span for a, n in counts.items()},
        peaks,
        {a: tuple(sorted(t)) for a, t in tenants.items()},
        used,
    )


def tenant_hit_ratios(inventory: Inventory, plan: PlannedResidency, demand: Demand) -> dict[str, float]:
    """Per tenant, the share of its adapters' demand that the plan keeps warm (an adapter's demand is split
    evenly among the tenants seen asking for it, else those the inventory lists)."""
    placed = {p.adapter for p in plan.placements}
    asked: dict[str, float] = {}
    warm: dict[str, float] = {}
    for adapter, rate in demand.rates.items():
        tenants = demand.tenants.get(adapter) or inventory.adapters[adapter].tenants or ("-",)
        for tenant in tenants:
            asked[tenant] = asked.get(tenant, 0.0) + rate / len(tenants)
            if adapter in placed:
                warm[tenant] = warm.get(tenant, 0.0) + rate / len(tenants)
    return {t: warm.get(t, 0.0) / total for t, total in sorted(asked.items()) if total > 0}


def pins_of(inventory: Inventory) -> list[str]:
    """Adapters to place first and always: every tenant's `pinned` list, gold tiers first."""
    ordered = sorted(inventory.tenants.values(), key=lambda t: (t.tier != "gold", t.name))
    return list(dict.fromkeys(a for t in ordered for a in t.pinned))


# --- the plan file -----------------------------------------------------------------------------------------
def plan_document(inventory: Inventory, plan: PlannedResidency, demand: Demand, clock: datetime | None = None) -> str:
    engines: dict[str, list[dict[str, Any]]] = {e.key: [] for e in inventory.engines}
    for p in plan.placements:
        engines[p.engine].append({"adapter": p.adapter, "pinned": p.pinned})
    doc = {
        "version": PLAN_VERSION,
        "fleet": inventory.fleet,
        "created": (clock or datetime.now(UTC)).isoformat(timespec="seconds"),
        "window_s": demand.window_s,
        "expected_hit_ratio": round(plan.expected_hit_ratio, 6),
        "engines": engines,
        "unplaced": [{"adapter": a, "reason": r} for a, r in plan.unplaced],
    }
    header = "# lorafleet residency plan (lorafleet plan --out); read by `warm --plan`, `replay --plan`, the daemon.\n"
    return header + yaml.safe_dump(doc, sort_keys=False, width=120)


def write_plan(path: Path, text: str, force: bool) -> None:
    if path.exists() and not force:
        raise InputError(f"refusing to overwrite {path}", hint="choose another --out, or pass --force")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot write {path}: {exc.strerror or exc}") from exc


def read_plan(path: str | Path, inventory: Inventory) -> PlannedResidency:
    """A plan file, checked against this inventory: every problem with its file and line, exit 2."""
    path = Path(path)
    doc, problems = load_yaml(path, str(path))
    c = Checker()
    c.problems = problems
    placements: list[Placement] = []
    unplaced: list[tuple[str, str]] = []
    ratio = 0.0
    if doc is not None and not isinstance(doc, LDict):
        c.problems.append(Problem(str(path), 1, "", f"expected a plan (a mapping), got {describe(doc)}"))
    elif isinstance(doc, LDict):
        c.keys(doc, "", ("version", "fleet", "created", "window_s", "expected_hit_ratio", "engines", "unplaced"))
        if doc.get("version") != PLAN_VERSION:
            message = f"unknown plan version {doc.get('version')!r} (this lorafleet reads version {PLAN_VERSION})"
            c.add(doc, "version" if "version" in doc else None, "version", message)
        elif inventory.fleet is not None and doc.get("fleet") not in (None, inventory.fleet):
            c.add(doc, "fleet", "fleet", f"written for fleet {doc.get('fleet')!r}, not {inventory.fleet!r}")
        else:
            ratio = float(doc.get("expected_hit_ratio") or 0.0)
            placements = _placements(c, doc, inventory)
            unplaced = [
                (str(u.get("adapter")), str(u.get("reason"))) for u in doc.get("unplaced") or [] if isinstance(u, dict)
            ]
    if c.problems:
        raise InventoryError(sorted(c.problems, key=lambda p: (p.file, p.line or 0)), what=f"the plan {path}")
    return PlannedResidency(tuple(placements), tuple(unplaced), ratio)


def _placements(c: Checker, doc: LDict, inventory: Inventory) -> list[Placement]:
    engines = c.mapping(doc.get("engines"), doc, "engines", "engines")
    out: list[Placement] = []
    for key, rows in (engines or {}).items():
        path = f"engines.{key}"
        if inventory.engine(str(key)) is None:
            c.add(engines, key, path, f"{key!r} is not an engine of this inventory (written for another fleet?)")
            continue
        if not isinstance(rows, LList):
            c.add(engines, key, path, f"expected a list of adapters, got {describe(rows)}")
            continue
        for i, row in enumerate(rows):
            m = c.mapping(row, rows, i, f"{path}[{i}]")
            if m is None:
                continue
            adapter = m.get("adapter")
            if not isinstance(adapter, str) or adapter not in inventory.adapters:
                c.add(
                    m,
                    "adapter" if "adapter" in m else None,
                    f"{path}[{i}].adapter",
                    f"{adapter!r} is not an adapter of this inventory",
                )
                continue
            out.append(Placement(adapter, str(key), bool(m.get("pinned", False))))
    return out


def diff_plans(old: PlannedResidency, new: PlannedResidency) -> tuple[list[Placement], list[Placement]]:
    """(loads, evictions): what moving from `old` to `new` would load and drop, engine by engine."""
    before = {(p.engine, p.adapter) for p in old.placements}
    after = {(p.engine, p.adapter) for p in new.placements}
    return (
        [p for p in new.placements if (p.engine, p.adapter) not in before],
        [p for p in old.placements if (p.engine, p.adapter) not in after],
    )


# --- sizing -------------------------------------------------------------------------------------------------
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


# --- launch flags --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FlagAdvice:
    engine: str
    flags: dict[str, int]  # launch flag -> value
    reserved_bytes: int  # GPU memory the slots reserve at start: slots x a max_lora_rank adapter on every module
    free_bytes: int | None
    fits: bool | None


def recommend_flags(inventory: Inventory, plan: PlannedResidency, free_gb: float | None) -> list[FlagAdvice]:
    """Per engine, the slot and rank flags the plan needs, and whether the slots' reserved memory fits."""
    per_engine: dict[str, list[str]] = {}
    for p in plan.placements:
        per_engine.setdefault(p.engine, []).append(p.adapter)
    out = []
    for engine in inventory.engines:
        planned = per_engine.get(engine.key, [])
        kind = engine.profile
        host = max(len(planned), engine.gpu_slots, 1)
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
