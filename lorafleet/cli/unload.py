"""`lorafleet unload ADAPTER...`: unload adapters from engines now, and forget them in the book."""

from __future__ import annotations

import click

from lorafleet.actions.targets import unload_targets
from lorafleet.actions.unload import unload as run_unload
from lorafleet.cli.acting import act_and_report, deadline_option, engine_option
from lorafleet.cli.options import complete_adapters, global_options, json_option, settings
from lorafleet.inventory.lookup import resolve_adapters


@click.command()
@global_options(with_env=False)
@json_option
@click.argument("adapters", nargs=-1, required=True, shell_complete=complete_adapters)
@engine_option("Unload")
@click.option("--dry-run", is_flag=True, help="Show what would be unloaded; only reads the engines' registries.")
@click.option("--parallel", type=click.IntRange(min=1), default=8, show_default=True, help="Engines at once.")
@deadline_option
def unload(
    as_json: bool,
    adapters: tuple[str, ...],
    engines: tuple[str, ...],
    dry_run: bool,
    parallel: int,
    deadline: float | None,
) -> None:
    """Unload ADAPTERS from engines (where registered) and forget them, pins included.

    On SGLang an unload frees the adapter's memory; on vLLM it drops the name only, and the engine frees the
    slot by its own LRU (the row says so). Every unload is journaled. Exit 1 when any failed.
    """
    inv = settings().load_inventory()
    chosen = resolve_adapters(inv, adapters)
    act_and_report(
        inv,
        lambda book: unload_targets(inv, chosen, engines),
        lambda pairs, book, store, advance: run_unload(
            inv, pairs, book, store, dry_run, parallel, on_result=advance, deadline_s=deadline
        ),
        as_json,
        dry_run,
        "unloading",
    )
