"""`lorafleet warm ADAPTER...`: pre-load adapters on the right engines now."""

from __future__ import annotations

import click

from lorafleet.actions.runner import RunOptions
from lorafleet.actions.targets import choose_targets, plan_targets, registry_sizes
from lorafleet.actions.warm import WarmOptions
from lorafleet.actions.warm import warm as run_warm
from lorafleet.cli.acting import Pairs, act_and_report, engine_option, run_options
from lorafleet.cli.options import complete_adapters, count, global_options, json_option, settings
from lorafleet.inventory.lookup import resolve_adapters
from lorafleet.plan.planfile import read_plan
from lorafleet.policy.placement import can_serve
from lorafleet.policy.residency import ResidencyBook


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
@click.option("--replicas", type=count(), help="At most this many engines per adapter, least loaded first.")
@click.option("--prime", is_flag=True, help="Also send a 1-token request so the adapter holds a GPU slot.")
@click.option("--pin", is_flag=True, help="Pin it (at most GPU slots - 1 per engine); lorafleet never evicts it.")
@click.option("--unpin", is_flag=True, help="Release a pin (SGLang: reloads the adapter unpinned).")
@run_options("warmed")
def warm(
    as_json: bool,
    adapters: tuple[str, ...],
    engines: tuple[str, ...],
    plan_file: str | None,
    replicas: int | None,
    prime: bool,
    pin: bool,
    unpin: bool,
    run: RunOptions,
    wide: bool,
) -> None:
    """Pre-load ADAPTERS on engines now, through the engines' own HTTP APIs.

    An adapter already registered is re-warmed (a 1-token request naming it) rather than loaded twice.
    Adapters the inventory does not name, engines of another base model and ranks above an engine's
    max_lora_rank are refused before any request is sent. Before acting, what lorafleet remembers of each engine
    is corrected from its registry (an engine that restarted holds nothing). Exit 0 when every load succeeded, 1
    when any failed or was skipped.
    """
    if pin and unpin:
        raise click.UsageError("--pin and --unpin contradict each other")
    if not adapters and not plan_file:
        raise click.UsageError("name ADAPTERS to warm, or give --plan FILE")
    inv = settings().load_inventory()
    chosen = resolve_adapters(inv, adapters)
    placements = read_plan(plan_file, inv).placements if plan_file else ()
    pinned = frozenset((p.adapter, p.engine) for p in placements if p.pinned)
    options = WarmOptions(run.parallel, run.deadline_s, run.dry_run, prime, pin, unpin, pinned)

    def targets(book: ResidencyBook) -> Pairs:
        if plan_file:
            return plan_targets(inv, placements, [a.id for a in chosen])
        if not replicas:
            return choose_targets(inv, chosen, engines, None, None, book)
        serving = [e for e in inv.engines if any(can_serve(a, e) for a in chosen)]
        sizes = registry_sizes(serving, run.parallel, run.deadline_s)
        return choose_targets(inv, chosen, engines, replicas, lambda e: sizes[e.key], book)

    act_and_report(
        inv,
        targets,
        lambda pairs, book, store, advance: run_warm(inv, pairs, options, store=store, on_result=advance, book=book),
        as_json,
        run.dry_run,
        "warming",
        wide,
    )
