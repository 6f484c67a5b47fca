"""Rich tables read back as cells, for the CLI tests: a header line separates its cells with ┃, a body line
with │ (the tables are printed without markup, so a cell is its text)."""

from __future__ import annotations


def headers(text: str) -> list[list[str]]:
    """Each table's header cells, in order."""
    return [[c.strip() for c in line.split("┃")] for line in text.splitlines() if "┃" in line]


def header(text: str, first: str | None = None) -> list[str]:
    """The first table's header cells (or the first whose first cell is `first`)."""
    return next(h for h in headers(text) if first is None or h[0] == first)


def body(text: str) -> list[list[str]]:
    """Every body row's cells, in order."""
    return [[c.strip() for c in line.split("│")] for line in text.splitlines() if "│" in line]


def by_first(text: str) -> dict[str, list[str]]:
    """Each body row's cells by its first cell (the last row of that name wins)."""
    return {row[0]: row for row in body(text)}
