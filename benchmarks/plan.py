"""Plan time for a big fleet, and the plan's expected hit ratio against what replay then measures.

    python benchmarks/plan.py [--adapters 10000] [--engines 1000] [--families zipf-1.0,drift-slow,...]

Goal: 10,000 adapters x 1,000 engines planned in under 2 s on one core. Then, on several families of the
evaluation suite (seed 3), the plan's expected hit ratio (share of the window's demand whose adapter is placed)
beside the hit ratio replay measures when the lorafleet policy starts from that plan on the same traffic.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from tracegen import FAMILIES, Family, build, fleet  # noqa: E402

from lorafleet.plan.planner import plan_residency  # noqa: E402
from lorafleet.plan.window import demand_from_events  # noqa: E402
from lorafleet.replay.driver import simulate  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--adapters", type=int, default=10_000)
    parser.add_argument("--engines", type=int, default=1_000)
    parser.add_argument("--families", default="zipf-1.0,zipf-1.3,drift-slow,workflow-undeclared,many-slots")
    args = parser.parse_args()
    family = Family("big", adapters=args.adapters, engines=args.engines, tenants=200, slots=8, kind="mixed")
    rng = random.Random(1)
    owners = [f"t{rng.randrange(200):03d}" for _ in range(args.adapters)]
    inventory = fleet(family, owners, {})
    rates = {a: rng.paretovariate(1.1) for a in inventory.adapters}
    started = time.perf_counter()
    planned = plan_residency(inventory, rates, max_replicas=3)
    took = time.perf_counter() - started
    print(
        f"plan of {args.adapters:,} adapters x {args.engines:,} engines: {took:.2f} s "
        f"(goal < 2 s: {'met' if took < 2 else 'NOT met'}); {len(planned.placements):,} placements, "
        f"{len(planned.unplaced):,} unplaced, expected hit ratio {planned.expected_hit_ratio:.1%}"
    )
    print("family                expected (plan)   replayed (lorafleet from the plan)   replayed (lru)")
    for f in FAMILIES:
        if f.name not in args.families.split(","):
            continue
        inv, events = build(replace(f), 3)
        demand = demand_from_events(events, window_s=1e12)
        plan = plan_residency(inv, demand.rates, max_replicas=3)
        ours = simulate(inv, "lorafleet", events, plan=plan.placements).hit_ratio
        lru = simulate(inv, "lru", events).hit_ratio
        print(f"{f.name:<22}{plan.expected_hit_ratio:>10.1%}{ours:>25.1%}{lru:>26.1%}")


if __name__ == "__main__":
    main()
