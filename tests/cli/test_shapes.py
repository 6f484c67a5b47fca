"""Each `--json` shape is documented where it is built, and the document matches what is printed."""

from __future__ import annotations

import re
from typing import Any

from lorafleet.actions.runner import WarmResult
from lorafleet.cli import shapes
from lorafleet.daemon.journaling import Summary
from lorafleet.inventory import load_inventory
from lorafleet.logs.records import LogTally
from lorafleet.plan.flags import recommend_flags
from lorafleet.plan.planner import plan_residency
from lorafleet.plan.report import PlanReport, Sizing
from lorafleet.plan.window import Demand
from lorafleet.probe.snapshot import GpuInfo, HostVram
from lorafleet.replay.driver import PolicyResult
from lorafleet.store.db import ActionRow
from lorafleet.store.journal import Outcomes
from lorafleet.store.stats import ActionTotals, StatsReport, window_of
from tests.conftest import INVENTORIES

TOKEN = re.compile(r'"([^"]+)"|([{}\[\]:,])')


def documented(shape: Any) -> Any:
    """The key structure written in a shape's docstring: {key: None | structure | [structure]}."""
    text = (shape.__doc__ or "").split("`")[3]  # `command --json`: `{...}`
    tokens = [m.group(1) or m.group(2) for m in TOKEN.finditer(text)]
    pos = 0

    def value() -> Any:
        nonlocal pos
        if tokens[pos] == "[":
            pos += 1
            inner = value()
            assert tokens[pos] == "]"
            pos += 1
            return [inner]
        assert tokens[pos] == "{", tokens[pos:]
        pos += 1
        out: dict[str, Any] = {}
        while tokens[pos] != "}":
            key = tokens[pos]
            pos += 1
            out[key] = None
            if tokens[pos] == ":":
                pos += 1
                out[key] = value()
            if tokens[pos] == ",":
                pos += 1
        pos += 1
        return out

    return value()


def matches(doc: Any, data: Any, where: str = "$") -> None:
    if doc is None:
        return
    if isinstance(doc, list):
        assert isinstance(data, list), where
        for i, item in enumerate(data):
            matches(doc[0], item, f"{where}[{i}]")
        return
    assert isinstance(data, dict), where
    assert list(data) == list(doc), f"{where}: printed {list(data)}, documented {list(doc)}"
    for key, sub in doc.items():
        matches(sub, data[key], f"{where}.{key}")


def test_every_shape_prints_what_its_docstring_says() -> None:
    inv = load_inventory(INVENTORIES / "reference.yaml")
    gpu = GpuInfo(0, "GPU-1", "H100", 80, 1, 79, None)
    planned = plan_residency(inv, {a: 1.0 for a in inv.adapters})
    advice = recommend_flags(inv, planned, 80.0)[0]
    demand = Demand(86400.0, {}, {}, {}, 0)
    sizing = Sizing(0.9, [(4, 0.95)], 4)
    cases = {
        shapes.inventory_check: (inv,),
        shapes.inventory_show: (inv,),
        shapes.vram: ([HostVram("h", "aws", "ok", None, (gpu,))],),
        shapes.warm: ([WarmResult("a", "h/e", "loaded", True, 1.0)], False),
        shapes.replay: ([PolicyResult(policy="lru", requests=1, hits=1, cold_ms=[0.0])], LogTally(lines=1)),
        shapes.plan: (inv, PlanReport(demand, planned, {}, [advice], ([planned.placements[0]], []), sizing)),
        shapes.daemon: (Summary(requests=2, hits=1), "lorafleet", True, "/tmp/state.db"),
        shapes.stats: (
            StatsReport(
                window_of(0.0, 3600.0),
                Outcomes(requests=2, hits=1),
                ActionTotals(load_ms={"h/e": (1, 5.0, 5.0)}),
                [("t", Outcomes(requests=2, hits=1))],
                {},
                None,
            ),
            10,
            0.5,
            {"t": "gold"},
        ),
        shapes.stats_loads: ([ActionRow("at", "daemon", "a", "h/e", "loaded", True, 1.0, 1, None, "demand")],),
    }
    assert set(cases) == set(shapes.SHAPES)
    for shape, args in cases.items():
        matches(documented(shape), shape(*args))
