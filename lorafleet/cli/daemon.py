"""`lorafleet daemon`: the long-lived prefetch loop (signals, logging and the final summary live here)."""

from __future__ import annotations

import dataclasses
import json
import logging
import resource
import sys
import threading
from typing import Any

import click

from lorafleet.cli.options import (
    SPAN,
    Finite,
    UtcLines,
    complete_policies,
    global_options,
    json_option,
    settings,
    touch_budget_option,
)
from lorafleet.cli.render import NAME_CHARS, Column, Report, console, print_json, safe_str
from lorafleet.cli.signals import stop_and_reload_on_signals
from lorafleet.drive.policies import ONLINE_POLICIES  # the command loads only when run: start-up stays light
from lorafleet.times import utc_text


class JsonLines(logging.Formatter):
    """One JSON object per log record: time, level, logger, message (and the exception, if any)."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "time": utc_text(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        return json.dumps(data)


def configure_daemon_logging(log_format: str, verbose: int) -> None:
    """Warnings always; -v info, -vv debug. `json`: one object per line on stderr (for journald, Loki, …)."""
    logger = logging.getLogger("lorafleet")
    logger.setLevel(logging.DEBUG if verbose > 1 else logging.INFO if verbose else logging.WARNING)
    if log_format == "json":
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(JsonLines())
        logger.addHandler(handler)
        logger.propagate = False
    elif not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(UtcLines("%(asctime)s %(levelname)s %(message)s"))
        logger.addHandler(handler)
        logger.propagate = False


def check_address(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is None or value == "off":
        return value
    if value.isdigit() and param.name == "hints_addr":
        value = f"127.0.0.1:{value}"  # a bare port: loopback
    host, sep, port = value.rpartition(":")
    bracketed = host.startswith("[") and host.endswith("]") and host.count("[") == host.count("]") == 1
    if (
        not sep
        or not host
        or not port.isdigit()
        or int(port) > 65535
        or (("[" in host or "]" in host) and not bracketed)
        or (":" in host and not bracketed)  # an IPv6 address is bracketed: "::1" is no host ":" and port 1
    ):
        raise click.BadParameter(f"{value!r} is not HOST:PORT, [IPV6]:PORT (or 'off')")
    return value


@click.command()
@global_options(with_env=False)
@json_option
@click.option("--once", is_flag=True, help="Process what the logs hold now, then exit (cron, tests).")
@click.option("--shadow", is_flag=True, help="Decide and journal, send nothing: simulated engines stand in.")
@click.option("--from-start", is_flag=True, help="On a first start, read the logs' history (default: from the end).")
@click.option(
    "--policy",
    default="lorafleet",
    show_default=True,
    type=click.Choice(ONLINE_POLICIES),
    shell_complete=complete_policies,
    help="The policy to run live.",
)
@click.option("--plan", "plan_path", type=click.Path(dir_okay=False), help="Start from this plan file.")
@touch_budget_option
@click.option(
    "--log",
    "logs",
    multiple=True,
    metavar="PATH",
    help="Follow this file or glob instead of gateway.logs (repeatable).",
)
@click.option(
    "--reconcile-every",
    type=Finite(min=1),
    default=30.0,
    show_default=True,
    metavar="SECONDS",
    help="Read each engine's registry, correct the book, re-warm, unregister vanished adapters.",
)
@click.option(
    "--retention",
    type=SPAN,
    default="14d",
    show_default=True,
    metavar="SPAN",
    help="Keep journal rows this long (24h, 14d, 1d12h).",
)
@click.option(
    "--minute-retention",
    type=SPAN,
    default="2d",
    show_default=True,
    metavar="SPAN",
    help="Keep per-minute detail this long; hourly sums keep the rest of --retention.",
)
@click.option(
    "--metrics-addr",
    default="127.0.0.1:9464",
    show_default=True,
    callback=check_address,
    metavar="HOST:PORT",
    help="Serve Prometheus /metrics here ('off': none; port 0: a free one).",
)
@click.option(
    "--hints-addr",
    default=None,
    callback=check_address,
    metavar="HOST:PORT",
    help="Take the gateway's start hints here (off by default; a bare PORT: loopback): each request mirrored as it "
    "starts (deploy/nginx-lorafleet.conf), so it is learned a whole generation before its log line is written.",
)
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="json: one object per line on stderr (for journald, Loki, …).",
)
@click.option(
    "--standby",
    is_flag=True,
    help="If another daemon holds the state file, wait and take over when it stops (a hot spare).",
)
def daemon(
    as_json: bool,
    once: bool,
    shadow: bool,
    from_start: bool,
    policy: str,
    plan_path: str | None,
    touch_budget: float,
    logs: tuple[str, ...],
    reconcile_every: float,
    retention: float,
    minute_retention: float,
    metrics_addr: str,
    hints_addr: str | None,
    log_format: str,
    standby: bool,
) -> None:
    """Follow the gateway's access logs, warm adapters ahead of demand, journal every decision.

    Runs until SIGTERM or Ctrl-C (exit 0 after a final checkpoint); SIGHUP, or a change to the inventory's files
    (a ConfigMap update), reloads the inventory (a broken one is reported and the old one kept). Engines of the
    inventory's discovery groups are found on Kubernetes and follow its pods. The metrics address also serves
    /ready (the loop advances) and /healthz. Every outcome and action goes to the state database's journal; a crash
    neither loses nor double-counts a log line. --shadow sends nothing and journals what would have happened.
    --once exits 1 when an engine call failed or a file the logs' patterns match could not be opened.
    """
    from lorafleet.daemon.lock import hold_state
    from lorafleet.daemon.loop import Daemon, DaemonOptions
    from lorafleet.plan.planfile import read_plan
    from lorafleet.probe.files import FileChecker
    from lorafleet.stopping import Stop
    from lorafleet.store.db import open_store

    s = settings()
    configure_daemon_logging(log_format, s.verbose)
    _more_open_files()
    inv = s.load_inventory()
    plan = read_plan(plan_path, inv) if plan_path else None
    address = None if metrics_addr == "off" else metrics_addr
    options = DaemonOptions(policy, shadow, once, from_start, plan, logs, reconcile_every, retention / 86400.0)
    options = dataclasses.replace(
        options,
        metrics_addr=address,
        hints_addr=None if hints_addr == "off" else hints_addr,
        touch_budget=touch_budget,
        minute_retention_days=minute_retention / 86400.0,
    )
    stop = Stop()
    reload_requested = threading.Event()  # SIGHUP sets it; the daemon's loop reads it
    stop_and_reload_on_signals(stop.set, reload_requested.set)
    lock = hold_state(s.state_path, standby, stop)  # one daemon per state file
    if lock is None:
        click.echo("standby stopped before taking over", err=True)
        return
    store = open_store(s.state_path)
    checker = FileChecker(inv)

    def reload() -> Any:
        from lorafleet.inventory import load_inventory

        return load_inventory(s.inventory_path)

    from lorafleet.inventory.loader import inventory_stamp

    def stamp() -> object:
        return inventory_stamp(s.inventory_path)

    runner = Daemon(
        inv,
        store,
        options,
        reload,
        files_gone=checker.missing,
        stop=stop,
        reloads=reload_requested,
        inventory_stamp=stamp,
    )
    try:
        summary = runner.run()
    finally:
        checker.close()
        store.close()
        lock.release()
    from lorafleet.cli import shapes

    data = shapes.daemon(summary, policy, shadow, str(s.state_path))
    if as_json:
        print_json(data)
    else:
        render_summary(data)
    if once and (summary.failed or summary.unread_logs):
        sys.exit(1)  # calls failed, or files the logs' patterns match were not read


OPEN_FILES = 65536  # what deploy/lorafleet-daemon.service gives it (LimitNOFILE=)


def _more_open_files() -> None:
    """Each followed log file holds a descriptor (rotation is followed through it), beside the engines'
    connections and the journal: a glob over a log folder can pass a shell's soft limit of 1024. The soft limit
    goes up to the hard one (at most OPEN_FILES), as Go's runtime does for every program; a file that still cannot
    be opened is reported (logs/follow.py)."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        target = OPEN_FILES if hard == resource.RLIM_INFINITY else min(hard, OPEN_FILES)
        if soft != resource.RLIM_INFINITY and soft < target:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            logging.getLogger("lorafleet.daemon").debug("open-files limit raised from %d to %d", soft, target)
    except (ValueError, OSError):  # not allowed here: the files past the limit are reported as they come
        pass


SUMMARY_COLUMNS = [
    Column("measure", "left"),
    Column("policy", legend="what the daemon's policy did"),
    Column("engines alone", legend="the same requests simulated through lru: what the engines do by themselves"),
    Column("note", "left"),
]


def render_summary(data: dict[str, Any]) -> None:
    mode = "shadow mode, nothing was sent" if data["shadow"] else "live"
    report = Report(f"Daemon run with the {data['policy']} policy ({mode})", SUMMARY_COLUMNS, wide=True)
    alone = data["engines_alone"]
    requests = data["requests"]

    def share(n: int, of: int) -> str:
        return f"{n:,} ({n / (of or 1):.1%})"

    unknown = f", {data['unknown_requests']:,} naming adapters not in the inventory" if data["unknown_requests"] else ""
    unread = f", {data['unread_logs']:,} matching files not opened: not read" if data["unread_logs"] else ""
    settled = f", {data['recounted']:,} counted again as settled" if data["recounted"] else ""
    rows = [
        ("log lines", f"{data['lines']:,}", "", f"{data['bad_lines']:,} bad{unknown}{unread}"),
        (
            "adapter requests",
            f"{data['requests']:,}",
            f"{alone['requests']:,}",
            f"{data['unserved']:,} no engine can serve{settled}",
        ),
        ("hits", share(data["hits"], requests), share(alone["hits"], alone["requests"]), "resident when they arrived"),
        ("late", share(data["late"], requests), share(alone["late"], alone["requests"]), "waited on a load in flight"),
        ("misses", share(data["misses"], requests), share(alone["misses"], alone["requests"]), "cold starts"),
        ("cold ms paid", f"{data['cold_ms_paid']:,.0f}", f"{alone['cold_ms_paid']:,.0f}", "waited: loads, GPU copies"),
        ("cold ms avoided", f"{data['cold_ms_avoided']:,.0f}", "", "by prefetched adapters"),
        (
            "loads",
            f"{data['loads']:,}",
            f"{alone['loads']:,}",
            f"{data['prefetch_loads']:,} ahead of demand, {data['prefetch_used']:,} of them used",
        ),
        (
            "touches",
            f"{data['touches']:,}",
            "0",
            f"{data['touches_per_request']:.3f} per request: 1-token requests keeping vLLM's LRU on the policy's"
            " choice",
        ),
        (
            "evictions",
            f"{data['evictions']:,}",
            "",
            f"{data['unloads']:,} unloads, {data['wasted_prefetches']:,} prefetches evicted unused",
        ),
        ("failed calls", f"{data['failed']:,}", "", "refused or failed engine calls (see stats loads)"),
    ]
    for name, ours, theirs, note in rows:
        report.add({"measure": name, "policy": ours, "engines alone": theirs, "note": note})
    out = console()
    out.print(report.table)
    out.print(report.legend() + ".", style="dim")
    if data["unknown_names"]:
        names = ", ".join(f"{safe_str(n, NAME_CHARS)} ({c:,})" for n, c in data["unknown_names"].items())
        out.print(f"names not in the inventory (never loaded): {names}", highlight=False)
    if not data["lines"]:
        out.print(
            "no new log lines: everything up to the checkpoint was read by an earlier run (see lorafleet stats), "
            "or the logs are empty",
            highlight=False,
        )
    out.print(f"journal: {data['state']} (lorafleet stats reads it)", highlight=False)
