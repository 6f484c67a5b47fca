"""Options defined once and shared: the global ones work before and after the command name."""

from __future__ import annotations

import logging
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
from click.shell_completion import CompletionItem

from lorafleet.paths import default_inventory_path, default_state_path

if TYPE_CHECKING:
    from lorafleet.inventory import Inventory

F = TypeVar("F", bound=Callable[..., Any])


@dataclass
class Settings:
    """Global settings gathered from the group and the command; the last one given wins."""

    inventory: str | None = None
    state: str | None = None
    verbose: int = 0
    _loaded: dict[str, Inventory] = field(default_factory=dict)

    @property
    def inventory_path(self) -> str:
        return self.inventory or default_inventory_path()

    @property
    def state_path(self) -> Path:
        return Path(self.state) if self.state else default_state_path()

    def load_inventory(self) -> Inventory:
        from lorafleet.inventory import load_inventory  # imported when used: start-up stays light

        path = self.inventory_path
        if path not in self._loaded:
            self._loaded[path] = load_inventory(path)
        return self._loaded[path]


class UtcLines(logging.Formatter):
    """One plain line per record, stamped in UTC with its zone (`2026-11-02T09:14:03.250Z INFO …`): what -v writes
    when stderr is a file or a pipe, where nothing should wrap."""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802 - logging's
        from lorafleet.times import utc_text

        return utc_text(record.created)


def configure_logging(verbose: int) -> None:
    """-v: what is contacted and decided; -vv: bodies too. On stderr, never on stdout (so --json stays clean):
    through rich on a terminal, as plain UTC-stamped lines otherwise. Imported only when asked for."""
    logger = logging.getLogger("lorafleet")
    logger.setLevel(logging.DEBUG if verbose > 1 else logging.INFO)
    if any(getattr(h, "lorafleet_cli", False) for h in logger.handlers):
        return
    handler: logging.Handler
    if sys.stderr.isatty():
        from rich.console import Console
        from rich.logging import RichHandler

        console = Console(stderr=True, highlight=False)
        handler = RichHandler(console=console, show_path=False, markup=False, rich_tracebacks=False)
        handler.setFormatter(logging.Formatter("%(message)s"))
    else:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(UtcLines("%(asctime)s %(levelname)s %(message)s"))
    setattr(handler, "lorafleet_cli", True)  # noqa: B010 - marks the handler this module installed
    logger.addHandler(handler)
    logger.propagate = False


def settings(ctx: click.Context | None = None) -> Settings:
    ctx = ctx or click.get_current_context()
    return ctx.ensure_object(Settings)


def _store(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    if value is None or (value == 0 and param.name == "verbose"):
        return value
    if value == "":  # `--state ""` (an unset variable in a script) must not quietly mean the default file
        raise click.BadParameter("an empty path")
    s = settings(ctx)
    if param.name == "verbose":
        s.verbose += value
        configure_logging(s.verbose)
    else:
        setattr(s, param.name or "", value)
    return value


def global_options(with_env: bool, state: bool = True) -> Callable[[F], F]:
    """-i/--state/-v on the group (with env and defaults) and again on each command (overrides); commands that
    never touch the state database leave out --state."""

    def decorate(f: F) -> F:
        f = click.option(
            "-v",
            "--verbose",
            count=True,
            expose_value=False,
            callback=_store,
            is_eager=True,
            help="More detail on stderr (repeat for debug).",
        )(f)
        f = (
            f
            if not state
            else click.option(
                "--state",
                type=click.Path(dir_okay=False),
                expose_value=False,
                callback=_store,
                envvar="LORAFLEET_STATE" if with_env else None,
                help="State database (SQLite). [env: LORAFLEET_STATE; default: ~/.local/state/lorafleet/state.db]",
            )(f)
        )
        f = click.option(
            "-i",
            "--inventory",
            type=click.Path(),
            expose_value=False,
            callback=_store,
            envvar="LORAFLEET_INVENTORY" if with_env else None,
            help="Inventory YAML file or folder. [env: LORAFLEET_INVENTORY; default: ./lorafleet.yaml]",
        )(f)
        return f

    return decorate


class Finite(click.FloatRange):
    """A number in a range, never NaN or infinite: click's FloatRange lets NaN through (every comparison with it
    is false), and an infinite one overflows wherever it meets an integer."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


def count(minimum: int = 1) -> click.IntRange:
    """A whole number of things, at most 2^31 - 1 (a SQLite LIMIT past 2^63 is an OverflowError)."""
    return click.IntRange(min=minimum, max=2**31 - 1)


class SpanType(click.ParamType):
    """A span such as 90s, 30m, 1h30m or 7d, as seconds: every option that takes a span reads it this way."""

    name = "span"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, (int, float)):
            return float(value)
        from lorafleet.times import parse_span

        try:
            return parse_span(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


SPAN = SpanType()


def wide_option(f: F) -> F:
    return click.option("--wide", is_flag=True, help="Show every column (the default table fits 80 columns).")(f)


def json_option(f: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON with a stable shape instead of tables.")(f)


def touch_budget_option(f: F) -> F:
    from lorafleet.policy.core import TOUCH_BUDGET

    return click.option(
        "--touch-budget",
        type=Finite(min=0.0),
        default=TOUCH_BUDGET,
        show_default=True,
        help="Touches (1-token requests that steer vLLM's own LRU) each engine may be sent per adapter request "
        "it serves; an eviction needing more takes what the engine would evict alone. 0: none, but for pins.",
    )(f)


def _inventory_for_completion(ctx: click.Context) -> Inventory | None:
    """The current inventory (-i, LORAFLEET_INVENTORY or ./lorafleet.yaml), or None: a Tab never fails."""
    try:
        return settings(ctx).load_inventory()
    except Exception:  # completion must stay quiet, whatever the file holds
        return None


def complete_adapters(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    inv = _inventory_for_completion(ctx)
    if inv is None:
        return []
    return [CompletionItem(a.id, help=a.base_model) for a in inv.adapters.values() if a.id.startswith(incomplete)]


def complete_engines(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    inv = _inventory_for_completion(ctx)
    if inv is None:
        return []
    return [CompletionItem(e.key, help=f"{e.kind} {e.base_model}") for e in inv.engines if e.key.startswith(incomplete)]


def complete_policies(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """Policy names for a comma-separated list: the part after the last comma is completed."""
    from lorafleet.drive.policies import POLICY_NAMES

    done, _, last = incomplete.rpartition(",")
    prefix = f"{done}," if done else ""
    chosen = set(done.split(",")) if done else set()
    return [CompletionItem(prefix + p) for p in POLICY_NAMES if p.startswith(last) and p not in chosen]
