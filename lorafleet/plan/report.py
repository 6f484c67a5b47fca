"""`plan` in one call: the window's demand from the logs, the placement, and what was asked beside it (the plan
file, launch flags, a diff against an older plan, the sizing curve)."""

from __future__ import annotations

import glob
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from lorafleet.errors import InputError
from lorafleet.inventory.gateway import log_patterns
from lorafleet.inventory.model import Inventory
from lorafleet.logs.reader import read_requests
from lorafleet.plan.flags import SIZING_SLOTS, FlagAdvice, recommend_flags, sizing_points, with_slots
from lorafleet.plan.planfile import diff_plans, plan_document, read_plan, write_plan
from lorafleet.plan.planner import plan_residency
from lorafleet.plan.window import Demand, demand_in, pins_of, tenant_hit_ratios, window_of
from lorafleet.policy.events import RequestEvent
from lorafleet.policy.placement import Placement, PlannedResidency

ReplayAt = Callable[[Inventory, Sequence[RequestEvent]], float]  # the hit ratio a fleet gives on the events


@dataclass(frozen=True)
class PlanRequest:
    logs: tuple[str, ...] = ()  # instead of the inventory's gateway.logs
    window_s: float = 86400.0
    replicas: int = 3
    out: str | None = None
    force: bool = False
    old: str | None = None  # a plan file to compare with
    recommend_flags: bool = False
    assume_free_gb: float | None = None
    target: float | None = None  # the hit ratio the sizing curve looks for


@dataclass(frozen=True)
class Sizing:
    target: float
    points: list[tuple[int, float]]  # (slots per engine, hit ratio replayed)
    recommended: int | None  # the fewest slots that reach the target


@dataclass(frozen=True)
class PlanReport:
    demand: Demand
    planned: PlannedResidency
    tenants: dict[str, float]  # per tenant, the share of its window's requests whose adapter is placed
    flags: list[FlagAdvice]
    changes: tuple[list[Placement], list[Placement]] | None  # (loads, evictions) from the older plan
    sizing: Sizing | None
    flags_slots: int | None = None  # the flags are for this many slots per engine (the sizing's recommendation)


def make_plan(inventory: Inventory, request: PlanRequest, replay_at: ReplayAt) -> PlanReport:
    """Plan from the logs' demand; `replay_at` replays the window for the sizing curve (the replay driver)."""
    demand, events = demand_for(inventory, request.logs, request.window_s)
    planned = plan_residency(inventory, demand.rates, pins_of(inventory), max_replicas=request.replicas)
    if request.out:
        write_plan(Path(request.out), plan_document(inventory, planned, demand), request.force)
    changes = diff_plans(read_plan(request.old, inventory), planned) if request.old else None
    sizing = None
    if request.target is not None:
        points = sizing_points(inventory, SIZING_SLOTS, lambda fleet: replay_at(fleet, events))
        enough = next((n for n, ratio in points if ratio >= request.target), None)
        sizing = Sizing(request.target, points, enough)
    flags: list[FlagAdvice] = []
    flags_slots = sizing.recommended if sizing is not None else None
    if request.recommend_flags and flags_slots is not None:
        # The flags that give the recommended slots: for the plan those slots would hold (its ranks).
        sized = with_slots(inventory, flags_slots)
        at_size = plan_residency(sized, demand.rates, pins_of(sized), max_replicas=request.replicas)
        flags = recommend_flags(sized, at_size, request.assume_free_gb, flags_slots)
    elif request.recommend_flags:
        flags = recommend_flags(inventory, planned, request.assume_free_gb)
    tenants = tenant_hit_ratios(planned, events)
    return PlanReport(demand, planned, tenants, flags, changes, sizing, flags_slots)


def demand_for(inventory: Inventory, logs: tuple[str, ...], window_s: float) -> tuple[Demand, list[RequestEvent]]:
    """The window's demand and its events: from the logs named, else the inventory's gateway logs (a relative path
    from the inventory's folder, as the daemon and `stats` read them). Logs without one adapter request are an
    input error that says what their lines were read as."""
    if not logs and not inventory.gateway_logs:
        raise InputError("no access log to plan from", hint="pass --log PATH, or list gateway.logs in the inventory")
    patterns = log_patterns(inventory, logs)
    paths = [p for pattern in patterns for p in (sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern])]
    missing = [p for p in paths if not Path(p).is_file()] or ([] if paths else patterns)
    if missing:
        raise InputError(f"access log {missing[0]} not found")
    events, _ = read_requests(paths, inventory)
    window = window_of(events, window_s)
    return demand_in(window, window_s), window


__all__ = ["PlanReport", "PlanRequest", "Sizing", "demand_for", "make_plan"]
