"""Where lorafleet's replay time goes: each of its experts replayed alone, beside lorafleet, in µs per request.

    python benchmarks/expert_cost.py [--families a,b] [--seed 3] [--repeat 2]

lorafleet runs every expert (drive/leader.py: the predictor, the five baselines, the eager predictor) on its own
simulated copy of the fleet, beside the live session and, once the lead has changed, the leader's twin: its cost
per request is about the sum of theirs. This prints, per family (one seed of the suite's), each expert's cost
replayed alone on the replay kernel's session, their sum, lorafleet's own (`simulate`, the whole replay), and what
is left over (the live session, the twin, the standings): the figures a leaner kernel must bring down, expert by
expert, for the throughput issue's 50k requests/s (20 µs a request for all of it). Each figure is the fastest of
`--repeat` runs (a busy machine only ever slows a run down). Default families: the suite's slowest for lorafleet.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from follow_gap import alone  # noqa: E402
from suite import traces  # noqa: E402

from lorafleet import CORE  # noqa: E402
from lorafleet.drive.leader import default_experts  # noqa: E402
from lorafleet.inventory.model import Inventory  # noqa: E402
from lorafleet.policy.core import Policy  # noqa: E402
from lorafleet.policy.events import RequestEvent  # noqa: E402
from lorafleet.replay.driver import in_arrival_order, simulate  # noqa: E402

SLOWEST = ("periodic-aligned", "workflow-undeclared", "zipf-0.6")  # lorafleet's slowest families (docs/benchmarks.md)


def alone_us(inventory: Inventory, make: Callable[[], Policy], events: Sequence[RequestEvent]) -> float:
    """µs per request of one expert's policy on its own simulated session (`follow_gap.alone`: replay's kernel, as
    each expert's copy runs inside lorafleet), start and finish included."""
    started = time.perf_counter()
    alone(inventory, make, events)
    return (time.perf_counter() - started) / len(events) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", help="comma-separated suite family names (default: the slowest three)")
    parser.add_argument("--seed", type=int, default=3, help="one of the suite's seeds (default 3, a report seed)")
    parser.add_argument("--repeat", type=int, default=2, help="runs per figure; the fastest counts")
    args = parser.parse_args()
    chosen = args.families.split(",") if args.families else list(SLOWEST)
    found = traces(set(chosen))
    experts = default_experts(())
    names = [name.replace("predictive", "pred") for name, _ in experts]
    print(f"seed {args.seed}, core {CORE}: µs per request, fastest of {args.repeat}")
    print(f"{'family':<22} " + " ".join(f"{n:>10}" for n in names) + f" {'sum':>8} {'lorafleet':>10} {'rest':>8}")
    for family in chosen:
        make_trace = found.get(family)
        trace = make_trace(args.seed) if make_trace is not None else None
        if trace is None:
            print(f"{family:<22} not a suite family here, or its trace data is not present: skipped")
            continue
        inventory, drawn = trace
        events = in_arrival_order(drawn)
        costs = [min(alone_us(inventory, make, events) for _ in range(args.repeat)) for _, make in experts]
        ours = min(1e6 / simulate(inventory, "lorafleet", events).requests_per_s for _ in range(args.repeat))
        total = sum(costs)
        cells = " ".join(f"{c:10.1f}" for c in costs)
        print(f"{family:<22} {cells} {total:8.1f} {ours:10.1f} {ours - total:8.1f}")


if __name__ == "__main__":
    main()
