"""`lorafleet stats` (and `stats loads`): the journal the daemon writes, as tables, JSON or a live dashboard."""

from __future__ import annotations

import contextlib
import sqlite3
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from lorafleet.cli.options import Finite, count, global_options, json_option, settings, wide_option
from lorafleet.cli.render import Column, Report, console, print_json, safe, table
from lorafleet.errors import InputError

BARS = "▁▂▃▄▅▆▇█"
SERIES_BUCKETS = 12
KEY_WIDTH = 32  # the narrow table's longest tenant, adapter or engine name; --wide shows them whole


def sparkline(values: list[float | None]) -> str:
    return "".join(" " if v is None else BARS[max(0, min(len(BARS) - 1, int(v * len(BARS))))] for v in values)


def parse_time_option(ctx: click.Context, param: click.Parameter, value: str) -> float:
    from lorafleet.times import parse_moment

    try:
        return parse_moment(value, time.time())
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


since_option = click.option(
    "--since", default="24h", show_default=True, callback=parse_time_option, help="Start: 30m, 24h, 7d or ISO time."
)
until_option = click.option(
    "--until", default="now", show_default=True, callback=parse_time_option, help="End (excluded): same forms."
)


def check_window(since: float, until: float) -> None:
    if since >= until:
        from lorafleet.times import utc_text

        raise InputError(
            f"--since {utc_text(since)} is not before --until {utc_text(until)}",
            hint="the window is [since, until): give the earlier time to --since",
        )


def open_journal() -> Any:
    """The state database, which must exist (stats never creates one)."""
    from lorafleet.store.db import open_store

    path = settings().state_path
    if not Path(path).exists():
        raise InputError(
            f"no journal at {path}",
            hint="start the daemon (lorafleet daemon, or --shadow to try it) or pass --state PATH",
        )
    return open_store(path, read_only=True)


@contextlib.contextmanager
def reading(store: Any) -> Iterator[Any]:
    """The journal, read and closed: a file whose pages or tables SQLite cannot read (damaged, or another
    program's that happens to carry lorafleet's migration rows) is an input error naming it, not a traceback."""
    try:
        yield store
    except sqlite3.Error as exc:
        raise InputError(
            f"journal {store.path} cannot be read: {exc}",
            hint="it is damaged or not lorafleet's: point --state at the daemon's journal",
        ) from exc
    finally:
        store.close()


@dataclass
class Snapshot:
    data: dict[str, Any]
    series: dict[str, list[float | None]]
    empty: bool


def collect(store: Any, since: float, until: float, by: str, top: int, replay: bool) -> Snapshot:
    """The window's report; with `replay`, beside it lru replayed over the very requests the journal counts."""
    from lorafleet.cli import shapes
    from lorafleet.replay.driver import lru_hit_ratio
    from lorafleet.store.stats import report

    found = report(store, since, until, by, SERIES_BUCKETS)
    inv = _inventory_or_none()
    # What replay gives lru (the engines alone) for the window's requests in the inventory's gateway logs.
    lru = lru_hit_ratio(inv, *found.window.span) if replay and inv is not None else None
    tiers = {t.name: t.tier for t in inv.tenants.values()} if inv is not None and by == "tenant" else {}
    data = shapes.stats(found, top, lru, tiers)
    return Snapshot(data, found.series, found.overall.requests == 0)


def _check_names(store: Any, engine: str | None, adapter: str | None) -> None:
    """A name neither the journal nor the inventory knows is a typo: say so, with the closest known one."""
    from lorafleet.inventory.lookup import did_you_mean

    inv = _inventory_or_none()
    for option, name, column, known in (
        ("--engine", engine, "engine", [e.key for e in inv.engines] if inv else []),
        ("--adapter", adapter, "adapter", list(inv.adapters) if inv else []),
    ):
        if not name:
            continue
        journaled = [
            row[0] for row in store.db.execute(f"SELECT {column} FROM loads UNION SELECT {column} FROM actions_minutes")
        ]
        names = list(dict.fromkeys([*known, *journaled]))
        if name not in names:
            raise InputError(
                f"{option} {name!r}: neither the journal nor the inventory knows it{did_you_mean(name, names)}"
            )


def _inventory_or_none() -> Any:
    try:
        return settings().load_inventory()
    except InputError:
        return None


@click.group(invoke_without_command=True)
@global_options(with_env=False)
@json_option
@since_option
@until_option
@click.option(
    "--by",
    type=click.Choice(["tenant", "adapter", "engine", "minute", "hour"]),
    default="tenant",
    show_default=True,
    help="What the breakdown is by.",
)
@click.option("--top", type=count(), default=10, show_default=True, help="Rows per breakdown.")
@click.option("--wide", is_flag=True, help="Every column (the default fits 80 columns).")
@click.option(
    "--watch",
    type=Finite(min=0.2),
    is_flag=False,
    flag_value=2.0,
    default=None,
    metavar="SECONDS",
    help="A live dashboard, refreshed every SECONDS (2 when given alone; at least 0.2).",
)
@click.option("--no-replay", is_flag=True, help="Skip the lru figure (replays the window's logs).")
@click.pass_context
def stats(
    ctx: click.Context,
    as_json: bool,
    since: float,
    until: float,
    by: str,
    top: int,
    wide: bool,
    watch: float | None,
    no_replay: bool,
) -> None:
    """Hit ratios, cold ms paid and avoided, prefetch use and waste, from the daemon's journal.

    Rows are sorted by what needs attention: lowest hit ratio first, then most cold ms. The lru column is what
    replay gives the engines alone for the same requests (from the inventory's gateway logs), so the gain shows.
    Exit 0 (an empty journal says how to fill it); 2 when the state file does not exist.
    """
    if ctx.invoked_subcommand is not None:
        return
    check_window(since, until)
    from lorafleet.times import minute_key_at_or_after, utc_text

    if minute_key_at_or_after(since) == minute_key_at_or_after(until):  # it would answer 0 requests, exit 0
        raise InputError(
            f"no whole minute starts in [{utc_text(since)}, {utc_text(until)}): the journal counts requests by the "
            "minute",
            hint="widen the window to a minute or more; `lorafleet stats loads` lists each action at its time",
        )
    with reading(open_journal()) as store:
        if watch is not None:
            _watch(store, since, until, by, top, wide, watch)
            return
        snap = collect(store, since, until, by, top, replay=not no_replay)
    if as_json:
        print_json(snap.data)
        return
    if snap.empty:
        click.echo(
            "no requests journaled in this window. Start the daemon to fill the journal:\n"
            "  lorafleet daemon -i INVENTORY            (or --shadow to watch without acting)\n"
            "or widen the window (--since 7d)."
        )
        return
    out = console()
    for renderable in render(snap, by, wide):
        out.print(renderable)


def render(snap: Snapshot, by: str, wide: bool) -> list[Any]:
    d, o = snap.data, snap.data["overall"]
    summary = table(f"{d['window']['since']} → {d['window']['until']}", [("", "left"), ("", "right"), ("", "left")])
    requests = o["requests"] or 1
    lru = f", lru alone {o['lru_hit_ratio']:.1%}" if o.get("lru_hit_ratio") is not None else ""
    log = d["log"]
    unknown = f", {log['unknown']:,} naming adapters not in the inventory" if log["unknown"] else ""
    summary.add_row("log lines", f"{log['lines']:,}", f"{log['bad']:,} bad{unknown}")
    summary.add_row("requests", f"{o['requests']:,}", f"trend {sparkline(snap.series.get('', []))}")
    summary.add_row("hits", f"{o['hits']:,}", f"{o['hit_ratio']:.1%}{lru}; {o['gpu_hits']:,} in a GPU slot")
    summary.add_row("late", f"{o['late']:,}", f"{o['late'] / requests:.1%} waited on a load in flight")
    summary.add_row("misses", f"{o['misses']:,}", f"{o['misses'] / requests:.1%} cold starts")
    summary.add_row(
        "cold ms paid", f"{o['cold_ms_paid']:,.0f}", "waited on loads and GPU-slot copies (load-time model, calibrated)"
    )
    summary.add_row("cold ms avoided", f"{o['cold_ms_avoided']:,.0f}", "hits on adapters loaded ahead of demand")
    summary.add_row(
        "prefetches",
        f"{o['prefetch_loads']:,}",
        f"{o['prefetch_used']:,} used, {o['prefetch_wasted']:,} evicted unused",
    )
    summary.add_row(
        "touches",
        f"{o['touches']:,}",
        f"{o['touches_per_request']:.3f} per request: 1-token requests steering vLLM's LRU",
    )
    for engine, t in o["load_ms"].items():
        summary.add_row(safe(engine), f"{t['loads']:,} loads", f"p50 {t['p50']:.0f} ms, p99 {t['p99']:.0f} ms")
    if o["circuit_opened"]:
        summary.add_row("circuit opened", str(len(o["circuit_opened"])), safe(", ".join(o["circuit_opened"])))
    columns = [
        Column(by, "left"),
        *([Column("tier", "left")] if by == "tenant" else []),
        Column("requests"),
        Column("hit %", legend="hit ratio"),
        Column("misses"),
        Column("cold ms", legend="waited on loads and GPU-slot copies"),
        Column("avoided ms", wide=True),
        Column("wasted", wide=True, legend="prefetches evicted unused"),
        Column("trend", "left", legend=f"hit ratio over the window in {SERIES_BUCKETS} slices"),
    ]
    report = Report(f"by {by}, what needs attention first", columns, wide)
    for row in d["by"]:
        key = safe(row["key"] or "-")
        if not wide:  # a name of hundreds of characters (it came from a log) would squeeze every other column
            key.truncate(KEY_WIDTH, overflow="ellipsis")
        report.add(
            {
                by: key,
                "tier": row.get("tier") or "",
                "requests": f"{row['requests']:,}",
                "hit %": f"{row['hit_ratio']:.1%}",
                "misses": f"{row['misses']:,}",
                "cold ms": f"{row['cold_ms_paid']:,.0f}",
                "avoided ms": f"{row['cold_ms_avoided']:,.0f}",
                "wasted": "-" if row["prefetch_wasted"] is None else f"{row['prefetch_wasted']:,}",
                "trend": sparkline(snap.series.get(row["key"], [])),
            }
        )
    return [summary, report.table, report.legend()]


def _watch(store: Any, since: float, until: float, by: str, top: int, wide: bool, every: float) -> None:
    """A live dashboard; the window keeps its length and ends now. Ctrl-C ends it with exit 0."""
    from rich.console import Group
    from rich.live import Live

    span = max(60.0, until - since)
    out = console()
    try:
        with Live(console=out, refresh_per_second=4, transient=False) as live:
            while True:
                now = time.time()
                snap = collect(store, now - span, now, by, top, replay=False)
                live.update(Group(*render(snap, by, wide)))
                time.sleep(every)
    except KeyboardInterrupt:
        sys.exit(0)


@stats.command("loads")
@global_options(with_env=False)
@json_option
@since_option
@until_option
@click.option("--engine", help="Only this engine (HOST/ENGINE).")
@click.option("--adapter", help="Only this adapter.")
@click.option("--limit", type=count(), default=100, show_default=True, help="The newest this many.")
@wide_option
def loads(
    as_json: bool, since: float, until: float, engine: str | None, adapter: str | None, limit: int, wide: bool
) -> None:
    """The journal of loads, touches, unloads and evictions: who (warm, daemon), why, how long, what came of it.

    Loads, unloads and failed calls are listed one by one; touches, evictions by vLLM's own LRU and everything
    --shadow simulated are counted per minute (shown at the minute's start as ×N) while the daemon keeps the
    minute detail (--minute-retention).
    """
    from lorafleet.cli import shapes
    from lorafleet.store import stats as q

    check_window(since, until)
    with reading(open_journal()) as store:
        lines = q.action_log(store, q.window_of(since, until), engine, adapter, limit)
        if not lines and (engine or adapter):
            _check_names(store, engine, adapter)
    if as_json:
        print_json(shapes.stats_loads(lines))
        return
    if not lines:
        click.echo("no actions journaled in this window (widen it with --since 7d)")
        return
    columns = [
        Column("time", "left", legend="UTC"),
        Column("engine", "left"),
        Column("adapter", "left"),
        Column("action", "left", legend="✗ failed"),
        Column("why", "left"),
        Column("ms"),
        Column("by", "left", wide=True, legend="warm, daemon or daemon-shadow"),
        Column("note", "left", wide=True),
    ]
    report = Report(None, columns, wide)
    for line in lines:
        report.add(
            {
                "time": line.at[11:19],
                "engine": safe(line.engine),
                "adapter": safe(line.adapter),
                "action": (line.action if line.ok else f"{line.action} ✗")
                + (f" ×{line.count}" if line.count > 1 else ""),
                "why": line.reason or "-",
                "ms": "" if line.ms is None else f"{line.ms:.0f}",
                "by": line.source,
                "note": safe(line.error or ("unused prefetch" if line.unused_prefetch else "")),
            }
        )
    out = console()
    out.print(report.table)
    out.print(report.legend(), highlight=False)
