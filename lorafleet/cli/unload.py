"""`lorafleet unload ADAPTER...`: unload adapters from engines now, and forget them in the book."""

from __future__ import annotations

import click

from lorafleet.actions.runner import Reach, RunOptions
from lorafleet.actions.targets import unload_targets
from lorafleet.actions.unload import unload as run_unload
from lorafleet.cli.acting import act_and_report, engine_option, run_options
from lorafleet.cli.options import complete_adapters, global_options, json_option, settings
from lorafleet.inventory.lookup import resolve_adapters


@click.command()
@global_options(with_env=False)
@json_option
@click.argument("adapters", nargs=-1, required=True, shell_complete=complete_adapters)
@engine_option("Unload")
@run_options("unloaded")
def unload(as_json: bool, adapters: tuple[str, ...], engines: tuple[str, ...], run: RunOptions, wide: bool) -> None:
    """Unload ADAPTERS from engines (where registered) and forget them, pins included.

    On SGLang an unload frees the adapter's memory; on vLLM it drops the name only, and the engine frees the
    slot by its own LRU (the row says so). Every unload is journaled. Exit 1 when any failed.
    """
    inv = settings().load_inventory()
    chosen = resolve_adapters(inv, adapters)
    act_and_report(
        inv,
        lambda book: unload_targets(inv, chosen, engines),
        lambda pairs, book, store, advance: run_unload(inv, pairs, book, run, Reach(store, on_result=advance)),
        as_json,
        run.dry_run,
        "unloading",
        wide,
    )
