"""`lorafleet warm ADAPTER...`: pre-load adapters on the right engines now."""

from __future__ import annotations

import click
from rich.text import Text

from lorafleet.cli import shapes
from lorafleet.cli.options import complete_adapters, complete_engines, global_options, json_option, settings
from lorafleet.cli.progress import progress_bar
from lorafleet.cli.render import console, print_json, safe, table, terminate_as_interrupt
from lorafleet.engines import EngineError, make_client
from lorafleet.inventory.model import Engine
from lorafleet.store import open_store
from lorafleet.warm import (
    CANCELLED,
    SKIPPED,
    WarmInterrupted,
    WarmOptions,
    choose_targets,
    resolve_adapters,
    restore_book,
)
from lorafleet.warm import warm as run_warm


def _registry_size(engine: Engine) -> int:
    """How many adapters an engine has registered (unreachable engines sort last)."""
    try:
        with make_client(engine, backoff=()) as client:
            return len(client.registry())
    except EngineError:
        return 1 << 30


@click.command()
@global_options(with_env=False)
@json_option
@click.argument("adapters", nargs=-1, required=True, shell_complete=complete_adapters)
@click.option(
    "--engine",
    "engines",
    multiple=True,
    metavar="HOST/ENGINE",
    shell_complete=complete_engines,
    help="Warm on this engine (repeatable). Default: every engine serving the adapter's base model.",
)
@click.option(
    "--replicas", type=click.IntRange(min=1), help="At most this many engines per adapter, least loaded first."
)
@click.option("--prime", is_flag=True, help="Also send a 1-token request so the adapter holds a GPU slot.")
@click.option(
    "--pin", is_flag=True, help="Pin it (SGLang pins at most max_loras_per_batch - 1); lorafleet never evicts it."
)
@click.option("--dry-run", is_flag=True, help="Show what would be done; only reads the engines' registries.")
@click.option("--parallel", type=click.IntRange(min=1), default=8, show_default=True, help="Engines warmed at once.")
@click.option(
    "--deadline",
    type=click.FloatRange(min=0, min_open=True),
    help="Stop after SECONDS: what is not done by then is reported (exit 1), not waited for.",
)
def warm(
    as_json: bool,
    adapters: tuple[str, ...],
    engines: tuple[str, ...],
    replicas: int | None,
    prime: bool,
    pin: bool,
    dry_run: bool,
    parallel: int,
    deadline: float | None,
) -> None:
    """Pre-load ADAPTERS on engines now, through the engines' own HTTP APIs.

    An adapter already registered is re-warmed in place rather than loaded twice. Adapters the inventory does
    not name, engines of another base model and ranks above an engine's max_lora_rank are refused before any
    request is sent. Exit 0 when every load succeeded, 1 when any failed or was skipped.
    """
    s = settings()
    inv = s.load_inventory()
    chosen = resolve_adapters(inv, adapters)
    options = WarmOptions(prime=prime, pin=pin, dry_run=dry_run, parallel=parallel, deadline_s=deadline)
    # The state file is opened (and so checked writable) before any engine is contacted.
    with open_store(s.state_path) as store, terminate_as_interrupt():
        book = restore_book(inv, store)
        pairs = choose_targets(inv, chosen, engines, replicas, load_of=_registry_size if replicas else None, book=book)
        code, reason = 0, ""
        with progress_bar("warming", len(pairs), enabled=not as_json) as advance:
            try:
                results = run_warm(inv, pairs, options, store=store, on_result=lambda _r: advance())
            except WarmInterrupted as exc:
                results, code, reason = exc.results, exc.code, exc.reason
    if as_json:
        print_json(shapes.warm(results, dry_run))
    else:
        t = table(
            "Dry run: nothing was loaded (registries were read)" if dry_run else None,
            [("adapter", "left"), ("engine", "left"), ("action", "left"), ("ms", "right"), ("error", "left")],
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
