"""How much is left to win, and where: each family's best baseline, lorafleet and `belady` (Belady's MIN alone:
the future known, nothing loaded ahead) at the default touch budget and with touches unlimited.

    python benchmarks/headroom.py [--generator 1|2] [--seeds tune|report] [--families a,b] [--json]

Per family, mean over the seeds, in hit-ratio points: lru, the best baseline (per seed), lorafleet, belady, and
belady and lorafleet with an unlimited touch budget. `belady − best` is what a better eviction order could still
win at these slots; lorafleet above belady is won by loading ahead. On vLLM an eviction the policy chooses costs
touches (the n-th least recently used takes n − 1), so the two unlimited columns show what the touch budget
holds back. Rows come worst first by lorafleet's margin over belady. Choices are made on the first generator's
tune seeds only (`--generator 1 --seeds tune`); the rest are for reporting.
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

import suite  # noqa: E402
from tracegen2 import FAMILIES2, REPORT2, TUNE2  # noqa: E402

from lorafleet.drive.policies import BASELINES  # noqa: E402
from lorafleet.inventory.model import Inventory  # noqa: E402
from lorafleet.policy.events import RequestEvent  # noqa: E402
from lorafleet.replay.driver import simulate  # noqa: E402

UNLIMITED = 1e9  # touches per request: never the binding constraint
Trace = tuple[Inventory, list[RequestEvent]]


def generator(which: str, seeds: str | None) -> tuple[dict[str, Callable[[int], Trace | None]], tuple[int, ...]]:
    """The trace families of `which` (1, 2 or holdout: the first generator's held-out families) and the seeds asked
    for (default: report, or holdout for the holdout families)."""
    if which == "2":
        if seeds not in (None, "tune", "report"):
            raise SystemExit(f"{Path(sys.argv[0]).name}: the second generator has tune and report seeds only")
        return dict(FAMILIES2), {"tune": TUNE2, "report": REPORT2}[seeds or "report"]
    holdout = which == "holdout"
    return suite.traces(None, holdout=holdout), suite.SEEDS[seeds or ("holdout" if holdout else "report")]


def family_row(name: str, make: Callable[[int], Trace | None], seeds: tuple[int, ...]) -> dict[str, Any] | None:
    per_seed: list[dict[str, float]] = []
    for seed in seeds:
        trace = make(seed)
        if trace is None:
            return None
        inventory, events = trace
        hit = {p: simulate(inventory, p, events).hit_ratio * 100 for p in (*BASELINES, "lorafleet", "belady")}
        hit["best"] = max(hit[b] for b in BASELINES)
        for policy in ("belady", "lorafleet"):
            hit[f"{policy} unlimited"] = simulate(inventory, policy, events, touch_budget=UNLIMITED).hit_ratio * 100
        per_seed.append(hit)
    mean = {k: statistics.mean(s[k] for s in per_seed) for k in per_seed[0]}
    return {
        "family": name,
        "lru": mean["lru"],
        "best": mean["best"],
        "lorafleet": mean["lorafleet"],
        "belady": mean["belady"],
        "belady_unlimited": mean["belady unlimited"],
        "lorafleet_unlimited": mean["lorafleet unlimited"],
        "belady_over_best": mean["belady"] - mean["best"],
        "lorafleet_over_belady": mean["lorafleet"] - mean["belady"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--generator", choices=("1", "2"), default="2")
    parser.add_argument("--seeds", choices=("tune", "report"), default="report")
    parser.add_argument("--families", help="comma-separated family names (default: all)")
    parser.add_argument("--json", action="store_true", help="one JSON document instead of the table")
    args = parser.parse_args()
    families, seeds = generator(args.generator, args.seeds)
    chosen = args.families.split(",") if args.families else list(families)
    unknown = [n for n in chosen if n not in families]
    if unknown:
        parser.error(f"unknown families {', '.join(unknown)} (known: {', '.join(families)})")
    started = time.perf_counter()
    rows = [row for name in chosen if (row := family_row(name, families[name], seeds)) is not None]
    rows.sort(key=lambda r: r["lorafleet_over_belady"])
    summary = {
        "generator": args.generator,
        "seeds": list(seeds),
        "families": rows,
        "mean_belady_over_best": statistics.mean(r["belady_over_best"] for r in rows) if rows else None,
        "mean_lorafleet_over_best": statistics.mean(r["lorafleet"] - r["best"] for r in rows) if rows else None,
        "wall_s": time.perf_counter() - started,
    }
    if args.json:
        print(json.dumps(summary, indent=2))
        return
    print(f"generator {args.generator}, seeds {', '.join(map(str, seeds))}: hit ratio %, mean over seeds")
    print(
        f"{'family':<22} {'lru':>6} {'best':>6} {'lorafleet':>9} {'belady':>7} {'belady-best':>11} "
        f"{'lf-belady':>9} {'belady∞':>8} {'lorafleet∞':>10}"
    )
    for r in rows:
        print(
            f"{r['family']:<22} {r['lru']:>6.1f} {r['best']:>6.1f} {r['lorafleet']:>9.1f} {r['belady']:>7.1f} "
            f"{r['belady_over_best']:>+11.1f} {r['lorafleet_over_belady']:>+9.1f} {r['belady_unlimited']:>8.1f} "
            f"{r['lorafleet_unlimited']:>10.1f}"
        )
    if rows:
        print(
            f"mean over {len(rows)} families: belady − best baseline {summary['mean_belady_over_best']:+.1f}, "
            f"lorafleet − best baseline {summary['mean_lorafleet_over_best']:+.1f} "
            f"(∞: touches unlimited) ({summary['wall_s']:.0f} s)"
        )


if __name__ == "__main__":
    main()
