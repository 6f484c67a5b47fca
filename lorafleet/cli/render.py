"""Tables and JSON: the only place that knows how results look."""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from lorafleet.shown import UNSHOWN


class _Console(Console):
    def on_broken_pipe(self) -> None:
        """`lorafleet … | head`: the reader has what it wanted. Quietly, exit 0 (rich would exit 1)."""
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        raise SystemExit(0)


def console(stderr: bool = False) -> Console:
    """A console on the current stdout/stderr (looked up now, so test runners that swap them work)."""
    width = None if (sys.stderr if stderr else sys.stdout).isatty() else int(os.environ.get("COLUMNS", "160"))
    # No markup: a string printed or put in a cell is shown as it is, so a name from a log ("[/bold]") is text, not
    # a tag rich would refuse (MarkupError) or apply; styles are given as `style=` and `Text`.
    return _Console(
        file=sys.stderr if stderr else sys.stdout, width=width, highlight=False, soft_wrap=False, markup=False
    )


_BREAKS = re.compile(r"[\t\n]+")
NAME_CHARS = 40  # a name read from a log (a tenant, an unknown adapter) shown inline: this long at most


def safe_str(text: str, limit: int | None = None) -> str:
    """Untrusted text (an engine's message, a log field, a name) as it may be shown: on one line (a newline would
    split a table's row in two), control and bidirectional characters removed; cut to `limit` characters (its last
    one `~`) where given."""
    shown = UNSHOWN.sub("", _BREAKS.sub(" ", text))
    return shown if limit is None or len(shown) <= limit else shown[: limit - 1] + "~"


def safe(text: str, style: str = "") -> Text:
    """`safe_str` for a table cell, never read as rich markup."""
    return Text(safe_str(text), style=style)


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False) + "\n")


def table(title: str | None, columns: list[tuple[str, str]]) -> Table:
    """A table with (header, justify) columns in the house style: numbers and names never wrap; only the last
    column, when it is free text, wraps at spaces."""
    t = Table(title=title, title_justify="left", header_style="bold", show_edge=False, pad_edge=False)
    for i, (header, justify) in enumerate(columns):
        free_text = i == len(columns) - 1 and justify == "left"
        t.add_column(header, justify=justify, no_wrap=not free_text, overflow="fold" if free_text else "ellipsis")  # type: ignore[arg-type]
    return t


@dataclass(frozen=True)
class Column:
    """One column of a report: what it is called, how it aligns, whether only --wide shows it, what it means."""

    header: str
    justify: str = "right"
    wide: bool = False
    legend: str = ""


class Report:
    """A table whose narrow form fits 80 columns; --wide shows every column. Rows are given by header."""

    def __init__(self, title: str | None, columns: list[Column], wide: bool) -> None:
        self.columns = [c for c in columns if wide or not c.wide]
        self.table = table(title, [(c.header, c.justify) for c in self.columns])

    def add(self, values: dict[str, Any]) -> None:
        self.table.add_row(*(values[c.header] for c in self.columns))

    def legend(self) -> str:
        return "; ".join(f"{c.header}: {c.legend}" for c in self.columns if c.legend)
