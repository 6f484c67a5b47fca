"""Tables and JSON: the only place that knows how results look."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from rich.console import Console
from rich.table import Table


def console(stderr: bool = False) -> Console:
    """A console on the current stdout/stderr (looked up now, so test runners that swap them work)."""
    width = None if (sys.stderr if stderr else sys.stdout).isatty() else int(os.environ.get("COLUMNS", "160"))
    return Console(file=sys.stderr if stderr else sys.stdout, width=width, highlight=False, soft_wrap=False)


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False) + "\n")


def table(title: str | None, columns: list[tuple[str, str]]) -> Table:
    """A table with (header, justify) columns in the house style."""
    t = Table(title=title, title_justify="left", header_style="bold", show_edge=False, pad_edge=False)
    for header, justify in columns:
        t.add_column(header, justify=justify, overflow="fold")  # type: ignore[arg-type]
    return t
