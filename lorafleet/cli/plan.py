"""`lorafleet plan`: which adapters stay resident where, the flags to launch engines with, and the slots that pay."""

from __future__ import annotations

from pathlib import Path

import click

from lorafleet.cli import shapes
from lorafleet.cli.options import global_options, json_option, settings
from lorafleet.cli.render import Column, Report, console, print_json
from lorafleet.cli.warm import act_and_report, deadline_option
from lorafleet.errors import InputError
from lorafleet.inventory.model import Inventory
from lorafleet.logs.reader import read_events
from lorafleet.planning import (
    SIZING_SLOTS,
    Demand,
    FlagAdvice,
    demand_from_events,
    diff_plans,
    pins_of,
    plan_document,
    read_plan,
    sizing_points,
    tenant_hit_ratios,
    write_plan,
)
from lorafleet.planning import recommend_flags as advise_flags
from lorafleet.policy.events import RequestEvent
from lorafleet.policy.placement import Placement, PlannedResidency, plan_residency
from lorafleet.replay.simulator import simulate
from lorafleet.units import format_bytes, plural
from lorafleet.warm import WarmOptions, plan_targets
from lorafleet.warm import warm as run_warm

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_window(value: str) -> float:
    try:
        number, unit = float(value[:-1]), value[-1]
        if unit not in UNITS or number <= 0:
            raise ValueError
    except (ValueError, IndexError):
        raise click.BadParameter(f"{value!r} is not a window like 30m, 24h or 7d") from None
    return number * UNITS[unit]


def demand_for(inv: Inventory, logs: tuple[str, ...], window_s: float) -> tuple[Demand, list[RequestEvent]]:
    """The window's demand, and its events (for the sizing curve)."""
    paths = list(logs) or [source.path for source in inv.gateway_logs]
    if not paths:
        raise InputError("no access log to plan from", hint="pass --log PATH, or list gateway.logs in the inventory")
    missing = [p for p in paths if not Path(p).is_file()]
    if missing:
        raise InputError(f"access log {missing[0]} not found")
    events, _ = read_events(paths, inv, None)
    demand = demand_from_events(events, window_s)
    end = max((e.time for e in events), default=0.0)
    return demand, [e for e in events if e.time >= end - window_s]


@click.command()
@global_options(with_env=False)
@json_option
@click.option("--log", "logs", multiple=True, type=click.Path(dir_okay=False), help="Access log (repeatable).")
@click.option("--window", default="24h", show_default=True, help="Demand over the last WINDOW of the logs.")
@click.option("--replicas", type=click.IntRange(min=1), default=3, show_default=True, help="Most copies per adapter.")
@click.option("--out", type=click.Path(dir_okay=False), help="Write the plan file here (warm --plan reads it).")
@click.option("--force", is_flag=True, help="Overwrite --out if it exists.")
@click.option("--diff", "old", type=click.Path(exists=True, dir_okay=False), help="Show what changes from OLD.")
@click.option("--recommend-flags", is_flag=True, help="The launch flags each engine needs for the plan.")
@click.option("--assume-free-gb", type=float, help="Free GPU memory per engine, for --recommend-flags.")
@click.option("--apply", is_flag=True, help="Warm the plan's placements now (as warm does).")
@click.option(
    "--target-hit-ratio",
    "target",
    type=click.FloatRange(0, 1),
    help="Replay the window at 1, 2, 4 … slots per engine and recommend the fewest that reach this hit ratio.",
)
@click.option("--wide", is_flag=True, help="Show every column.")
@deadline_option
def plan(
    as_json: bool,
    logs: tuple[str, ...],
    window: str,
    replicas: int,
    out: str | None,
    force: bool,
    old: str | None,
    recommend_flags: bool,
    assume_free_gb: float | None,
    apply: bool,
    target: float | None,
    wide: bool,
    deadline: float | None,
) -> None:
    """Plan which adapters stay resident on which engine, from the demand in the access logs.

    Pinned adapters are placed first and always; then each adapter once, busiest first, on the engine of its base
    model with room; then extra copies of hot adapters on other hosts and providers. No engine ever gets more
    than its slots or lora_budget_mb. Exit 1 when nothing could be placed.
    """
    inv = settings().load_inventory()
    demand, events = demand_for(inv, logs, parse_window(window))
    planned = plan_residency(inv, demand.rates, pins_of(inv), max_replicas=replicas)
    if out:
        write_plan(Path(out), plan_document(inv, planned, demand), force)
    flags = advise_flags(inv, planned, assume_free_gb) if recommend_flags else []
    changes = diff_plans(read_plan(old, inv), planned) if old else None
    sizing = None
    if target is not None:
        points = sizing_points(inv, SIZING_SLOTS, lambda fleet: simulate(fleet, "lorafleet", events).hit_ratio)
        enough = next((n for n, ratio in points if ratio >= target), None)
        sizing = (target, points, enough)
    if as_json:
        print_json(shapes.plan(inv, planned, flags, changes, sizing))
    else:
        render_plan(inv, planned, demand, wide, flags, changes, out)
        if sizing is not None:
            render_sizing(inv, *sizing)
    if apply:
        options = WarmOptions(deadline_s=deadline)
        act_and_report(
            inv,
            lambda book: plan_targets(inv, planned.placements),
            lambda pairs, book, store, advance: run_warm(
                inv, pairs, options, store=store, on_result=advance, book=book
            ),
            as_json,
            False,
            "warming",
        )
    if inv.adapters and not planned.placements:
        raise SystemExit(1)


def render_sizing(inv: Inventory, target: float, points: list[tuple[int, float]], enough: int | None) -> None:
    """The hit-ratio-versus-slots curve, drawn: where more slots stop paying."""
    o = console()
    o.print(f"Hit ratio by slots per engine (lorafleet, replayed over the window; target {target:.0%}):")
    for n, ratio in points:
        bar = "█" * round(ratio * 40)
        mark = "  ← target" if n == enough else ""
        o.print(f"  {n:>4} slots {bar:<40} {ratio:6.1%}{mark}")
    if enough is None:
        o.print(f"no slot count up to {points[-1][0]} reaches {target:.0%}")
    else:
        kind_keys = sorted({f"{e.profile.host_slots_key}" for e in inv.engines})
        o.print(f"recommended: {enough} slots per engine ({' / '.join(kind_keys)} = {enough})")


def render_plan(
    inv: Inventory,
    planned: PlannedResidency,
    demand: Demand,
    wide: bool,
    flags: list[FlagAdvice],
    changes: tuple[list[Placement], list[Placement]] | None,
    out: str | None,
) -> None:
    o = console()
    per_engine: dict[str, list[str]] = {}
    for p in planned.placements:
        per_engine.setdefault(p.engine, []).append(p.adapter)
    engines = Report(
        f"Plan over {plural(demand.requests, 'request')} ({demand.window_s / 3600:g} h window)",
        [
            Column("engine", "left"),
            Column("slots", legend="planned / host-memory slots"),
            Column("bytes", legend="planned / lora_budget_mb"),
            Column("adapters", "left"),
        ],
        wide,
    )
    for e in inv.engines:
        held = per_engine.get(e.key, [])
        used = sum(inv.adapters[a].size_bytes for a in held)
        cap = e.host_slots if e.host_slots is not None else e.gpu_slots
        shown = ", ".join(held) if wide or len(held) <= 3 else ", ".join(held[:3]) + f" +{len(held) - 3}"
        engines.add(
            {
                "engine": e.key,
                "slots": f"{len(held)}/{cap}",
                "bytes": f"{format_bytes(used)}/{format_bytes(e.lora_budget_bytes) if e.lora_budget_bytes else '∞'}",
                "adapters": shown or "-",
            }
        )
    o.print(engines.table)
    o.print(
        f"expected hit ratio {planned.expected_hit_ratio:.1%} (share of the window's requests whose adapter is "
        "placed); " + engines.legend() + "."
    )
    copies: dict[str, int] = {}
    for p in planned.placements:
        copies[p.adapter] = copies.get(p.adapter, 0) + 1
    adapters = Report(
        "Busiest adapters" if not wide else "Adapters",
        [Column("adapter", "left"), Column("req/s"), Column("peak req/s"), Column("copies")],
        wide,
    )
    busiest = sorted(demand.rates, key=lambda a: (-demand.rates[a], a))
    for adapter in busiest if wide else busiest[:10]:
        adapters.add(
            {
                "adapter": adapter,
                "req/s": f"{demand.rates[adapter]:.3f}",
                "peak req/s": f"{demand.peaks.get(adapter, 0.0):.2f}",
                "copies": str(copies.get(adapter, 0)),
            }
        )
    o.print(adapters.table)
    tenants = tenant_hit_ratios(inv, planned, demand)
    if tenants:
        shown = ", ".join(f"{t} {r:.0%}" for t, r in sorted(tenants.items(), key=lambda kv: (kv[1], kv[0]))[:8])
        o.print(f"expected hit ratio per tenant (lowest first): {shown}")
    for adapter, reason in planned.unplaced:
        o.print(f"unplaced: {adapter}: {reason}")
    if flags:
        t = Report(
            "Launch flags",
            [
                Column("engine", "left"),
                Column("reserves", legend="GPU memory the slots reserve at start"),
                Column("fits", "left", legend="within --assume-free-gb"),
                Column("flags", "left"),
            ],
            wide,
        )
        for f in flags:
            t.add(
                {
                    "engine": f.engine,
                    "flags": " ".join(f"{k} {v}" for k, v in f.flags.items()),
                    "reserves": format_bytes(f.reserved_bytes),
                    "fits": "?" if f.fits is None else ("yes" if f.fits else "NO"),
                }
            )
        o.print(t.table)
    if changes is not None:
        loads, evictions = changes
        for p in loads:
            o.print(f"+ load  {p.adapter} on {p.engine}")
        for p in evictions:
            o.print(f"- evict {p.adapter} from {p.engine}")
        o.print(f"{plural(len(loads), 'load')}, {plural(len(evictions), 'eviction')} from the old plan")
    if out:
        o.print(f"wrote {out}")
