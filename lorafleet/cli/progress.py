"""A progress bar on a terminal, nothing when piped or printing JSON."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from lorafleet.cli.render import console


@contextmanager
def progress_bar(description: str, total: int, enabled: bool) -> Iterator[Any]:
    """Yields `advance(n=1)`; a no-op unless enabled and stdout is a terminal."""
    if not enabled or not sys.stdout.isatty():
        yield lambda n=1: None
        return
    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console(stderr=True),
        transient=True,
    )
    with bar:
        task = bar.add_task(description, total=total)
        yield lambda n=1: bar.advance(task, n)
