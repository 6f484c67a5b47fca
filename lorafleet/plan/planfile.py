"""The plan file: versioned YAML that `warm --plan`, `replay --plan` and the daemon start from, line-checked
against the inventory when read; and what moving from one plan to another would load and drop."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from lorafleet.errors import InputError, InventoryError, Problem
from lorafleet.inventory.fields import INVALID, Checker, describe, quoted
from lorafleet.inventory.model import Inventory
from lorafleet.inventory.yamlsource import LDict, LList, load_yaml
from lorafleet.plan.window import Demand
from lorafleet.policy.placement import Placement, PlannedResidency, why_not

PLAN_VERSION = 1


def plan_document(inventory: Inventory, plan: PlannedResidency, demand: Demand, clock: datetime | None = None) -> str:
    engines: dict[str, list[dict[str, Any]]] = {e.key: [] for e in inventory.engines}
    for p in plan.placements:
        engines[p.engine].append({"adapter": p.adapter, "pinned": p.pinned})
    doc = {
        "version": PLAN_VERSION,
        "fleet": inventory.fleet,
        "created": (clock or datetime.now(UTC)).isoformat(timespec="seconds"),
        "window_s": demand.window_s,
        "expected_hit_ratio": round(plan.expected_hit_ratio, 6),
        "engines": engines,
        "unplaced": [{"adapter": a, "reason": r} for a, r in plan.unplaced],
    }
    header = "# lorafleet residency plan (lorafleet plan --out); read by `warm --plan`, `replay --plan`, the daemon.\n"
    return header + yaml.safe_dump(doc, sort_keys=False, width=120)


def write_plan(path: Path, text: str, force: bool) -> None:
    if path.exists() and not force:
        raise InputError(f"refusing to overwrite {path}", hint="choose another --out, or pass --force")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot write {path}: {exc.strerror or exc}") from exc


def read_plan(path: str | Path, inventory: Inventory) -> PlannedResidency:
    """A plan file, checked against this inventory: every problem with its file and line, exit 2."""
    path = Path(path)
    doc, problems = load_yaml(path)
    c = Checker()
    c.problems = problems
    placements: list[Placement] = []
    unplaced: list[tuple[str, str]] = []
    ratio = 0.0
    if doc is not None and not isinstance(doc, LDict):
        message = f"expected a plan (a mapping), got {describe(doc, show_text=False)}"
        c.problems.append(Problem(str(path), 1, "", message))
    elif isinstance(doc, LDict):
        c.keys(doc, "", ("version", "fleet", "created", "window_s", "expected_hit_ratio", "engines", "unplaced"))
        if doc.get("version") != PLAN_VERSION:
            message = f"unknown plan version {quoted(doc.get('version'))} (this lorafleet reads version {PLAN_VERSION})"
            c.add(doc, "version" if "version" in doc else None, "version", message)
        elif inventory.fleet is not None and doc.get("fleet") not in (None, inventory.fleet):
            c.add(doc, "fleet", "fleet", f"written for fleet {quoted(doc.get('fleet'))}, not {quoted(inventory.fleet)}")
        else:
            if "expected_hit_ratio" in doc:
                got = c.number(doc, "expected_hit_ratio", "", positive=False, maximum=1.0)
                ratio = 0.0 if got is INVALID else float(got)
            placements = _placements(c, doc, inventory)
            rows = doc.get("unplaced") or []
            if not isinstance(rows, list):
                c.add(doc, "unplaced", "unplaced", f"expected a list of adapters, got {describe(rows)}")
                rows = []
            unplaced = [(str(u.get("adapter")), str(u.get("reason"))) for u in rows if isinstance(u, dict)]
    if c.problems:
        raise InventoryError(sorted(c.problems, key=lambda p: (p.file, p.line or 0)), what=f"the plan {path}")
    return PlannedResidency(tuple(placements), tuple(unplaced), ratio)


def _placements(c: Checker, doc: LDict, inventory: Inventory) -> list[Placement]:
    engines = c.mapping(doc.get("engines"), doc, "engines", "engines")
    out: list[Placement] = []
    for key, rows in (engines or {}).items():
        path = f"engines.{key}"
        if inventory.engine(str(key)) is None:
            c.add(engines, key, path, f"{quoted(key)} is not an engine of this inventory (written for another fleet?)")
            continue
        if not isinstance(rows, LList):
            c.add(engines, key, path, f"expected a list of adapters, got {describe(rows)}")
            continue
        for i, row in enumerate(rows):
            m = c.mapping(row, rows, i, f"{path}[{i}]")
            if m is None:
                continue
            adapter = m.get("adapter")
            if not isinstance(adapter, str) or adapter not in inventory.adapters:
                c.add(
                    m,
                    "adapter" if "adapter" in m else None,
                    f"{path}[{i}].adapter",
                    f"{quoted(adapter)} is not an adapter of this inventory",
                )
                continue
            pinned = m.get("pinned", False)
            if not isinstance(pinned, bool):  # `bool("false")` is True
                c.add(m, "pinned", f"{path}[{i}].pinned", f"expected true or false, got {describe(pinned)}")
                continue
            engine = inventory.engine(str(key))
            assert engine is not None
            reason = why_not(inventory.adapters[adapter], engine)
            if reason is not None:  # the engine changed since the plan was written: its loads would be refused
                c.add(m, "adapter", f"{path}[{i}].adapter", reason)
                continue
            out.append(Placement(adapter, str(key), pinned))
    return out


def diff_plans(old: PlannedResidency, new: PlannedResidency) -> tuple[list[Placement], list[Placement]]:
    """(loads, evictions): what moving from `old` to `new` would load and drop, engine by engine."""
    before = {(p.engine, p.adapter) for p in old.placements}
    after = {(p.engine, p.adapter) for p in new.placements}
    return (
        [p for p in new.placements if (p.engine, p.adapter) not in before],
        [p for p in old.placements if (p.engine, p.adapter) not in after],
    )
