"""What every engine-action command shares (`warm`, `unload`, `plan --apply`): its options, and running the
action with a progress bar into the results table (or JSON) and the exit code."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click
from rich.text import Text

from lorafleet.actions.runner import CANCELLED, SKIPPED, ActionsInterrupted, RunOptions, WarmResult, restore_book
from lorafleet.cli import shapes
from lorafleet.cli.options import Finite, complete_engines, count, settings, wide_option
from lorafleet.cli.progress import progress_bar
from lorafleet.cli.render import Column, Report, console, print_json, safe
from lorafleet.inventory.model import Adapter, Engine, Inventory
from lorafleet.policy.residency import ResidencyBook
from lorafleet.store import Store, open_store

Pairs = list[tuple[Adapter, Engine]]
Runner = Callable[[Pairs, ResidencyBook, Store, Callable[[WarmResult], None]], list[WarmResult]]


ACTION_COLUMNS = [
    Column("adapter", "left"),
    Column("engine", "left"),
    Column("kind", "left", wide=True),
    Column("url", "left", wide=True),
    Column(
        "action",
        "left",
        legend="loaded; reloaded (registered already: re-warmed by a 1-token request); already-warm; unloaded; "
        "unpinned; would-load, would-re-warm, would-unload, would-unpin (a dry run); skipped, failed, interrupted, "
        "cancelled (see detail); "
        "primed: a 1-token request was sent (--prime, or a re-warm)",
    ),
    Column("ms", legend="how long the engine took"),
    Column("detail", "left", legend="the engine's answer, or why nothing was sent"),
]


def act_and_report(
    inv: Inventory,
    choose: Callable[[ResidencyBook], Pairs],
    run: Runner,
    as_json: bool,
    dry_run: bool,
    verb: str,
    wide: bool = False,
    json_within: dict[str, Any] | None = None,
) -> None:
    """Open the state first (an unusable file costs nothing), choose the targets, run with a progress bar, print
    the table or JSON; exit 1 when any row failed, 130/143 when interrupted. `json_within`: the JSON goes in this
    object, as its "applied" (a command that prints its own before acting prints one document still)."""
    with open_store(settings().state_path) as store:  # SIGTERM is an interrupt here as in every command (main.py)
        book = restore_book(inv, store)
        pairs = choose(book)
        code, reason = 0, ""
        with progress_bar(verb, len(pairs), enabled=not as_json) as advance:
            try:
                results = run(pairs, book, store, lambda _r: advance())
            except ActionsInterrupted as exc:
                results, code, reason = exc.results, exc.code, exc.reason
    if as_json:
        shape = shapes.warm(results, dry_run)
        print_json(shape if json_within is None else {**json_within, "applied": shape})
    else:
        render_results(inv, results, dry_run, wide)
    if code:
        done = sum(r.ok for r in results)
        click.echo(f"error: {reason}: {done} of {len(results)} done; the rest are marked above", err=True)
        raise SystemExit(code)
    if not all(r.ok for r in results):
        raise SystemExit(1)


def render_results(inv: Inventory, results: list[WarmResult], dry_run: bool, wide: bool) -> None:
    title = "Dry run: nothing was changed (registries were read)" if dry_run else None
    report = Report(title, ACTION_COLUMNS, wide)
    for r in results:
        style = "green" if r.ok else "yellow" if r.action in (SKIPPED, CANCELLED) else "red"
        engine = inv.engine(r.engine)
        report.add(
            {
                "adapter": safe(r.adapter),
                "engine": safe(r.engine),
                "kind": engine.kind if engine else "",
                "url": safe(engine.url) if engine else "",
                "action": Text(f"{r.action}, primed" if r.primed else r.action, style=style),
                "ms": f"{r.ms:.0f}",
                "detail": safe(r.error or ""),
            }
        )
    out = console()
    out.print(report.table)
    out.print(report.legend() + ("" if wide else "; --wide shows every column") + ".", style="dim")


def engine_option(what: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    return click.option(
        "--engine",
        "engines",
        multiple=True,
        metavar="HOST/ENGINE",
        shell_complete=complete_engines,
        help=f"{what} on this engine (repeatable). Default: every engine serving the adapter's base model.",
    )


def deadline_option(f: Callable[..., None]) -> Callable[..., None]:
    return click.option(
        "--deadline",
        type=Finite(min=0, min_open=True, max=1e7),
        help="Stop after SECONDS: what is not done by then is reported (exit 1), not waited for.",
    )(f)


def run_options(what: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """--wide, and --dry-run, --parallel and --deadline handed to the command as one `run: RunOptions`."""

    def decorate(f: Callable[..., None]) -> Callable[..., None]:
        @functools.wraps(f)
        def command(*args: Any, dry_run: bool, parallel: int, deadline: float | None, **kwargs: Any) -> None:
            f(*args, run=RunOptions(parallel, deadline, dry_run), **kwargs)  # --wide passes through as `wide`

        options = (
            wide_option,
            click.option("--dry-run", is_flag=True, help=f"Show what would be {what}; only reads the registries."),
            click.option("--parallel", type=count(), default=8, show_default=True, help="Engines at once."),
            deadline_option,
        )
        for option in reversed(options):
            command = option(command)
        return command

    return decorate
