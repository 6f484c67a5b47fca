"""`lorafleet inventory check|show`."""

from __future__ import annotations

import click

from lorafleet.cli import shapes
from lorafleet.cli.options import global_options, json_option, settings
from lorafleet.cli.render import console, print_json, table
from lorafleet.inventory.report import summarize_providers
from lorafleet.units import format_bytes


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
        f"ok: {s.inventory_path} — fleet {inv.fleet or '(unnamed)'}: {len(inv.hosts)} hosts, "
        f"{total_gpus} GPUs, {len(inv.engines)} engines, {len(inv.adapters)} adapters, "
        f"{len(inv.tenants)} tenants"
    )
    for r in rows:
        out.print(f"  {r.provider:<12} {r.hosts:>4} hosts {r.gpus:>5} GPUs {r.engines:>4} engines")
    for w in inv.warnings:
        click.echo(f"warning: {w}", err=True)


@inventory.command()
@global_options(with_env=False, state=False)
@json_option
def show(as_json: bool) -> None:
    """Show hosts, engines and adapters (with size and its source) as tables."""
    inv = settings().load_inventory()
    if as_json:
        print_json(shapes.inventory_show(inv))
        return
    out = console()
    hosts = table(
        "Hosts",
        [
            ("host", "left"),
            ("provider", "left"),
            ("group", "left"),
            ("connection", "left"),
            ("address", "left"),
            ("GPUs", "right"),
            ("engines", "right"),
        ],
    )
    for h in inv.hosts:
        hosts.add_row(
            h.name,
            h.provider,
            h.group or "-",
            h.connection,
            h.address,
            "-" if h.gpus is None else str(h.gpus),
            str(len(h.engines)),
        )
    out.print(hosts)
    out.print()
    engines = table(
        "Engines",
        [
            ("engine", "left"),
            ("kind", "left"),
            ("url", "left"),
            ("base model", "left"),
            ("GPUs", "left"),
            ("GPU slots", "right"),
            ("host slots", "right"),
            ("max rank", "right"),
            ("budget", "right"),
        ],
    )
    for e in inv.engines:
        engines.add_row(
            e.key,
            e.kind,
            e.url,
            e.base_model,
            ",".join(map(str, e.gpus)) or "-",
            str(e.gpu_slots),
            "unlimited" if e.host_slots is None else str(e.host_slots),
            "-" if e.max_lora_rank is None else str(e.max_lora_rank),
            format_bytes(e.lora_budget_bytes),
        )
    out.print(engines)
    out.print()
    adapters = table(
        "Adapters",
        [
            ("adapter", "left"),
            ("base model", "left"),
            ("rank", "right"),
            ("modules", "right"),
            ("size", "right"),
            ("source", "left"),
            ("tenants", "left"),
        ],
    )
    for a in inv.adapters.values():
        adapters.add_row(
            a.id,
            a.base_model,
            str(a.rank),
            str(len(a.target_modules)),
            format_bytes(a.size_bytes),
            a.size_source,
            ", ".join(a.tenants) or "-",
        )
    out.print(adapters)
    for w in inv.warnings:
        click.echo(f"warning: {w}", err=True)
