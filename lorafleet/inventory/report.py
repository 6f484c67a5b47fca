"""Plain-data views of an inventory for `inventory check` and `inventory show` (rendered by the CLI)."""

from __future__ import annotations

from dataclasses import dataclass

from lorafleet.inventory.model import Inventory


@dataclass(frozen=True)
class ProviderSummary:
    provider: str
    hosts: int
    gpus: int
    engines: int


def summarize_providers(inv: Inventory) -> list[ProviderSummary]:
    out: dict[str, list[int]] = {}
    for host in inv.hosts:
        row = out.setdefault(host.provider, [0, 0, 0])
        row[0] += 1
        row[1] += host.gpus or 0
        row[2] += len(host.engines)
    return [ProviderSummary(p, *row) for p, row in sorted(out.items())]
