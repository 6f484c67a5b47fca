"""`lorafleet replay` and `lorafleet trace synth`."""

from __future__ import annotations

from pathlib import Path

import click

from lorafleet.cli import shapes
from lorafleet.cli.options import complete_policies, count, global_options, json_option, settings, touch_budget_option
from lorafleet.cli.progress import progress_bar
from lorafleet.cli.render import Column, Report, console, print_json
from lorafleet.drive.policies import POLICY_NAMES
from lorafleet.inventory.model import Inventory, LogSource
from lorafleet.logs.reader import DEFAULT_JSONL, read_requests
from lorafleet.logs.records import LogTally
from lorafleet.measures import per_request
from lorafleet.plan.planfile import read_plan
from lorafleet.replay.driver import HINTS, LOG, VISIBILITY, PolicyResult
from lorafleet.replay.driver import replay as run_replay
from lorafleet.replay.synth import SHAPES, synthesize, synthesize_for_inventory
from lorafleet.units import plural


def parse_policies(value: str) -> list[str]:
    names = [p.strip() for p in value.split(",") if p.strip()]
    unknown = [p for p in names if p not in POLICY_NAMES]
    if unknown or not names:
        what = f"unknown policy {unknown[0]!r}" if unknown else "no policy named"
        raise click.BadParameter(f"{what} (known: {', '.join(POLICY_NAMES)})")
    return list(dict.fromkeys(names))


@click.command()
@global_options(with_env=False, state=False)
@json_option
@click.argument("logs", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--policy",
    "policies",
    default=",".join(POLICY_NAMES),
    show_default=True,
    shell_complete=complete_policies,
    callback=lambda _ctx, _param, value: parse_policies(value),
    help="Comma-separated policies to compare.",
)
@click.option(
    "--format",
    "log_format",
    type=click.Choice(["jsonl"]),
    default=None,
    help="Read the logs as JSON lines with the reference field names, ignoring the inventory's gateway "
    "mapping. By default each log uses the gateway.logs entry with the same file name (else the first).",
)
@click.option("--wide", is_flag=True, help="Show every column (the default table fits 80 columns).")
@click.option(
    "--plan",
    "plan_file",
    type=click.Path(exists=True, dir_okay=False),
    help="Start the lorafleet policy from this residency plan (lorafleet plan --out).",
)
@touch_budget_option
@click.option(
    "--visibility",
    type=click.Choice([*VISIBILITY, "both"]),
    default=LOG,
    show_default=True,
    help="When lorafleet learns of each request: from its log line (written at the request's end, plus a "
    "follower's poll: the engines served it alone, by their own LRU, and the policy runs as the daemon does), or "
    "from the gateway's start hint (on arrival, `daemon --hints-addr`); both: each policy under each. A log "
    "without durations gives each request one time, and the two are the same.",
)
def replay(
    as_json: bool,
    logs: tuple[str, ...],
    policies: list[str],
    log_format: str | None,
    wide: bool,
    plan_file: str | None,
    touch_budget: float,
    visibility: str,
) -> None:
    """Replay access LOGS through the policy core with simulated engines.

    Every policy starts from empty engines and sees the same requests, in arrival order (a line's time minus
    its duration, where the log gives one); the table shows what each would give at the inventory's budgets.
    Nothing is contacted: no engine, no host.
    """
    names = policies
    modes = VISIBILITY if visibility == "both" else (visibility,)
    inv = settings().load_inventory()
    source: LogSource | None = DEFAULT_JSONL if log_format == "jsonl" else None
    events, tally = read_requests(logs, inv, source)
    with progress_bar("replaying", len(events) * len(names) * len(modes), enabled=not as_json) as advance:
        done: dict[str, int] = {}

        def step(policy: str, index: int) -> None:
            advance(max(0, index - done.get(policy, 0)))
            done[policy] = index

        plan = read_plan(plan_file, inv).placements if plan_file else ()
        results = run_replay(inv, events, names, progress=step, plan=plan, touch_budget=touch_budget, visibility=modes)
    if as_json:
        print_json(shapes.replay(results, tally))
        return
    render_replay(results, tally, inv, wide)


REPLAY_COLUMNS = [
    Column("policy", "left"),
    Column("hit ratio", legend="share of adapter requests whose adapter was resident when they arrived"),
    Column("hits", wide=True),
    Column("late", legend="a load of the adapter was already in flight; the request waited the rest"),
    Column("misses", legend="cold starts"),
    Column("GPU hits", wide=True, legend="hits whose adapter also held a GPU slot (no host-to-GPU copy)"),
    Column("wait p50 ms", wide=True),
    Column("wait p99 ms", legend="99th percentile of the time a request waited on a load or a GPU-slot copy"),
    Column("wait total s", wide=True, legend="time all requests waited on loads and GPU-slot copies, summed"),
    Column("loads", wide=True),
    Column("prefetched", wide=True, legend="loads issued ahead of demand"),
    Column("wasted", wide=True, legend="prefetched adapters evicted before any request used them"),
    Column("touches", wide=True, legend="1-token requests that make a vLLM engine's own LRU evict the policy's choice"),
    Column("per request", wide=True, legend="touches per adapter request (at most --touch-budget)"),
    Column("over budget", wide=True, legend="times an engine held more than its budget (always 0)"),
    Column("loader busy", wide=True, legend="share of the time each engine's loader was loading"),
    Column("headroom", legend="share of the lru-to-oracle hit-ratio gap a policy captures"),
]


def render_replay(results: list[PolicyResult], tally: LogTally, inv: Inventory, wide: bool) -> None:
    both = len({r.visibility for r in results}) > 1
    engines = plural(len(inv.engines), "engine")
    title = (
        f"Replay of {plural(tally.adapter_requests, 'adapter request')} on {engines} (fleet {inv.fleet or 'unnamed'})"
    )
    report = Report(title, REPLAY_COLUMNS, wide)
    for r in results:
        report.add(
            {
                "policy": f"{r.policy} ({r.visibility})" if both else r.policy,
                "hit ratio": f"{r.hit_ratio:.1%}",
                "hits": f"{r.hits:,}",
                "late": f"{r.late:,}",
                "misses": f"{r.misses:,}",
                "GPU hits": f"{r.gpu_hits:,}",
                "wait p50 ms": f"{r.cold_ms_percentile(50):,.1f}",
                "wait p99 ms": f"{r.cold_ms_percentile(99):,.1f}",
                "wait total s": f"{r.cold_ms_total / 1000:,.1f}",
                "loads": f"{r.loads:,}",
                "prefetched": f"{r.prefetch_loads:,}",
                "wasted": f"{r.wasted_prefetches:,}",
                "touches": f"{r.touches:,}",
                "per request": f"{per_request(r.touches, r.requests):.3f}",
                "over budget": str(r.budget_violations),
                "loader busy": f"{r.loader_utilization:.1%}",
                "headroom": "-" if r.headroom is None else f"{r.headroom:.0%}",
            }
        )
    out = console()
    out.print(report.table)
    for mode in dict.fromkeys(r.visibility for r in results):
        conclusion = replay_conclusion({r.policy: r for r in results if r.visibility == mode})
        if conclusion:
            out.print(conclusion[:-1] + f" with {VISIBILITY_TEXT[mode]}." if both else conclusion)
    notes = [plural(tally.lines, "line")]
    if not tally.timed:
        notes.append(
            "no request durations in the log: each line's time taken as the request's arrival and as when "
            "lorafleet learns of it (log-only and hinted visibility are the same)"
        )
    elif tally.timed < tally.adapter_requests + tally.base_requests + tally.unknown_requests:
        notes.append(f"{plural(tally.timed, 'request')} with a duration (the rest: the line's time taken as both)")
    if tally.unplaced and len(inv.engines) > 1:
        notes.append(
            f"{tally.unplaced:,} adapter requests of {tally.adapter_requests:,} name no engine of the inventory: "
            "replay routes them itself, as docs/replay.md (Routing) says; a log whose lines name the engine "
            "(nginx: $upstream_addr) replays them where they were served"
        )
    if tally.base_requests:
        notes.append(f"{plural(tally.base_requests, 'base-model request')} (not counted)")
    if tally.unknown_requests:
        notes.append(f"{tally.unknown_requests:,} for adapters not in the inventory (never loaded)")
    if tally.bad_lines:
        reasons = ", ".join(f"{n} {k}" for k, n in sorted(tally.bad_reasons.items()))
        notes.append(f"{plural(tally.bad_lines, 'bad line')} skipped ({reasons})")
    unserved = max(r.unserved for r in results)
    if unserved:
        notes.append(f"{plural(unserved, 'request')} no engine can serve (base model or rank)")
    bypassed = max(results, key=lambda r: r.bypassed, default=None)
    if bypassed is not None and bypassed.bypassed:
        notes.append(
            f"loaders saturated: up to {bypassed.bypassed:,} misses ({bypassed.policy}) found every slot of their "
            "engine held by loads in flight and were each charged one cold load without waiting their turn, so "
            "these figures are optimistic (docs/replay.md, Loads)"
        )
    out.print("; ".join(notes))
    out.print(report.legend() + ("" if wide else "; --wide shows every column") + ".", style="dim")


VISIBILITY_TEXT = {LOG: "log lines only", HINTS: "start hints"}


def replay_conclusion(by_name: dict[str, PolicyResult]) -> str | None:
    """The one line an admin wants: what lorafleet would change, against the engines alone and the bounds —
    evictions alone (belady: past it, only loading ahead helps; below it, more slots or a better order) and with
    prefetching too (oracle)."""
    lru, ours = by_name.get("lru"), by_name.get("lorafleet")
    belady, oracle = by_name.get("belady"), by_name.get("oracle")
    if lru is None or ours is None:
        return None
    line = f"lorafleet would turn {lru.hit_ratio:.0%} into {ours.hit_ratio:.0%} of requests warm"
    if belady is not None:
        line += f"; evictions alone, knowing the future, reach {belady.hit_ratio:.0%} (belady)"
    if oracle is not None:
        line += f"; the bound (oracle) is {oracle.hit_ratio:.0%}"
    return line + "."


@click.group()
def trace() -> None:
    """Synthetic access logs for replay and benchmarks."""


@trace.command()
@global_options(with_env=False, state=False)
@click.option(
    "--shape",
    type=click.Choice(SHAPES),
    default="workflows",
    show_default=True,
    help="The traffic's shape (docs/replay.md).",
)
@click.option("--requests", type=count(), default=None, help="Requests to write [default: per shape].")
@click.option("--seed", type=int, default=1, show_default=True, help="The same seed writes the same log.")
@click.option(
    "--out", type=click.Path(file_okay=False), required=True, help="Folder for access.jsonl and inventory.yaml."
)
@click.option(
    "--for-inventory",
    is_flag=True,
    help="Write traffic for the -i inventory (its tenants, workflows and adapters) instead of a shape; "
    "only the log is written (access.jsonl, JSON lines in the reference layout: replay it with --format jsonl).",
)
@click.option("--force", is_flag=True, help="Overwrite files that already exist in --out.")
def synth(shape: str, requests: int | None, seed: int, out: str, for_inventory: bool, force: bool) -> None:
    """Write a synthetic access log (JSON lines, reference layout) and a matching inventory."""
    if for_inventory:
        inv = settings().load_inventory()
        result = synthesize_for_inventory(inv, requests or 2000, seed, Path(out) / "access.jsonl", force)
        click.echo(f"wrote {plural(result.requests, 'request')} to {result.log_path}")
        # The log is in the reference layout whatever the inventory's gateway logs look like.
        click.echo(f"replay it: lorafleet replay {result.log_path} -i {settings().inventory_path} --format jsonl")
        return
    result = synthesize(shape, requests, seed, Path(out), force)
    click.echo(
        f"wrote {plural(result.requests, 'request')} to {result.log_path} and the inventory {result.inventory_path}"
    )
    click.echo(f"replay it: lorafleet replay {result.log_path} -i {result.inventory_path}")
