"""Judge the policies on an independent trace generator: the second (tracegen2.py) or the third (tracegen3.py).

    python benchmarks/judge.py [--generator 2|3] [--seeds tune|report] [--families a,b] [--policies lru,...] [--json]
    python benchmarks/judge.py --durations [...]   # each line written at its request's end (durations.py)
    python benchmarks/judge.py --hints [...]       # ... and each request's start hinted to lorafleet as it comes
    python benchmarks/judge.py --closed-loop [...] # durations, each tenant's next request after its last one's end

Every policy replays each family's trace on each seed (lorafleet.replay.driver.simulate, empty engines). Per
family: each policy's mean hit ratio over the seeds, the best baseline (by mean), lorafleet's margin over the
best baseline of each seed in points (mean and worst seed), its margin over lru, its touches per adapter
request and loader utilisation, and the family's wall time; worst mean margin first, then the mean margin over
families; the title line names the generator.

`--generator 2` (the default) is the second generator, written apart from tracegen.py: tune on `--seeds tune`
(TUNE2) only; `--seeds report` (REPORT2, the default) gives the figures. `--generator 3` is the third, written by
a separate session after the policy's choices, each shape chosen to look for a loss: for reporting only, it has
no tune seeds (REPORT3).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from durations import add_arguments, described, timed, timing  # noqa: E402
from tracegen2 import FAMILIES2, REPORT2, TUNE2, Trace  # noqa: E402
from tracegen3 import FAMILIES3, REPORT3  # noqa: E402

from lorafleet.drive.policies import BASELINES  # noqa: E402
from lorafleet.replay.driver import HINTS, LOG, PolicyResult, simulate  # noqa: E402

Families = dict[str, Callable[[int], Trace | None]]
# generator -> (its module's name, its families, its seeds by name); the third has no tune seeds
GENERATORS: dict[str, tuple[str, Families, dict[str, tuple[int, ...]]]] = {
    "2": ("tracegen2", FAMILIES2, {"tune": TUNE2, "report": REPORT2}),
    "3": ("tracegen3", FAMILIES3, {"report": REPORT3}),
}
SEEDS = GENERATORS["2"][2]
DEFAULT_POLICIES = ("lru", "lfu", "arc", "wtinylfu", "markov", "lorafleet")
OURS = "lorafleet"


def judge_family(
    name: str,
    seeds: tuple[int, ...],
    policies: tuple[str, ...],
    durations: str = "",
    visibility: str = LOG,
    families: Families = FAMILIES2,
) -> dict[str, Any] | None:
    started = time.perf_counter()
    runs: dict[str, list[PolicyResult]] = {p: [] for p in policies}
    requests = []
    for seed in seeds:
        trace = families[name](seed)
        if trace is None:
            return None
        inventory, events = trace
        if durations:
            events = timed(events, seed, durations)
        requests.append(len(events))
        known: list[PolicyResult] = []
        for policy in sorted(policies, key=lambda p: p == "oracle"):  # the oracle reuses the others' runs
            result = simulate(inventory, policy, events, known=known, visibility=visibility)
            known.append(result)
            runs[policy].append(result)
    row: dict[str, Any] = {
        "family": name,
        "seeds": list(seeds),
        "requests": statistics.mean(requests),
        "hit_ratio": {p: statistics.mean(r.hit_ratio for r in runs[p]) for p in policies},
        "hit_ratio_per_seed": {p: [r.hit_ratio for r in runs[p]] for p in policies},
    }
    baselines = [p for p in policies if p in BASELINES]
    if baselines:
        row["best_baseline"] = max(baselines, key=lambda p: row["hit_ratio"][p])
    if OURS in runs and baselines:
        ours = runs[OURS]
        margins = [(r.hit_ratio - max(runs[b][i].hit_ratio for b in baselines)) * 100 for i, r in enumerate(ours)]
        row["margin_mean"] = statistics.mean(margins)
        row["margin_worst"] = min(margins)
        row["margin_per_seed"] = margins
        if "lru" in runs:
            row["vs_lru"] = statistics.mean((r.hit_ratio - runs["lru"][i].hit_ratio) * 100 for i, r in enumerate(ours))
        row["touches_per_request"] = sum(r.touches for r in ours) / max(1, sum(r.requests for r in ours))
        row["loader_utilization"] = statistics.mean(r.loader_utilization for r in ours)
    row["wall_s"] = time.perf_counter() - started
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--generator",
        choices=sorted(GENERATORS),
        default="2",
        help="the trace generator: 2 = tracegen2 (default), 3 = tracegen3 (adversarial, report seeds only)",
    )
    parser.add_argument("--seeds", choices=sorted(SEEDS), default="report")
    parser.add_argument("--families", help="comma-separated family names (default: all)")
    parser.add_argument("--policies", default=",".join(DEFAULT_POLICIES), help="comma-separated policy names")
    parser.add_argument("--json", action="store_true", help="one JSON document instead of the table")
    add_arguments(parser)
    args = parser.parse_args()
    args.durations = timing(args)
    visibility = HINTS if args.hints else LOG
    generator, families, seed_sets = GENERATORS[args.generator]
    if args.seeds not in seed_sets:
        parser.error(
            f"the third generator ({generator}) has no {args.seeds} seeds: it is for reporting only, "
            f"never tuned on; use --seeds {' or '.join(seed_sets)}"
        )
    seeds = seed_sets[args.seeds]
    policies = tuple(p.strip() for p in args.policies.split(",") if p.strip())
    names = args.families.split(",") if args.families else list(families)
    unknown = [n for n in names if n not in families]
    if unknown:
        parser.error(f"unknown families {', '.join(unknown)} (known: {', '.join(families)})")
    started = time.perf_counter()
    rows, skipped = [], []
    for name in names:
        row = judge_family(name, seeds, policies, args.durations, visibility, families)
        if row is None:
            skipped.append(name)
            if not args.json:
                print(f"{name}: trace data not present, skipped", file=sys.stderr)
            continue
        rows.append(row)
        if not args.json:
            print(f"  {name}: {row['wall_s']:.1f} s", file=sys.stderr)
    rows.sort(key=lambda r: r.get("margin_mean", 0.0))
    margins = [r["margin_mean"] for r in rows if "margin_mean" in r]
    summary = {
        "seeds": args.seeds,
        "seed_values": list(seeds),
        "durations": args.durations,
        "visibility": visibility,
        "policies": list(policies),
        "families": rows,
        "skipped": skipped,
        "mean_margin": statistics.mean(margins) if margins else None,
        "worst_margin_mean": min(margins) if margins else None,
        "worst_margin_seed": min((r["margin_worst"] for r in rows if "margin_worst" in r), default=None),
        "wall_s": time.perf_counter() - started,
    }
    summary = {"generator": generator, **summary}
    if args.json:
        print(json.dumps(summary, indent=2))
        return
    lines = "lines at each request's end" if args.durations else "lines at arrival"
    lines += described(args)
    print(f"{generator}, seeds {', '.join(map(str, seeds))} ({args.seeds}), {lines}; hit ratio % per policy, mean")
    head = ["family", *policies, "best", "margin", "worst", "vs lru", "touch/req", "loader", "wall s"]
    first = max([20, *(len(r["family"]) for r in rows)])  # the third generator's names run longer than 20
    widths = [max(first, len(h)) if i == 0 else max(7, len(h)) for i, h in enumerate(head)]
    print("  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(head, widths, strict=True))))
    for r in rows:
        cells = [r["family"], *(f"{r['hit_ratio'][p] * 100:.1f}" for p in policies)]
        cells.append(r.get("best_baseline", "-"))
        cells += [f"{r[k]:+.1f}" if k in r else "-" for k in ("margin_mean", "margin_worst", "vs_lru")]
        cells.append(f"{r['touches_per_request']:.3f}" if "touches_per_request" in r else "-")
        cells.append(f"{r['loader_utilization'] * 100:.0f}%" if "loader_utilization" in r else "-")
        cells.append(f"{r['wall_s']:.1f}")
        print(
            "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True)))
        )
    if margins:
        print(
            f"lorafleet - best baseline: mean margin {summary['mean_margin']:+.1f} points "
            f"over {len(margins)} families; "
            f"worst family mean {summary['worst_margin_mean']:+.1f}, worst seed {summary['worst_margin_seed']:+.1f}"
        )
    print(f"(judge took {summary['wall_s']:.0f} s)")


if __name__ == "__main__":
    main()
