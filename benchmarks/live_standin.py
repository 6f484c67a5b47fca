"""A kept live run of `hints_live.py --keep DIR`, computed again offline: the engine's own count live, replay's
(the session run as the daemon runs it, against engines that keep their own LRU: drive/standin.py) and what the
session's book believed meanwhile.

    python benchmarks/live_standin.py DIR/think-log [DIR/back-to-back-log ...] [--policy lorafleet]

From log lines the daemon learns of a request after the engine served it, so the book's belief and the engine's
contents part: the gap between the last two columns is what a book fed by log lines cannot see (vLLM's registry
does not show its cache), the gap between the first two is replay's error.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lorafleet.inventory import load_inventory  # noqa: E402
from lorafleet.logs.reader import read_events  # noqa: E402
from lorafleet.replay.driver import LOG, Simulation, in_arrival_order  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="folders kept by hints_live.py --keep (log mode)")
    parser.add_argument("--policy", default="lorafleet")
    args = parser.parse_args()
    print(f"{'run':<24} {'live':>6} {'replay':>7} {'book':>6}")
    for folder in args.runs:
        results = json.loads((folder / "requests.json").read_text())
        live = sum(hit for *_, hit in results) / len(results)
        inventory = load_inventory(folder / "inv.yaml")
        events, _ = read_events([folder / "nginx" / "access.jsonl"], inventory)
        simulation = Simulation(inventory, args.policy, in_arrival_order(events), visibility=LOG)
        replayed = simulation.run().hit_ratio
        book = simulation.session.counts.hit_ratio
        print(f"{folder.name:<24} {live:>6.1%} {replayed:>7.1%} {book:>6.1%}")


if __name__ == "__main__":
    main()
