"""`lorafleet vram`: VRAM per GPU across the fleet."""

from __future__ import annotations

import click
from rich.table import Table
from rich.text import Text

from lorafleet.cli import shapes
from lorafleet.cli.options import global_options, json_option, settings
from lorafleet.cli.progress import progress_bar
from lorafleet.cli.render import console, print_json, safe, table
from lorafleet.inventory.model import PROVIDERS, Inventory
from lorafleet.probe.snapshot import HostVram
from lorafleet.probe.survey import DEFAULT_PARALLEL, HostFilter, by_engine, probe_fleet, select_hosts
from lorafleet.units import format_bytes, plural


def usage_bar(used: int | None, total: int | None, width: int = 12) -> Text:
    if used is None or not total:
        return Text("?".center(width), style="dim")
    share = min(1.0, used / total)
    filled = round(share * width)
    style = "red" if share > 0.9 else "yellow" if share > 0.7 else "green"
    return Text("█" * filled, style=style) + Text("░" * (width - filled), style="dim") + Text(f" {share:4.0%}")


@click.command()
@global_options(with_env=False, state=False)
@json_option
@click.option("--host", "pattern", metavar="PATTERN", help="Only hosts whose name matches this glob.")
@click.option("--provider", type=click.Choice(PROVIDERS), help="Only hosts of this provider.")
@click.option("--group", help="Only hosts of this inventory group.")
@click.option("--by", type=click.Choice(["host", "engine"]), default="host", show_default=True, help="Table layout.")
@click.option(
    "--parallel", type=click.IntRange(min=1), default=DEFAULT_PARALLEL, show_default=True, help="Hosts probed at once."
)
@click.option(
    "--accept-new-host-keys",
    is_flag=True,
    help="Record the key of a host not yet in known_hosts (like StrictHostKeyChecking=accept-new). "
    "A changed key is always refused.",
)
def vram(
    as_json: bool,
    pattern: str | None,
    provider: str | None,
    group: str | None,
    by: str,
    parallel: int,
    accept_new_host_keys: bool,
) -> None:
    """VRAM per GPU per host: NVML on local hosts, nvidia-smi over SSH elsewhere.

    Exit 0 when every selected host answered, 1 when any did not (the rest are still reported).
    """
    inv = settings().load_inventory()
    hosts = select_hosts(inv, HostFilter(pattern, provider, group))
    with progress_bar("probing hosts", len(hosts), enabled=not as_json) as advance:
        rows = probe_fleet(hosts, inv, parallel, accept_new_host_keys, on_done=lambda _row: advance())
    failed = [r for r in rows if not r.ok]
    if as_json:
        print_json(shapes.vram(rows))
    else:
        console().print(_engines_table(inv, rows) if by == "engine" else _hosts_table(rows))
    if failed and not as_json:
        click.echo(f"{len(failed)} of {plural(len(rows), 'host')} not ok", err=True)
    if failed:
        raise SystemExit(1)


def _engines_table(inv: Inventory, rows: list[HostVram]) -> Table:
    t = table(
        None,
        [
            ("engine", "left"),
            ("kind", "left"),
            ("GPUs", "left"),
            ("free", "right"),
            ("total", "right"),
            ("status", "left"),
        ],
    )
    for e in by_engine(inv, rows):
        gpus = ",".join(map(str, e.gpus)) or "-"
        t.add_row(e.engine, e.kind, gpus, format_bytes(e.free_bytes), format_bytes(e.total_bytes), e.status)
    return t


def _hosts_table(rows: list[HostVram]) -> Table:
    columns = ["host", "status", "GPU", "name", "used", "free", "total", "usage", "MIG"]
    right = {"GPU", "used", "free", "total"}
    t = table(None, [(c, "right" if c in right else "left") for c in columns])
    for r in rows:
        if not r.ok:
            t.add_row(r.name, Text(r.status, style="red"), "", safe(r.error or "", "red"))
            continue
        if not r.gpus:
            t.add_row(r.name, "ok", "", Text("no GPUs", style="dim"))
        for i, g in enumerate(r.gpus):
            t.add_row(
                r.name if i == 0 else "",
                "ok" if i == 0 else "",
                str(g.index),
                safe(g.name or "-"),
                format_bytes(g.used_bytes),
                format_bytes(g.free_bytes),
                format_bytes(g.total_bytes),
                usage_bar(g.used_bytes, g.total_bytes),
                safe(g.mig or "-"),
            )
    return t
