"""`lorafleet warm ADAPTER...`: pre-load adapters on the right engines now — and the results table that every
engine action prints (shared with `unload`)."""

from __future__ import annotations

from collections.abc import Callable

import click
from rich.text import Text

from lorafleet.cli import shapes
from lorafleet.cli.options import complete_adapters, complete_engines, global_options, json_option, settings
from lorafleet.cli.progress import progress_bar
from lorafleet.cli.render import console, print_json, safe, table, terminate_as_interrupt
from lorafleet.engines import EngineError, make_client
from lorafleet.inventory.model import Adapter, Engine, Inventory
from lorafleet.planning import read_plan
from lorafleet.policy.residency import ResidencyBook
from lorafleet.runner import CANCELLED, SKIPPED, ActionsInterrupted, WarmResult, restore_book
from lorafleet.store import Store, open_store
from lorafleet.warm import WarmOptions, choose_targets, plan_targets, resolve_adapters
from lorafleet.warm import warm as run_warm

Pairs = list[tuple[Adapter, Engine]]
Runner = Callable[[Pairs, ResidencyBook, Store, Callable[[WarmResult], None]], list[WarmResult]]


def _registry_size(engine: Engine) -> int:
    """How many adapters an engine has registered (unreachable engines sort last)."""
    try:
        with make_client(engine, backoff=()) as client:
            return len(client.registry())
    except EngineError:
        return 1 << 30


def act_and_report(
    inv: Inventory,
    choose: Callable[[ResidencyBook], Pairs],
    run: Runner,
    as_json: bool,
    dry_run: bool,
    verb: str,
) -> None:
    """Open the state first (an unusable file costs nothing), choose the targets, run with a progress bar, print
    the table or JSON; exit 1 when any row failed, 130/143 when interrupted."""
    with open_store(settings().state_path) as store, terminate_as_interrupt():
        book = restore_book(inv, store)
        pairs = choose(book)
        code, reason = 0, ""
        with progress_bar(verb, len(pairs), enabled=not as_json) as advance:
            try:
                results = run(pairs, book, store, lambda _r: advance())
            except ActionsInterrupted as exc:
                results, code, reason = exc.results, exc.code, exc.reason
    if as_json:
        print_json(shapes.warm(results, dry_run))
    else:
        title = "Dry run: nothing was changed (registries were read)" if dry_run else None
        t = table(
            title, [("adapter", "left"), ("engine", "left"), ("action", "left"), ("ms", "right"), ("detail", "left")]
        )
        for r in results:
            style = "green" if r.ok else "yellow" if r.action in (SKIPPED, CANCELLED) else "red"
            action = f"{r.action}, primed" if r.primed else r.action
            t.add_row(safe(r.adapter), safe(r.engine), Text(action, style=style), f"{r.ms:.0f}", safe(r.error or ""))
        console().print(t)
    if code:
        done = sum(r.ok for r in results)
        click.echo(f"error: {reason}: {done} of {len(results)} done; the rest are marked above", err=True)
        raise SystemExit(code)
    if not all(r.ok for r in results):
        raise SystemExit(1)


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
        type=click.FloatRange(min=0, min_open=True),
        help="Stop after SECONDS: what is not done by then is reported (exit 1), not waited for.",
    )(f)


@click.command()
@global_options(with_env=False)
@json_option
@click.argument("adapters", nargs=-1, shell_complete=complete_adapters)
@engine_option("Warm")
@click.option(
    "--plan",
    "plan_file",
    type=click.Path(exists=True, dir_okay=False),
    help="Warm the placements of this plan (lorafleet plan --out); with ADAPTERS, only theirs.",
)
@click.option(
    "--replicas", type=click.IntRange(min=1), help="At most this many engines per adapter, least loaded first."
)
@click.option("--prime", is_flag=True, help="Also send a 1-token request so the adapter holds a GPU slot.")
@click.option("--pin", is_flag=True, help="Pin it (at most GPU slots - 1 per engine); lorafleet never evicts it.")
@click.option("--unpin", is_flag=True, help="Release a pin (SGLang: reloads the adapter unpinned).")
@click.option("--dry-run", is_flag=True, help="Show what would be done; only reads the engines' registries.")
@click.option("--parallel", type=click.IntRange(min=1), default=8, show_default=True, help="Engines warmed at once.")
@deadline_option
def warm(
    as_json: bool,
    adapters: tuple[str, ...],
    engines: tuple[str, ...],
    plan_file: str | None,
    replicas: int | None,
    prime: bool,
    pin: bool,
    unpin: bool,
    dry_run: bool,
    parallel: int,
    deadline: float | None,
) -> None:
    """Pre-load ADAPTERS on engines now, through the engines' own HTTP APIs.

    An adapter already registered is re-warmed in place rather than loaded twice. Adapters the inventory does
    not name, engines of another base model and ranks above an engine's max_lora_rank are refused before any
    request is sent. Before acting, what lorafleet remembers of each engine is corrected from its registry (an
    engine that restarted holds nothing). Exit 0 when every load succeeded, 1 when any failed or was skipped.
    """
    if pin and unpin:
        raise click.UsageError("--pin and --unpin contradict each other")
    if not adapters and not plan_file:
        raise click.UsageError("name ADAPTERS to warm, or give --plan FILE")
    inv = settings().load_inventory()
    chosen = resolve_adapters(inv, adapters)
    placements = read_plan(plan_file, inv).placements if plan_file else ()
    options = WarmOptions(
        prime=prime,
        pin=pin,
        unpin=unpin,
        dry_run=dry_run,
        parallel=parallel,
        deadline_s=deadline,
        pinned=frozenset((p.adapter, p.engine) for p in placements if p.pinned),
    )

    def targets(book: ResidencyBook) -> Pairs:
        if plan_file:
            return plan_targets(inv, placements, [a.id for a in chosen])
        return choose_targets(inv, chosen, engines, replicas, _registry_size if replicas else None, book)

    act_and_report(
        inv,
        targets,
        lambda pairs, book, store, advance: run_warm(inv, pairs, options, store=store, on_result=advance, book=book),
        as_json,
        dry_run,
        "warming",
    )
