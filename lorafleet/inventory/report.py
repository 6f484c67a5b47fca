"""Plain-data views of an inventory for `inventory check` and `inventory show` (rendered by the CLI)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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


def inventory_as_dict(inv: Inventory) -> dict[str, Any]:
    """The stable `inventory show --json` shape: hosts after range expansion, engines as named."""
    return {
        "fleet": inv.fleet,
        "sources": list(inv.sources),
        "hosts": [
            {
                "name": h.name,
                "provider": h.provider,
                "group": h.group,
                "connection": h.connection,
                "address": h.address,
                "region": h.region,
                "site": h.site,
                "instance_type": h.instance_type,
                "gpu": h.gpu_model,
                "gpus": h.gpus,
                "engines": [
                    {
                        "name": e.name,
                        "key": e.key,
                        "kind": e.kind,
                        "url": e.url,
                        "base_model": e.base_model,
                        "gpus": list(e.gpus),
                        "gpu_slots": e.gpu_slots,
                        "host_slots": e.host_slots,
                        "max_lora_rank": e.max_lora_rank,
                        "lora_budget_bytes": e.lora_budget_bytes,
                        "api_key_env": e.api_key_env,
                        "load_model": {
                            "load_fixed_ms": e.load.load_fixed_ms,
                            "disk_gbps": e.load.disk_gbps,
                            "h2d_gbps": e.load.h2d_gbps,
                        },
                    }
                    for e in h.engines
                ],
            }
            for h in inv.hosts
        ],
        "base_models": [
            {
                "id": b.id,
                "name": b.name,
                "hidden_size": b.hidden_size,
                "intermediate_size": b.intermediate_size,
                "num_layers": b.num_layers,
                "num_attention_heads": b.num_attention_heads,
                "num_kv_heads": b.num_kv_heads,
                "head_dim": b.head_dim,
                "dtype": b.dtype,
            }
            for b in inv.base_models.values()
        ],
        "adapters": [
            {
                "id": a.id,
                "base_model": a.base_model,
                "rank": a.rank,
                "target_modules": list(a.target_modules),
                "path": a.path,
                "tenants": list(a.tenants),
                "size_bytes": a.size_bytes,
                "size_source": a.size_source,
            }
            for a in inv.adapters.values()
        ],
        "tenants": [
            {"name": t.name, "tier": t.tier, "pinned": list(t.pinned), "workflows": [list(w) for w in t.workflows]}
            for t in inv.tenants.values()
        ],
        "warnings": list(inv.warnings),
    }
