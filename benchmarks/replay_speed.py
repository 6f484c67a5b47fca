"""Replay speed per suite family: requests per second of `lorafleet` (whole simulation included) on one core.

    python benchmarks/replay_speed.py [--seeds report|tune|all] [--policy lorafleet] [--families a,b]

Run it alone on a quiet machine: the evaluation suite's own speed figure is taken while it does other work.
Each seed is replayed `--repeat` times and its fastest run counts (a busy machine only ever slows a run down).
Prints each family's slowest and median seed, and the slowest overall.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from suite import SEEDS, traces  # noqa: E402

from lorafleet import COMPILED_CORE  # noqa: E402
from lorafleet.replay.driver import simulate  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", choices=sorted(SEEDS), default="report")
    parser.add_argument("--policy", default="lorafleet")
    parser.add_argument("--families", help="comma-separated family names (default: all)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per seed; the fastest counts (noise only slows)")
    args = parser.parse_args()
    chosen = set(args.families.split(",")) if args.families else None
    slowest: list[tuple[float, str]] = []
    core = "compiled" if COMPILED_CORE else "plain source"
    print(f"{args.policy}, seeds {args.seeds}, core {core}: requests/s per family (slowest seed, median)")
    for name, make in traces(chosen).items():
        speeds = []
        for seed in SEEDS[args.seeds]:
            trace = make(seed)
            if trace is None:
                break
            inventory, events = trace
            speeds.append(max(simulate(inventory, args.policy, events).requests_per_s for _ in range(args.repeat)))
        if not speeds:
            print(f"  {name:<22} trace data not present, skipped")
            continue
        slowest.append((min(speeds), name))
        print(f"  {name:<22} {min(speeds):>9,.0f} {statistics.median(speeds):>9,.0f}")
    if slowest:
        low, name = min(slowest)
        print(f"slowest: {low:,.0f} req/s ({name})")


if __name__ == "__main__":
    main()
