"""How far the daemon's own counts are from what its engines did, when it learns of requests only from log lines
written at each request's end (every access log is).

    python benchmarks/live_counts.py [--generator 1|2] [--seed N] [--policies lru,lorafleet] [--families a,b]

Replay runs the daemon's live session against stand-in engines (drive/late.py): the stand-ins serve each request
at its arrival, as the engines do, and their outcomes are the truth replay reports; the live session learns of it
when its line is read and counts it as the daemon does (its journal, `stats`, its metrics), settling each count
once every earlier request is known (drive/settling.py; all of them at the end, as the daemon at its stop).
Prints, per family, both hit ratios and the error of the daemon's count in points, the error of the cold time
it counts requests waited, in percent, and where lorafleet loaded ahead of demand the prefetches the daemon counts
used against those the engines used; then the mean and largest absolute errors.
Durations are benchmarks/durations.py's (Azure LLM 2023 token counts, median 2.4 s).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from durations import with_durations  # noqa: E402

from lorafleet.replay.driver import Simulation, in_arrival_order  # noqa: E402


def families(generator: str) -> dict[str, Callable[[int], object]]:
    if generator == "1":
        from suite import traces

        return dict(traces(None))
    from tracegen2 import FAMILIES2

    return dict(FAMILIES2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--generator", choices=("1", "2"), default="1")
    parser.add_argument("--seed", type=int, default=None, help="default: the generator's first tuning seed")
    parser.add_argument("--policies", default="lru,lorafleet")
    parser.add_argument("--families", help="comma-separated family names (default: all)")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else (0 if args.generator == "1" else 100)
    chosen = set(args.families.split(",")) if args.families else None
    errors: list[float] = []
    waits: list[float] = []  # the cold time requests waited, counted against given, in percent
    print(f"generator {args.generator}, seed {seed}: hit ratio % the engines gave / the daemon counted (error)")
    for name, make in families(args.generator).items():
        if chosen is not None and name not in chosen:
            continue
        trace = make(seed)
        if trace is None:
            print(f"  {name:<22} trace data not present, skipped")
            continue
        inventory, events = trace  # type: ignore[misc]
        events = in_arrival_order(with_durations(events, seed))
        cells = []
        for policy in args.policies.split(","):
            sim = Simulation(inventory, policy, events, settle=True)
            result = sim.run()
            counted = sim.session.counts
            truth = 100.0 * result.hits / max(1, result.requests)
            daemon = 100.0 * counted.hits / max(1, counted.requests)
            errors.append(abs(daemon - truth))
            paid = 100.0 * (counted.cold_ms_paid / result.cold_ms_paid - 1.0) if result.cold_ms_paid else 0.0
            waits.append(abs(paid))
            used = f"used {counted.prefetch_used}/{result.prefetch_used}" if result.prefetch_loads else ""
            cells.append(
                f"{policy} {truth:5.1f} / {daemon:5.1f} ({daemon - truth:+5.1f}; cold ms {paid:+5.1f}%{used and '; '}"
                f"{used})"
            )
        print(f"  {name:<22} " + "   ".join(cells), flush=True)
    if errors:
        print(f"absolute error, points: mean {sum(errors) / len(errors):.1f}, largest {max(errors):.1f}")
        print(f"cold ms waited, absolute error %: mean {sum(waits) / len(waits):.1f}, largest {max(waits):.1f}")


if __name__ == "__main__":
    main()
