"""How much of a seed's margin is the trace's chance path: each policy replayed on copies of one trace that differ
by a few requests dropped near its start.

    python benchmarks/path_noise.py [--generator 1|2|holdout] [--seeds tune|report|holdout] [--families a,b]
                                    [--copies 6] [--drop 10] [--json]

On several engines, and wherever a byte budget binds, which engine an adapter lands on and what it evicts there
depend on everything before: two runs of one policy that part on one request can stay apart for the rest of the
trace (a cache's own path, not its rule). A worst-seed bound compares lorafleet with the best of five baselines,
each one such path, and lorafleet follows a *copy* of the leading baseline whose contents were matched to the live
engines' when it took the lead (drive/leader.py): a different path of the same rule. This script measures the
spread: copy 0 is the trace itself; copy k drops `--drop` requests drawn (seeded by k) from the first tenth of the
trace, and the rest of it is the same requests (a dropped request may break a chain or a rhythm early on, so a copy
is nearly, not exactly, the same traffic). Per seed it prints the margin (lorafleet − best baseline, each copy's
own best) on the trace and its mean, lowest and highest over all copies (the trace included), the standard
deviation over the copies of that best-of-five (which may be a different baseline on each copy) and of lorafleet;
then the seeds worst first by the trace's own margin, and per family the means and worst values of both readings.
`--json` gives every policy's spread too.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from headroom import generator  # noqa: E402

from lorafleet.drive.policies import BASELINES  # noqa: E402
from lorafleet.inventory.model import Inventory  # noqa: E402
from lorafleet.policy.events import RequestEvent  # noqa: E402
from lorafleet.replay.driver import in_arrival_order, simulate  # noqa: E402


def perturbed(events: Sequence[RequestEvent], copy: int, drop: int) -> list[RequestEvent]:
    """Copy 0: the requests as they are; copy k: without `drop` requests drawn (seed k) from the first tenth."""
    ordered = list(in_arrival_order(events))
    if copy == 0:
        return ordered
    head = max(drop, len(ordered) // 10)
    dropped = set(random.Random(copy).sample(range(head), min(drop, head)))
    return [e for i, e in enumerate(ordered) if i not in dropped]


def _sd(values: Sequence[float]) -> float:
    return statistics.stdev(values) if len(values) > 1 else 0.0


def seed_row(inventory: Inventory, events: Sequence[RequestEvent], copies: int, drop: int) -> dict[str, Any]:
    policies = (*BASELINES, "lorafleet")
    hits: dict[str, list[float]] = {p: [] for p in policies}  # per policy, its hit ratio on each copy
    for copy in range(copies):
        run = perturbed(events, copy, drop)
        for p in policies:
            hits[p].append(simulate(inventory, p, run).hit_ratio * 100)
    bests = [max(on_copy) for on_copy in zip(*(hits[b] for b in BASELINES), strict=True)]
    margins = [ours - best for ours, best in zip(hits["lorafleet"], bests, strict=True)]
    return {
        "margin": margins[0],
        "margin_mean": statistics.mean(margins),
        "margin_low": min(margins),
        "margin_high": max(margins),
        "best_sd": _sd(bests),
        "sd": {p: _sd(v) for p, v in hits.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--generator", choices=("1", "2", "holdout"), default="2")
    parser.add_argument("--seeds", choices=("tune", "report", "holdout"))
    parser.add_argument("--families", help="comma-separated family names (default: all)")
    parser.add_argument("--copies", type=int, default=6, help="the trace itself and copies-1 perturbed copies")
    parser.add_argument("--drop", type=int, default=10, help="requests dropped from the first tenth of each copy")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    families, seeds = generator(args.generator, args.seeds)
    wanted = set(args.families.split(",")) if args.families else None
    rows: list[dict[str, Any]] = []
    for name, make in families.items():
        if wanted is not None and name not in wanted:
            continue
        for seed in seeds:
            trace = make(seed)
            if trace is None:
                print(f"{name}: skipped (its source traces are not in ../shared/data/traces)", file=sys.stderr)
                break
            row = {"family": name, "seed": seed, **seed_row(*trace, copies=args.copies, drop=args.drop)}
            rows.append(row)
            if not args.json:
                print(
                    f"{name:24s} {seed:4d}  margin {row['margin']:+6.2f}  over copies mean {row['margin_mean']:+6.2f}"
                    f"  low {row['margin_low']:+6.2f}  high {row['margin_high']:+6.2f}  best-of-five sd"
                    f" {row['best_sd']:.2f}  lorafleet sd {row['sd']['lorafleet']:.2f}",
                    flush=True,
                )
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print("\nworst seeds first (by the trace's own margin):")
    for row in sorted(rows, key=lambda r: r["margin"]):
        print(
            f"  {row['family']:24s} {row['seed']:4d}  {row['margin']:+6.2f}  copies {row['margin_low']:+6.2f} .."
            f" {row['margin_high']:+6.2f} (mean {row['margin_mean']:+6.2f})"
        )
    print("\nper family (traces: mean / worst seed; copies: mean / worst run; sd: best-of-five, lorafleet):")
    means = []
    for name in dict.fromkeys(r["family"] for r in rows):
        mine = [r for r in rows if r["family"] == name]
        on_traces = statistics.mean(r["margin"] for r in mine)
        over_copies = statistics.mean(r["margin_mean"] for r in mine)
        means.append((on_traces, over_copies))
        print(
            f"  {name:24s} traces {on_traces:+6.2f} / {min(r['margin'] for r in mine):+6.2f}"
            f"  copies {over_copies:+6.2f} / {min(r['margin_low'] for r in mine):+6.2f}"
            f"  sd {statistics.mean(r['best_sd'] for r in mine):.2f}"
            f" {statistics.mean(r['sd']['lorafleet'] for r in mine):.2f}"
        )
    if means:
        print(
            f"mean over families: traces {statistics.mean(m for m, _ in means):+.2f},"
            f" copies {statistics.mean(c for _, c in means):+.2f}"
        )


if __name__ == "__main__":
    main()
