"""What following costs: each of lorafleet's experts replayed alone, beside lorafleet, per family.

    python benchmarks/follow_gap.py [--generator 1|2|3] [--seeds tune|report] [--families a,b] [--json]

lorafleet follows whichever of its experts (drive/leader.py: the predictor, the five baselines, the eager
predictor) has been doing best; the standings' hysteresis bounds what that costs against any one of them. This
prints, per family (mean over seeds), every expert's hit ratio replayed alone on the simulated engines as replay
runs it, lorafleet's, every request known on arrival (a family whose lines come at each request's end is taken at
its arrivals here), the best expert and lorafleet's gap to it: where the gap is small and
lorafleet still trails a baseline, the expert it follows is itself behind (look at the predictor's column); where
the gap is large, the following is what loses (warm-up before the lead passes, experts close enough to take
turns). Worst gap first.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from lorafleet.drive.leader import default_experts  # noqa: E402
from lorafleet.drive.session import Session  # noqa: E402
from lorafleet.inventory.model import Inventory  # noqa: E402
from lorafleet.policy.core import Policy, PolicyCore  # noqa: E402
from lorafleet.policy.events import RequestEvent  # noqa: E402
from lorafleet.replay.driver import in_arrival_order, simulate  # noqa: E402

OURS = "lorafleet"
Trace = tuple[Inventory, list[RequestEvent]]


def alone(inventory: Inventory, make: Callable[[], Policy], events: Sequence[RequestEvent]) -> float:
    """One expert's policy on its own simulated session, every request known on arrival (replay's kernel)."""
    session = Session(PolicyCore(inventory, make()), simulate=True, answers=False)
    session.start(events[0].time)
    for event in events:
        session.request(event)
    session.finish()
    return session.counts.hit_ratio


def generator(number: str, seeds: str) -> tuple[dict[str, Callable[[int], Trace | None]], tuple[int, ...]]:
    """The generator's families and the seeds asked for (the third has report seeds only)."""
    if number == "1":
        from suite import SEEDS, traces

        return dict(traces(None)), SEEDS[seeds]
    if number == "2":
        from tracegen2 import FAMILIES2, REPORT2, TUNE2

        return dict(FAMILIES2), {"tune": TUNE2, "report": REPORT2}[seeds]
    from tracegen3 import FAMILIES3, REPORT3

    if seeds != "report":
        raise SystemExit("the third generator has report seeds only: it is for reporting")
    return dict(FAMILIES3), REPORT3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--generator", choices=("1", "2", "3"), default="1")
    parser.add_argument("--seeds", choices=("tune", "report"), default="tune")
    parser.add_argument("--families", help="comma-separated family names (default: all)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    families, seeds = generator(args.generator, args.seeds)
    chosen = set(args.families.split(",")) if args.families else None
    experts = default_experts(())
    names = [name for name, _ in experts]
    rows: list[dict[str, Any]] = []
    for family, make_trace in families.items():
        if chosen is not None and family not in chosen:
            continue
        ratios: dict[str, list[float]] = {name: [] for name in [*names, OURS]}
        for seed in seeds:
            trace = make_trace(seed)
            if trace is None:
                break
            inventory, drawn = trace
            # Every request known on arrival, lorafleet's too: a family whose lines come at each request's end
            # (`seen`) would have lorafleet learn late and the experts alone not.
            events = [dataclasses.replace(e, seen=None) for e in in_arrival_order(drawn)]
            for name, make in experts:
                ratios[name].append(alone(inventory, make, events) * 100)
            ratios[OURS].append(simulate(inventory, OURS, events).hit_ratio * 100)
        if not ratios[OURS]:
            continue
        means = {name: statistics.mean(values) for name, values in ratios.items()}
        best = max(names, key=means.__getitem__)
        rows.append({"family": family, "hit_ratio": means, "best_expert": best, "gap": means[OURS] - means[best]})
    rows.sort(key=lambda r: r["gap"])
    if args.json:
        print(json.dumps({"generator": args.generator, "seeds": list(seeds), "families": rows}, indent=1))
        return
    print(f"generator {args.generator}, seeds {', '.join(map(str, seeds))}; hit ratio % per expert alone, mean")
    labels = [n.replace("predictive", "pred") for n in [*names, OURS]]  # the eager predictor: pred-eager
    print(f"{'family':<26} " + " ".join(f"{n:>10}" for n in labels) + f" {'best':>16} {'gap':>6}")
    for r in rows:
        cells = " ".join(f"{r['hit_ratio'][n]:10.2f}" for n in [*names, OURS])
        print(f"{r['family']:<26} {cells} {r['best_expert']:>16} {r['gap']:+6.2f}")
    if rows:
        print(f"mean gap {statistics.mean(r['gap'] for r in rows):+.2f} points over {len(rows)} families")


if __name__ == "__main__":
    main()
