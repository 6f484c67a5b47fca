"""Demand over a window of the logs: what the plan places by, and what it expects per tenant."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lorafleet.inventory.model import Inventory
from lorafleet.policy.events import ADAPTER, RequestEvent
from lorafleet.policy.placement import PlannedResidency


@dataclass(frozen=True)
class Demand:
    """Per adapter over the window: mean request rate (req/s), its tenants, and its busiest minute (req/s);
    `covered_s` is how much of the window the requests span (a log shorter than the window covers less)."""

    window_s: float
    rates: dict[str, float]
    peaks: dict[str, float]
    tenants: dict[str, tuple[str, ...]]
    requests: int
    covered_s: float = 0.0


def window_of(events: Sequence[RequestEvent], window_s: float) -> list[RequestEvent]:
    """The events of the last `window_s` seconds of the logs, ending at the newest line of any kind: the one window
    the plan places by, its tenants are judged on and the sizing curve replays."""
    end = max((e.time for e in events), default=0.0)
    return [e for e in events if e.time >= end - window_s]


def demand_from_events(events: Sequence[RequestEvent], window_s: float) -> Demand:
    """The adapter requests of `window_of` the events (`demand_in`)."""
    return demand_in(window_of(events, window_s), window_s)


def demand_in(window: Sequence[RequestEvent], window_s: float) -> Demand:
    """The adapter requests of a window's events; the rates are over the time the window's lines span (at least a
    minute), base-model lines included: a quiet stretch of adapters is demand too."""
    adapter_events = [e for e in window if e.kind == ADAPTER and e.adapter is not None]
    if not adapter_events:
        return Demand(window_s, {}, {}, {}, 0)
    first, end = min(e.time for e in window), max(e.time for e in window)
    counts: dict[str, int] = {}
    minutes: dict[tuple[str, int], int] = {}
    tenants: dict[str, set[str]] = {}
    for e in adapter_events:
        assert e.adapter is not None
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
        len(adapter_events),
        end - first,
    )


def tenant_hit_ratios(plan: PlannedResidency, events: Sequence[RequestEvent]) -> dict[str, float]:
    """Per tenant, the share of its own adapter requests in the window whose adapter the plan places somewhere:
    each request counted for the tenant that sent it (a request without a tenant counts under '-')."""
    placed = {p.adapter for p in plan.placements}
    asked: dict[str, int] = {}
    warm: dict[str, int] = {}
    for e in events:
        if e.kind != ADAPTER or e.adapter is None:
            continue
        tenant = e.tenant or "-"
        asked[tenant] = asked.get(tenant, 0) + 1
        if e.adapter in placed:
            warm[tenant] = warm.get(tenant, 0) + 1
    return {t: warm.get(t, 0) / n for t, n in sorted(asked.items())}


def pins_of(inventory: Inventory) -> list[str]:
    """Adapters to place first and always: every tenant's `pinned` list, gold tiers first."""
    ordered = sorted(inventory.tenants.values(), key=lambda t: (t.tier != "gold", t.name))
    return list(dict.fromkeys(a for t in ordered for a in t.pinned))
