"""Bytes inside, human units only when printing: MiB and GiB are binary and labelled so."""

from __future__ import annotations

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB


def format_bytes(n: int | float | None) -> str:
    """A short binary-unit label for a byte count, e.g. `640.0 MiB`; `-` for unknown."""
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def plural(count: int, noun: str) -> str:
    """`1 host`, `2 hosts`, `1,000 adapters`."""
    return f"{count:,} {noun}" + ("" if count == 1 else "s")
