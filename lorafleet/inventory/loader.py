"""Load, merge and resolve an inventory: defaults → group → host → engine, ranges expanded, sizes computed.

Every problem of every file is collected and raised together as one InventoryError, so an admin fixes a whole
file in one round trip instead of one error per run. The sections are read by their own modules from the field
tables in `schema`.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

from lorafleet.collector import paused
from lorafleet.errors import InputError, InventoryError, Problem
from lorafleet.inventory import schema
from lorafleet.inventory.adapters import declared_adapters, read_adapters, read_base_models, read_tenants
from lorafleet.inventory.discovery import read_discovery
from lorafleet.inventory.fields import INVALID, Checker, describe, quoted
from lorafleet.inventory.gateway import read_gateway
from lorafleet.inventory.hosts import Spot, read_hosts, read_settings
from lorafleet.inventory.merge import merge_documents
from lorafleet.inventory.model import Adapter, Engine, Inventory
from lorafleet.inventory.yamlsource import LDict, load_yaml
from lorafleet.paths import is_device
from lorafleet.units import plural

log = logging.getLogger("lorafleet.inventory")


def inventory_files(path: str | Path) -> list[Path]:
    """The YAML file, or the .yaml/.yml files of a folder in name order."""
    root = Path(path)
    if root.is_dir():
        files = sorted(p for p in root.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())
        if not files:
            raise InputError(f"{root}: folder holds no .yaml or .yml files")
        return files
    if root.exists():
        if is_device(root):
            raise InputError(f"inventory {str(root)!r} is not a file (a device?)")
        return [root]
    raise InputError(
        f"inventory {str(root)!r} not found",
        hint="pass -i FILE, set LORAFLEET_INVENTORY, or create ./lorafleet.yaml (see inventories/)",
    )


def inventory_stamp(path: str | Path) -> tuple[tuple[str, str, int, int, int], ...]:
    """What changes when the inventory's files do: each file's resolved path, inode, size and mtime. A ConfigMap
    volume is updated by pointing its `..data` link at a new folder, so the resolved path and inode change
    while the path read stays the same; an edit in place changes the size or mtime; a folder's new file shows."""
    out = []
    for file in inventory_files(path):
        real = file.resolve()
        status = real.stat()
        out.append((str(file), str(real), status.st_ino, status.st_size, status.st_mtime_ns))
    return tuple(out)


def load_inventory(path: str | Path) -> Inventory:
    """Read a YAML file or a folder of them; raise InventoryError listing every problem found."""
    with paused():  # an inventory is many new, long-lived objects and no garbage cycles: nothing to collect
        return _load(path)


def _load(path: str | Path) -> Inventory:
    files = inventory_files(path)
    checker = Checker()
    docs: list[LDict] = []
    for file in files:
        doc, found = load_yaml(file)
        checker.problems.extend(found)
        if doc is None:
            continue
        if not isinstance(doc, LDict):
            message = f"expected a mapping of sections at the top, got {describe(doc, show_text=False)}"
            checker.problems.append(Problem(str(file), 1, "", message))
            continue
        docs.append(doc)
    inventory = resolve(checker, merge_documents(checker, docs), [str(f) for f in files]) if docs else None
    if checker.problems or inventory is None:
        ordered = sorted(checker.problems, key=lambda p: (p.file, p.line or 0))
        raise InventoryError(ordered or [Problem(str(path), None, "", "nothing to load")])
    log.info(
        "inventory %s: %s, %s, %s",
        ", ".join(map(str, files)),
        plural(len(inventory.hosts), "host"),
        plural(len(inventory.engines), "engine"),
        plural(len(inventory.adapters), "adapter"),
    )
    return inventory


def resolve(c: Checker, doc: LDict, files: list[str]) -> Inventory:
    schema.TOP.check_keys(c, doc, "")
    if "version" in doc and doc["version"] != 1:
        c.add(doc, "version", "version", f"unsupported inventory version {quoted(doc['version'])} (supported: 1)")
    fleet = c.string(doc, "fleet", "") if "fleet" in doc else None
    defaults = read_settings(c, doc.get("defaults"), Spot(doc, "defaults", "defaults"), schema.SETTINGS)
    base_models = read_base_models(c, doc)
    tenants_raw = doc.get("tenants")
    tenant_names = set(tenants_raw) if isinstance(tenants_raw, dict) else None
    hosts = read_hosts(c, doc, defaults, base_models)
    discovery, kube = read_discovery(c, doc, defaults, base_models, {h.name for h in hosts})
    adapters = read_adapters(c, doc, base_models, tenant_names)
    tenants = read_tenants(c, doc, declared_adapters(doc) | set(adapters))
    logs = read_gateway(c, doc)
    return Inventory(
        fleet=None if fleet is INVALID else fleet,
        sources=tuple(files),
        base_models=base_models,
        hosts=tuple(hosts),
        adapters=adapters,
        tenants=tenants,
        gateway_logs=tuple(logs),
        warnings=tuple(
            cross_warnings([*(e for h in hosts for e in h.engines), *(g.template for g in discovery)], adapters)
        ),
        discovery=discovery,
        kube=kube,
    )


def cross_warnings(engines: list[Engine], adapters: dict[str, Adapter]) -> list[str]:
    """Adapters no engine can ever serve (listed or discovered): valid, but worth saying."""
    top_rank: dict[str, float] = {}  # base model -> the highest rank an engine of it accepts
    for engine in engines:
        rank = math.inf if engine.max_lora_rank is None else engine.max_lora_rank
        top_rank[engine.base_model] = max(rank, top_rank.get(engine.base_model, 0))
    warnings = []
    for adapter in adapters.values():
        if adapter.base_model not in top_rank:
            warnings.append(f"adapter {adapter.id}: no engine serves base model {adapter.base_model}")
            continue
        if adapter.rank > top_rank[adapter.base_model]:
            warnings.append(
                f"adapter {adapter.id}: rank {adapter.rank} exceeds max_lora_rank on every engine of "
                f"{adapter.base_model}"
            )
    return warnings
