"""`lorafleet vram`: VRAM per GPU across the fleet."""

from __future__ import annotations

import click
from rich.text import Text

from lorafleet.cli import shapes
from lorafleet.cli.options import count, global_options, json_option, settings, wide_option
from lorafleet.cli.progress import progress_bar
from lorafleet.cli.render import Column, Report, console, print_json, safe
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
@click.option("--parallel", type=count(), default=DEFAULT_PARALLEL, show_default=True, help="Hosts probed at once.")
@click.option(
    "--accept-new-host-keys",
    is_flag=True,
    help="Record the key of a host not yet in known_hosts (like StrictHostKeyChecking=accept-new). "
    "A changed key is always refused.",
)
@wide_option
def vram(
    as_json: bool,
    pattern: str | None,
    provider: str | None,
    group: str | None,
    by: str,
    parallel: int,
    accept_new_host_keys: bool,
    wide: bool,
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
        render(inv, rows, by, wide)
    if failed and not as_json:
        click.echo(f"{len(failed)} of {plural(len(rows), 'host')} not ok", err=True)
    if failed:
        raise SystemExit(1)


HOST_COLUMNS = [
    Column("host", "left"),
    Column("status", "left", legend="ok, or why the host could not be read (listed below the table)"),
    Column("GPU"),
    Column("name", "left", wide=True),
    Column("used", wide=True),
    Column("free"),
    Column("total"),
    Column("usage", "left", legend="share of the GPU's memory in use"),
    Column("MIG", "left", wide=True),
]
ENGINE_COLUMNS = [
    Column("engine", "left"),
    Column("kind", "left", wide=True),
    Column("GPUs", "left", legend="the engine's GPU indexes on its host"),
    Column("free", legend="free memory of those GPUs"),
    Column("total"),
    Column("status", "left", legend="its host's probe: ok, or why it could not be read"),
]


def render(inv: Inventory, rows: list[HostVram], by: str, wide: bool) -> None:
    out = console()
    report = _engines_table(inv, rows, wide) if by == "engine" else _hosts_table(rows, wide)
    out.print(report.table)
    for r in rows:
        if not r.ok:
            out.print(Text(f"{r.name}: {r.status}: ", style="red") + safe(r.error or "no reason given"))
    out.print(report.legend() + ("" if wide else "; --wide shows every column") + ".", style="dim")


def _engines_table(inv: Inventory, rows: list[HostVram], wide: bool) -> Report:
    report = Report(None, ENGINE_COLUMNS, wide)
    for e in by_engine(inv, rows):
        report.add(
            {
                "engine": e.engine,
                "kind": e.kind,
                "GPUs": ",".join(map(str, e.gpus)) or "-",
                "free": format_bytes(e.free_bytes),
                "total": format_bytes(e.total_bytes),
                "status": e.status,
            }
        )
    return report


def _hosts_table(rows: list[HostVram], wide: bool) -> Report:
    report = Report(None, HOST_COLUMNS, wide)
    blank = {c.header: "" for c in HOST_COLUMNS}
    for r in rows:
        if not r.ok:
            report.add({**blank, "host": r.name, "status": Text(r.status, style="red")})
            continue
        if not r.gpus:
            report.add({**blank, "host": r.name, "status": "ok", "usage": Text("no GPUs", style="dim")})
        for i, g in enumerate(r.gpus):
            report.add(
                {
                    "host": r.name if i == 0 else "",
                    "status": "ok" if i == 0 else "",
                    "GPU": str(g.index),
                    "name": safe(g.name or "-"),
                    "used": format_bytes(g.used_bytes),
                    "free": format_bytes(g.free_bytes),
                    "total": format_bytes(g.total_bytes),
                    "usage": usage_bar(g.used_bytes, g.total_bytes),
                    "MIG": safe(g.mig or "-"),
                }
            )
    return report
