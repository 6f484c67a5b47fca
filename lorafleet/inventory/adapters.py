"""Base models, adapters (with their size, measured or estimated) and tenants (pins, workflows)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from lorafleet.errors import Location
from lorafleet.inventory import schema, sizing
from lorafleet.inventory.fields import NAME_RE, Checker, as_list, describe, join, quoted
from lorafleet.inventory.lookup import did_you_mean
from lorafleet.inventory.model import DTYPE_ALIASES, Adapter, BaseModel, Tenant
from lorafleet.inventory.yamlsource import LDict, where


def read_base_models(c: Checker, doc: LDict) -> dict[str, BaseModel]:
    out: dict[str, BaseModel] = {}
    section = c.mapping(doc.get("base_models"), doc, "base_models", "base_models", allow_null=True)
    for model_id, value in (section or {}).items():
        path = f"base_models.{model_id}"
        m = c.mapping(value, section, model_id, path)
        if m is None:
            continue
        if not NAME_RE.match(str(model_id)):
            c.add(section, model_id, path, "base model ids use letters, digits, '.', '_' and '-' only")
        schema.BASE_MODEL.check_keys(c, m, path)
        ok = schema.BASE_MODEL.check_required(c, m, path)
        read = schema.BASE_MODEL.read(c, m, path)
        if not ok or schema.BASE_MODEL.invalid(m, read, (*schema.BASE_MODEL_INTS, "dtype")):
            continue
        got = {**schema.BASE_MODEL.defaults(), **read}
        heads = got["num_attention_heads"]
        kv = got.get("num_kv_heads", heads)
        if heads % kv:
            message = f"num_attention_heads ({heads}) must be a multiple of num_kv_heads ({kv})"
            c.add(m, "num_kv_heads", join(path, "num_kv_heads"), message)
            continue
        if "head_dim" not in got and got["hidden_size"] % heads:
            message = (
                f"hidden_size ({got['hidden_size']}) is not divisible by num_attention_heads ({heads}); give head_dim"
            )
            c.add(m, "hidden_size", join(path, "hidden_size"), message)
            continue
        out[str(model_id)] = BaseModel(
            id=str(model_id),
            name=got.get("name", str(model_id)),
            hidden_size=got["hidden_size"],
            intermediate_size=got["intermediate_size"],
            num_layers=got["num_layers"],
            num_attention_heads=heads,
            num_kv_heads=kv,
            head_dim=got.get("head_dim", got["hidden_size"] // heads),
            dtype=DTYPE_ALIASES.get(got["dtype"], got["dtype"]),
        )
    return out


def read_adapters(
    c: Checker, doc: LDict, base_models: dict[str, BaseModel], tenants: set[str] | None
) -> dict[str, Adapter]:
    out: dict[str, Adapter] = {}
    section = doc.get("adapters")
    if "adapters" in doc and not isinstance(section, list):
        c.add(doc, "adapters", "adapters", f"expected a list of adapters, got {describe(section)}")
        return out
    must_read = ("id", "base_model", "path", "rank", "files", "target_modules", "tenants")
    for i, value in enumerate(as_list(section)):
        path = f"adapters[{i}]"
        entry = schema.ADAPTER.read_entry(c, value, section, i, path)
        if entry is None:
            continue
        m, got = entry
        if schema.ADAPTER.invalid(m, got, must_read):
            continue
        adapter_id = got["id"]
        if adapter_id in out:
            message = f"duplicate adapter id {quoted(adapter_id)} (first at {out[adapter_id].source})"
            c.add(m, "id", join(path, "id"), message)
            continue
        if not c.base_model(m, path, got["base_model"], base_models):
            continue
        base = base_models[got["base_model"]]
        for j, tenant in enumerate(got.get("tenants", [])):
            if tenants is not None and tenant not in tenants:
                c.add(m["tenants"], j, f"{path}.tenants[{j}]", f"{quoted(tenant)} is not a tenant in this inventory")
        sized = _size(c, m, path, got, base)
        if sized is None:
            continue
        rank, modules, size, size_source = sized
        file, line = where(section, i)
        out[adapter_id] = Adapter(
            id=adapter_id,
            base_model=base.id,
            path=got["path"],
            rank=rank,
            target_modules=modules,
            tenants=tuple(got.get("tenants", ())),
            files=got.get("files"),
            size_bytes=size,
            size_source=size_source,
            source=Location(file or "<inventory>", line),
        )
    return out


def _size(
    c: Checker, m: LDict, path: str, got: dict[str, Any], base: BaseModel
) -> tuple[int, tuple[str, ...], int, str] | None:
    """(rank, target modules, bytes, "measured" or "estimated"), or None when it cannot be known."""
    modules = tuple(got.get("target_modules", schema.ADAPTER.defaults()["target_modules"]))
    rank = got.get("rank")
    if "files" in got:
        folder = Path(os.path.expanduser(got["files"]))
        if not folder.is_absolute():
            folder = Path(m.file).parent / folder
        try:
            measured = sizing.measure_adapter(folder)
        except sizing.SizingError as exc:
            c.add(m, "files", join(path, "files"), str(exc))
            return None
        if rank is not None and measured.rank is not None and rank != measured.rank:
            message = f"rank {rank} disagrees with r={measured.rank} in {folder}/adapter_config.json"
            c.add(m, "rank", join(path, "rank"), message)
            return None
        rank = rank or measured.rank
        if "target_modules" not in got and measured.target_modules:
            modules = measured.target_modules
        if rank is None:
            c.add(m, None, path, "missing 'rank' (and adapter_config.json gives no r)")
            return None
        return rank, modules, measured.size_bytes, "measured"
    if rank is None:
        c.add(m, None, path, "missing required key 'rank' (or give 'files' to read it from adapter_config.json)")
        return None
    try:
        size = sizing.estimate_bytes(base, rank, modules)
    except sizing.SizingError as exc:
        c.add(m, "target_modules", join(path, "target_modules"), str(exc))
        return None
    return rank, sizing.expand_modules(modules), size, "estimated"


def declared_adapters(doc: LDict) -> set[str]:
    """Every id written down, valid or not, so one bad adapter does not cascade into more errors."""
    return {a["id"] for a in as_list(doc.get("adapters")) if isinstance(a, dict) and isinstance(a.get("id"), str)}


def read_tenants(c: Checker, doc: LDict, adapters: set[str]) -> dict[str, Tenant]:
    out: dict[str, Tenant] = {}
    section = c.mapping(doc.get("tenants"), doc, "tenants", "tenants", allow_null=True) if "tenants" in doc else None
    for name, value in (section or {}).items():
        path = f"tenants.{name}"
        m = c.mapping(value, section, name, path, allow_null=True)
        if m is None and value is not None:
            continue
        got: dict[str, Any] = {}
        workflows: list[tuple[str, ...]] = []
        if m is not None:
            schema.TENANT.check_keys(c, m, path)
            got = schema.TENANT.read(c, m, path)
            for j, adapter_id in enumerate(got.get("pinned", [])):
                if adapter_id not in adapters:
                    c.add(m["pinned"], j, f"{path}.pinned[{j}]", unknown_adapter(adapter_id, adapters))
            if "workflows" in m:
                workflows = _workflows(c, m, path, adapters)
        out[str(name)] = Tenant(
            name=str(name), tier=got.get("tier"), pinned=tuple(got.get("pinned", ())), workflows=tuple(workflows)
        )
    return out


def _workflows(c: Checker, m: LDict, path: str, adapters: set[str]) -> list[tuple[str, ...]]:
    raw = m["workflows"]
    wpath = join(path, "workflows")
    if not isinstance(raw, list):
        c.add(m, "workflows", wpath, f"expected a list of adapter chains, got {describe(raw)}")
        return []
    out = []
    for k, chain in enumerate(raw):
        if not isinstance(chain, list) or not chain or not all(isinstance(a, str) for a in chain):
            c.add(raw, k, f"{wpath}[{k}]", f"expected a list of adapter ids, got {describe(chain)}")
            continue
        for j, adapter_id in enumerate(chain):
            if adapter_id not in adapters:
                c.add(chain, j, f"{wpath}[{k}][{j}]", unknown_adapter(adapter_id, adapters))
        out.append(tuple(chain))
    return out


def unknown_adapter(adapter_id: str, adapters: set[str]) -> str:
    return f"{quoted(adapter_id)} is not an adapter in this inventory{did_you_mean(adapter_id, sorted(adapters))}"
