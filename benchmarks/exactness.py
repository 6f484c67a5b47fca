"""Exactness of a speed-up: every policy over every suite and judge family on one seed, dumped, then compared.

    python benchmarks/exactness.py dump before.json [--seed 3] [--families a,b] [--policies lru,...]
    python benchmarks/exactness.py compare before.json after.json

A change meant to make the policy core faster and nothing else must leave every replay exactly as it was:
`dump` writes, per (family, policy), every count of the run (hits, loads, touches, evictions, ...), a digest of
every request's wait in order, and (online policies) a digest of each engine's final residency (host and GPU
tiers in LRU order, loads in flight, pins); `compare` lists whatever differs. Besides the suite's families
(benchmarks/tracegen.py, 1-3 engines each) and the judge's (tracegen2), `wide-*` families spread the suite's
traffic over 24-60 engines of mixed kinds and rank caps, so placement among many engines of unequal pools is
exercised too. `--index-always` makes the core place through the book's holder index even on pools small
enough to scan (placement.SCAN_MAX = 0), so the suite's own families check the index as well.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from suite import traces  # noqa: E402
from tracegen import Family, build  # noqa: E402
from tracegen2 import FAMILIES2  # noqa: E402

from lorafleet.drive.policies import POLICY_NAMES  # noqa: E402
from lorafleet.inventory.model import Inventory  # noqa: E402
from lorafleet.policy.events import RequestEvent  # noqa: E402
from lorafleet.replay.driver import PolicyResult, Simulation, in_arrival_order, simulate  # noqa: E402

Trace = tuple[Inventory, list[RequestEvent]]
SKIP = {"wall_s", "cold_ms", "headroom"}


def _mixed_caps(inventory: Inventory) -> Inventory:
    """Every third engine takes adapters up to rank 128, the others up to 64 or 32: pools of unequal size."""
    hosts = []
    index = 0
    for host in inventory.hosts:
        engines = []
        for engine in host.engines:
            engines.append(dataclasses.replace(engine, max_lora_rank=(128, 64, 32)[index % 3]))
            index += 1
        hosts.append(dataclasses.replace(host, engines=tuple(engines)))
    return dataclasses.replace(inventory, hosts=tuple(hosts))


WIDE = (
    Family("wide-zipf", kind="mixed", engines=40, slots=6, gpu_slots=2, adapters=600, rate=200.0, requests=6000),
    Family("wide-drift", mode="drift", engines=24, slots=8, adapters=400, drift_every=500, drift_shift=40, rate=100.0),
    Family("wide-workflow", mode="workflow", engines=60, slots=4, gpu_slots=2, adapters=300, tenants=60, rate=60.0),
)


def families(chosen: set[str] | None) -> dict[str, Callable[[int], Trace | None]]:
    out: dict[str, Callable[[int], Trace | None]] = dict(traces(None))
    out.update({f"judge:{k}": v for k, v in FAMILIES2.items()})
    out.update({f.name: (lambda s, f=f: (lambda t: (_mixed_caps(t[0]), t[1]))(build(f, s))) for f in WIDE})
    return {k: v for k, v in out.items() if chosen is None or k in chosen}


def _digest(value: object) -> str:
    return hashlib.sha256(repr(value).encode()).hexdigest()[:16]


def _row(result: PolicyResult) -> dict[str, Any]:
    row = {f.name: getattr(result, f.name) for f in dataclasses.fields(result) if f.name not in SKIP}
    row["cold_ms"] = _digest(result.cold_ms)
    return row


def run(inventory: Inventory, policy: str, events: list[RequestEvent]) -> dict[str, Any]:
    if policy == "oracle":
        return _row(simulate(inventory, policy, events))
    simulation = Simulation(inventory, policy, in_arrival_order(events))
    row = _row(simulation.run())
    book = simulation.session.core.book.engines
    row["book"] = _digest(
        [(k, list(s.resident), list(s.gpu), sorted(s.in_flight), sorted(s.pins)) for k, s in sorted(book.items())]
    )
    return row


def dump(path: Path, seed: int, chosen: set[str] | None, policies: tuple[str, ...]) -> None:
    out: dict[str, dict[str, Any]] = {}
    started = time.perf_counter()
    for name, make in families(chosen).items():
        trace = make(seed)
        if trace is None:
            print(f"{name}: trace data not present, skipped", flush=True)
            continue
        inventory, events = trace
        for policy in policies:
            out[f"{name}/{policy}"] = run(inventory, policy, events)
        print(f"{name}: {len(events):,} requests, {len(inventory.engines)} engines, done", flush=True)
    path.write_text(json.dumps(out, indent=1, sort_keys=True))
    print(f"{len(out)} runs in {time.perf_counter() - started:.0f} s -> {path}")


def compare(before: Path, after: Path) -> int:
    a, b = json.loads(before.read_text()), json.loads(after.read_text())
    missing = sorted(set(a) ^ set(b))
    both = sorted(set(a) & set(b))
    differ = [(k, f) for k in both for f in sorted(set(a[k]) | set(b[k])) if a[k].get(f) != b[k].get(f)]
    for key in missing:
        print(f"only in one dump: {key}")
    for key, field in differ:
        print(f"DIFFER {key} {field}: {a[key].get(field)!r} -> {b[key].get(field)!r}")
    runs = len(both)
    fields = sum(len(a[k]) for k in both)
    verdict = "identical" if not missing and not differ else f"{len(differ)} differences, {len(missing)} unmatched"
    print(f"{runs} runs, {fields} values compared: {verdict}")
    return 0 if not missing and not differ else 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("dump")
    d.add_argument("out", type=Path)
    d.add_argument("--seed", type=int, default=3)
    d.add_argument("--families", help="comma-separated family names (default: all)")
    d.add_argument("--policies", default=",".join(POLICY_NAMES))
    d.add_argument("--index-always", action="store_true", help="place through the index on every pool size")
    c = sub.add_parser("compare")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    args = parser.parse_args()
    if args.command == "dump":
        chosen = set(args.families.split(",")) if args.families else None
        if args.index_always:
            import lorafleet.policy.placement as placement

            placement.SCAN_MAX = 0  # type: ignore[attr-defined]  # (absent before the index: harmless there)
        dump(args.out, args.seed, chosen, tuple(args.policies.split(",")))
    else:
        raise SystemExit(compare(args.before, args.after))


if __name__ == "__main__":
    main()
