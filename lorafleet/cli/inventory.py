"""`lorafleet inventory check|show`."""

from __future__ import annotations

import click

from lorafleet.cli import shapes
from lorafleet.cli.options import global_options, json_option, settings
from lorafleet.cli.render import Column, Report, console, print_json
from lorafleet.inventory.report import summarize_providers
from lorafleet.units import format_bytes, plural


@click.group()
def inventory() -> None:
    """Validate and show the fleet inventory."""


@inventory.command()
@global_options(with_env=False, state=False)
@json_option
def check(as_json: bool) -> None:
    """Validate the inventory; print a summary per provider (exit 2 on any problem)."""
    s = settings()
    inv = s.load_inventory()
    rows = summarize_providers(inv)
    if as_json:
        print_json(shapes.inventory_check(inv))
        return
    out = console()
    total_gpus = sum(r.gpus for r in rows)
    out.print(
        f"ok: {s.inventory_path} — fleet {inv.fleet or '(unnamed)'}: {plural(len(inv.hosts), 'host')}, "
        f"{plural(total_gpus, 'GPU')}, {plural(len(inv.engines), 'engine')}, {plural(len(inv.adapters), 'adapter')}, "
        f"{plural(len(inv.tenants), 'tenant')}"
    )
    for r in rows:
        counts = f"{plural(r.hosts, 'host'):>10} {plural(r.gpus, 'GPU'):>10} {plural(r.engines, 'engine'):>12}"
        out.print(f"  {r.provider:<12} {counts}")
    for w in inv.warnings:
        click.echo(f"warning: {w}", err=True)


HOST_COLUMNS = [
    Column("host", "left"),
    Column("provider", "left"),
    Column("group", "left", wide=True),
    Column("connection", "left", wide=True),
    Column("address", "left", legend="- when it is the host name"),
    Column("GPUs"),
    Column("engines"),
]
ENGINE_COLUMNS = [
    Column("engine", "left"),
    Column("kind", "left"),
    Column("base model", "left"),
    Column("GPUs", "left", wide=True),
    Column("slots", legend="GPU slots / host-memory slots"),
    Column("max rank", wide=True),
    Column("budget"),
    Column("url", "left", wide=True),
]
DISCOVERY_COLUMNS = [
    Column("group", "left"),
    Column("namespace", "left", wide=True),
    Column("selector", "left", wide=True),
    Column("port", "left", wide=True),
    Column("kind", "left"),
    Column("base model", "left", wide=True),
    Column("engines", legend="found now (--discover lists them)"),
]
ADAPTER_COLUMNS = [
    Column("adapter", "left"),
    Column("base model", "left"),
    Column("rank"),
    Column("modules", wide=True),
    Column("size"),
    Column("size from", "left"),
    Column("tenants", "left", wide=True),
]


@inventory.command()
@global_options(with_env=False, state=False)
@json_option
@click.option("--wide", is_flag=True, help="Show every column (the default tables fit 80 columns).")
@click.option(
    "--discover",
    is_flag=True,
    help="Also list the discovery groups' engines: one Kubernetes API list per group (otherwise nothing is asked).",
)
def show(as_json: bool, wide: bool, discover: bool) -> None:
    """Show hosts, engines and adapters (with size and its source) as tables.

    Engines of the inventory's discovery groups are found on Kubernetes at run time: the groups are listed, and
    with --discover their engines now, as hosts named after the groups (engines GROUP/POD).
    """
    inv = settings().load_inventory()
    if discover and inv.discovery:
        from lorafleet.engines.kubernetes import discover_once
        from lorafleet.inventory.model import with_discovered

        inv = with_discovered(inv, discover_once(inv))
    if as_json:
        print_json(shapes.inventory_show(inv))
        return
    out = console()
    hosts = Report("Hosts", HOST_COLUMNS, wide)
    for h in inv.hosts:
        hosts.add(
            {
                "host": h.name,
                "provider": h.provider,
                "group": h.group or "-",
                "connection": h.connection,
                "address": "-" if h.address == h.name else h.address,
                "GPUs": "-" if h.gpus is None else str(h.gpus),
                "engines": str(len(h.engines)),
            }
        )
    engines = Report("Engines", ENGINE_COLUMNS, wide)
    for e in inv.engines:
        engines.add(
            {
                "engine": e.key,
                "kind": e.kind,
                "url": e.url,
                "base model": e.base_model,
                "GPUs": ",".join(map(str, e.gpus)) or "-",
                "slots": f"{e.gpu_slots}/{'∞' if e.host_slots is None else e.host_slots}",
                "max rank": "-" if e.max_lora_rank is None else str(e.max_lora_rank),
                "budget": format_bytes(e.lora_budget_bytes),
            }
        )
    adapters = Report("Adapters", ADAPTER_COLUMNS, wide)
    for ad in inv.adapters.values():
        adapters.add(
            {
                "adapter": ad.id,
                "base model": ad.base_model,
                "rank": str(ad.rank),
                "modules": str(len(ad.target_modules)),
                "size": format_bytes(ad.size_bytes),
                "size from": ad.size_source,
                "tenants": ", ".join(ad.tenants) or "-",
            }
        )
    groups = Report("Discovery groups (engines found on Kubernetes)", DISCOVERY_COLUMNS, wide)
    for g in inv.discovery:
        found = inv.host(g.name) if discover else None
        groups.add(
            {
                "group": g.name,
                "namespace": g.namespace or "(the daemon's)",
                "selector": g.selector,
                "port": f"{g.scheme}:{g.port}",
                "kind": g.template.kind,
                "base model": g.template.base_model,
                "engines": str(len(found.engines)) if found is not None else "--discover",
            }
        )
    for report in (hosts, engines, groups, adapters) if inv.discovery else (hosts, engines, adapters):
        out.print(report.table)
        out.print()
    if not wide:
        out.print("slots: GPU / host memory; --wide shows every column (URLs, ranks, groups, tenants).", style="dim")
    for w in inv.warnings:
        click.echo(f"warning: {w}", err=True)
