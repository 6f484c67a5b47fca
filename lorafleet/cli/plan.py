"""`lorafleet plan`: which adapters stay resident where, the flags to launch engines with, and the slots that pay."""

from __future__ import annotations

from collections.abc import Sequence

import click

from lorafleet.actions.targets import plan_targets
from lorafleet.actions.warm import WarmOptions
from lorafleet.actions.warm import warm as run_warm
from lorafleet.cli import shapes
from lorafleet.cli.acting import act_and_report, deadline_option
from lorafleet.cli.options import SPAN, Finite, count, global_options, json_option, settings
from lorafleet.cli.render import NAME_CHARS, Column, Report, console, print_json, safe_str
from lorafleet.inventory.model import Inventory
from lorafleet.plan.flags import FlagAdvice
from lorafleet.plan.report import PlanReport, PlanRequest, Sizing, make_plan
from lorafleet.policy.events import RequestEvent
from lorafleet.policy.placement import Placement
from lorafleet.replay.driver import simulate
from lorafleet.times import format_span
from lorafleet.units import format_bytes, plural


def replay_lorafleet(inventory: Inventory, events: Sequence[RequestEvent]) -> float:
    """The sizing curve's point: lorafleet's hit ratio replayed on this fleet."""
    return simulate(inventory, "lorafleet", events).hit_ratio


@click.command()
@global_options(with_env=False)
@json_option
@click.option("--log", "logs", multiple=True, type=click.Path(dir_okay=False), help="Access log (repeatable).")
@click.option(
    "--window", type=SPAN, default="24h", show_default=True, help="Demand over the last WINDOW of the logs (30m, 1d)."
)
@click.option("--replicas", type=count(), default=3, show_default=True, help="Most copies per adapter.")
@click.option("--out", type=click.Path(dir_okay=False), help="Write the plan file here (warm --plan reads it).")
@click.option("--force", is_flag=True, help="Overwrite --out if it exists.")
@click.option(
    "--diff",
    "old",
    metavar="FILE",
    type=click.Path(exists=True, dir_okay=False),
    help="Show what would change from the plan in FILE.",
)
@click.option("--recommend-flags", is_flag=True, help="The launch flags each engine needs for the plan.")
@click.option(
    "--assume-free-gb",
    type=Finite(min=0, min_open=True, max=1e6),
    help="Free GPU memory per engine, for --recommend-flags.",
)
@click.option("--apply", is_flag=True, help="Warm the plan's placements now (as warm does).")
@click.option(
    "--target-hit-ratio",
    "target",
    type=Finite(0, 1),
    help="Replay the window at 1, 2, 4 … slots per engine and recommend the fewest that reach this hit ratio.",
)
@click.option("--wide", is_flag=True, help="Show every column.")
@deadline_option
def plan(
    as_json: bool,
    logs: tuple[str, ...],
    window: float,
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
    than its slots or lora_budget_mb. Exit 1 when nothing could be placed. See docs/plan.md.
    """
    inv = settings().load_inventory()
    request = PlanRequest(logs, window, replicas, out, force, old, recommend_flags, assume_free_gb, target)
    report = make_plan(inv, request, replay_lorafleet)
    planned = report.planned
    data = shapes.plan(inv, report) if as_json else None
    if data is None:
        render_plan(inv, report, wide, out)
    elif not apply:
        print_json(data)  # with --apply it goes out with what warming did, one document
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
            wide,
            json_within=data,
        )
    if inv.adapters and not planned.placements:
        raise SystemExit(1)


def render_plan(inv: Inventory, report: PlanReport, wide: bool, out: str | None) -> None:
    o = console()
    engines = _engines_table(inv, report, wide)
    o.print(engines.table)
    o.print(
        f"expected hit ratio {report.planned.expected_hit_ratio:.1%} (share of the window's requests whose adapter "
        "is placed); " + engines.legend() + "."
    )
    o.print(_adapters_table(report, wide).table)
    if report.tenants:
        ranked = sorted(report.tenants.items(), key=lambda kv: (kv[1], kv[0]))[:8]
        shares = ", ".join(f"{safe_str(t, NAME_CHARS)} {r:.0%}" for t, r in ranked)
        o.print(f"expected hit ratio per tenant (lowest first): {shares}")
    for adapter, reason in report.planned.unplaced:
        o.print(f"unplaced: {adapter}: {reason}")
    if report.flags:
        flags = _flags_table(report.flags, wide, report.flags_slots)
        o.print(flags.table)
        o.print(flags.legend() + ".", style="dim")
    if report.changes is not None:
        _print_changes(*report.changes)
    if report.sizing is not None:
        _print_sizing(inv, report.sizing)
    if out:
        o.print(f"wrote {out}")


def _engines_table(inv: Inventory, report: PlanReport, wide: bool) -> Report:
    demand, planned = report.demand, report.planned
    per_engine: dict[str, list[str]] = {}
    for p in planned.placements:
        per_engine.setdefault(p.engine, []).append(p.adapter)
    engines = Report(
        f"Plan over {plural(demand.requests, 'request')} in {format_span(demand.covered_s)} of the logs "
        f"(window {format_span(demand.window_s)})",
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
        shown = ", ".join(held) if wide or len(held) <= 3 else ", ".join(held[:3]) + f" +{len(held) - 3}"
        budget = format_bytes(e.lora_budget_bytes) if e.lora_budget_bytes else "∞"
        engines.add(
            {
                "engine": e.key,
                "slots": f"{len(held)}/{e.slot_cap}",
                "bytes": f"{format_bytes(used)}/{budget}",
                "adapters": shown or "-",
            }
        )
    return engines


def _adapters_table(report: PlanReport, wide: bool) -> Report:
    demand = report.demand
    copies: dict[str, int] = {}
    for p in report.planned.placements:
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
    return adapters


def _flags_table(flags: list[FlagAdvice], wide: bool, slots: int | None = None) -> Report:
    title = "Launch flags" if slots is None else f"Launch flags for the recommended {slots} slots per engine"
    t = Report(
        title,
        [
            Column("engine", "left"),
            Column("reserves", legend="GPU memory the GPU slots reserve at start (slots × a max-rank adapter)"),
            Column("fits", "left", legend="whether that fits --assume-free-gb (? when not given)"),
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
    return t


def _print_changes(loads: list[Placement], evictions: list[Placement]) -> None:
    o = console()
    for p in loads:
        o.print(f"+ load  {p.adapter} on {p.engine}")
    for p in evictions:
        o.print(f"- evict {p.adapter} from {p.engine}")
    o.print(f"{plural(len(loads), 'load')}, {plural(len(evictions), 'eviction')} from the old plan")


def _print_sizing(inv: Inventory, sizing: Sizing) -> None:
    """The hit-ratio-versus-slots curve, drawn: where more slots stop paying."""
    o = console()
    target, points, enough = sizing.target, sizing.points, sizing.recommended
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
