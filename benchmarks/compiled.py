"""The compiled core against its plain source: the same counts, and how much faster (replay requests per second).

    python benchmarks/compiled.py [--seed-set tune|report] [--requests 4000] [--repeat 2] [--families a,b]

Each family of both generators (its set's first seed; the first `--requests` requests) is replayed with lru and
lorafleet three ways: lines at arrival, lines at each request's end (durations.py), start hints. Two processes
replay them, one running the core as installed (compiled by setup.py) and one from source (`LORAFLEET_PURE=1`),
one after the other; every count of every run must be equal, and each run's speed is the fastest of `--repeat`.
Needs an install that compiled the core (a C compiler and Python's headers at install time).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from durations import DRAWN, timed  # noqa: E402
from judge import SEEDS as SEEDS2  # noqa: E402
from suite import SEEDS, traces  # noqa: E402
from tracegen2 import FAMILIES2  # noqa: E402

from lorafleet import COMPILED_CORE, PURE_ENV  # noqa: E402
from lorafleet.replay.driver import HINTS, LOG, simulate  # noqa: E402

WAYS = ("arrival", "durations", "hints")


def runs(seed_set: str, requests: int, repeat: int, families: set[str] | None) -> dict[str, Any]:
    """Every run's counts and speed, keyed family/seed/way/policy."""
    cases = [(name, SEEDS[seed_set][0], make) for name, make in traces(families).items()]
    cases += [(name, SEEDS2[seed_set][0], make) for name, make in FAMILIES2.items() if not families or name in families]
    found: dict[str, Any] = {}
    for name, seed, make in cases:
        trace = make(seed)
        if trace is None:
            continue
        inventory, events = trace
        events = events[:requests]
        for way in WAYS:
            timed_events = events if way == "arrival" else timed(events, seed, DRAWN)
            for policy in ("lru", "lorafleet"):
                if way == "hints" and policy == "lru":
                    continue  # lru decides nothing on a hint
                visibility = HINTS if way == "hints" else LOG
                results = [simulate(inventory, policy, timed_events, visibility=visibility) for _ in range(repeat)]
                counts = dataclasses.asdict(results[0])
                counts.pop("wall_s")
                found[f"{name}/{seed}/{way}/{policy}"] = {
                    "counts": counts,
                    "requests_per_s": max(r.requests_per_s for r in results),
                }
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed-set", choices=sorted(SEEDS2), default="tune")
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--families", help="comma-separated family names (default: all of both generators)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    families = set(args.families.split(",")) if args.families else None
    if args.child:
        Path(args.child).write_text(json.dumps(runs(args.seed_set, args.requests, args.repeat, families)))
        return
    if not COMPILED_CORE:
        sys.exit("the core is not compiled in this install (see README: a C compiler and Python's headers)")
    found: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as work:
        for mode in ("compiled", "source"):
            out = Path(work) / f"{mode}.json"
            env = {k: v for k, v in os.environ.items() if k != PURE_ENV} | ({PURE_ENV: "1"} if mode == "source" else {})
            child = [sys.executable, __file__, "--child", str(out), "--seed-set", args.seed_set]
            child += ["--requests", str(args.requests), "--repeat", str(args.repeat)]
            child += ["--families", args.families] if args.families else []
            subprocess.run(child, env=env, check=True)
            found[mode] = json.loads(out.read_text())
    compiled, source = found["compiled"], found["source"]
    differ = [key for key in source if source[key]["counts"] != compiled.get(key, {}).get("counts")]
    print(f"{len(source)} runs; counts differing between the compiled core and its source: {len(differ)}")
    for key in differ[:10]:
        print(f"  differs: {key}")
    ratios: dict[str, list[float]] = {}
    for key, run in source.items():
        way, policy = key.split("/")[2:]
        ratios.setdefault(f"{policy}, {way}", []).append(compiled[key]["requests_per_s"] / run["requests_per_s"])
    print("speed-up, compiled over source (requests/s ratio): median, lowest, highest over the families")
    for label, values in ratios.items():
        print(f"  {label:<24} {statistics.median(values):5.2f}× {min(values):5.2f}× {max(values):5.2f}×")
    ours = [(key, run) for key, run in compiled.items() if key.endswith("/lorafleet")]
    slowest = min(ours, key=lambda kv: kv[1]["requests_per_s"])
    print(f"slowest lorafleet run, compiled: {slowest[1]['requests_per_s']:,.0f} requests/s ({slowest[0]})")
    if differ:
        sys.exit(1)


if __name__ == "__main__":
    main()
