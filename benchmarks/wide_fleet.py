"""Placement on a wide fleet: choosing an engine at 10/100/500 engines, the daemon's rate and the per-request
decision time at 500 engines.

    python benchmarks/wide_fleet.py [--engines 10,100,500] [--lines 100000] [--repeat 3] [--skip-daemon]

- `place`: microseconds per `PolicyCore.place` (the core's placement: a miss's engine, a prefetch's target) on
  a book of that many vLLM engines of 64 slots, each half full and loading one adapter; the queried adapters are
  a third resident somewhere, a third loading somewhere, a third held nowhere (a fresh miss: the whole pool is
  weighed). `choose_engine` — the reference scan over the pool — is timed on the same queries in the same run.
- `daemon`: log lines per second of the daemon in shadow mode (`--once --from-start`, in this process) over a
  Zipf log whose lines name no engine (every request is placed), on 500 engines of 64 slots (16 GPU), as a ratio
  to plain json.loads over the same file in the same run. A run's fixed cost — the daemon's start on 500 engines
  and 50,000 adapters, its final commit and the freezing of what the policy learned — is about a second however
  many lines follow, so the whole run's rate understates how fast the daemon keeps up: each run is made twice,
  over the log's first `--short` lines and over all of it, and the rate of the lines between (`steady`) is printed
  beside the fixed cost (`start`: the short run's time less its lines at the steady rate) and the whole run's.
- `decision`: per-request wall time (p50, p99, max) of the session's `request` — routing, classification, the
  policy's decisions, the simulated engines' bookkeeping — replaying that log at 64 and 256 slots per engine.

Each figure is the best of `--repeat` runs (a busy machine only ever slows a run down).
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from daemon import json_loads_rate, shadow_run  # noqa: E402

from lorafleet.drive.policies import make_policy  # noqa: E402
from lorafleet.drive.session import Session  # noqa: E402
from lorafleet.inventory import load_inventory  # noqa: E402
from lorafleet.inventory.model import Inventory  # noqa: E402
from lorafleet.logs.reader import DEFAULT_JSONL, read_events  # noqa: E402
from lorafleet.policy.core import PolicyCore  # noqa: E402
from lorafleet.policy.events import ADAPTER  # noqa: E402
from lorafleet.policy.placement import choose_engine  # noqa: E402
from lorafleet.replay.driver import in_arrival_order  # noqa: E402
from lorafleet.replay.synth import DEFAULTS, LLAMA3_8B  # noqa: E402

START = datetime(2026, 11, 2, 9, 0, 0, tzinfo=UTC).timestamp()
RANKS = (8, 16, 32, 64, 128)


def write_fleet(out: Path, engines: int, slots: int, gpu_slots: int, adapters: int, tenants: int = 200) -> Path:
    rng = random.Random(f"wide:{adapters}")
    inventory = {
        "fleet": f"wide-{engines}x{slots}",
        "defaults": dict(DEFAULTS),
        "base_models": {"llama3-8b": dict(LLAMA3_8B)},
        "hosts": [
            {
                "name": "h",
                "provider": "onprem",
                "connection": "local",
                "gpus": 0,
                "engines": [
                    {
                        "name": f"e{i:03d}",
                        "kind": "vllm",
                        "url": f"http://127.0.0.1:{20000 + i}",
                        "base_model": "llama3-8b",
                        "max_loras": gpu_slots,
                        "max_cpu_loras": slots,
                        "max_lora_rank": 128,
                    }
                    for i in range(engines)
                ],
            }
        ],
        "adapters": [
            {
                "id": f"a{i:05d}",
                "base_model": "llama3-8b",
                "path": f"/adapters/a{i:05d}",
                "rank": rng.choice(RANKS),
                "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"],
                "tenants": [f"t{rng.randrange(tenants):03d}"],
            }
            for i in range(adapters)
        ],
        "gateway": {"logs": [{"path": "access.jsonl", "format": "jsonl", "fields": dict(DEFAULT_JSONL.fields)}]},
    }
    out.mkdir(parents=True, exist_ok=True)
    path = out / "inventory.yaml"
    path.write_text(yaml.safe_dump(inventory, sort_keys=False, width=120))
    return path


def write_log(path: Path, inventory: Inventory, lines: int, rate: float, zipf: float = 1.0) -> None:
    """Zipf popularity over the inventory's adapters, Poisson arrivals at `rate`; no line names an engine."""
    rng = random.Random(f"wide-log:{lines}")
    names = list(inventory.adapters)
    rng.shuffle(names)
    owner = {a.id: a.tenants[0] for a in inventory.adapters.values()}
    weights = [1.0 / (k + 1) ** zipf for k in range(len(names))]
    now = 0.0
    with open(path, "w") as fh:
        for adapter in rng.choices(names, weights, k=lines):
            now += rng.expovariate(rate)
            ts = datetime.fromtimestamp(START + now, tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
            line = {"ts": ts, "tenant_id": owner[adapter], "model": adapter, "upstream": None, "status": 200}
            fh.write(json.dumps(line) + "\n")


def head_of(inventory: Path, out: Path, lines: int) -> Path:
    """A copy of the fleet in `out` whose log is the first `lines` lines of the inventory's (the daemon's short
    run: the same start on the same fleet, fewer lines after it)."""
    out.mkdir(parents=True, exist_ok=True)
    shutil.copy(inventory, out / inventory.name)
    with open(inventory.parent / "access.jsonl") as whole, open(out / "access.jsonl", "w") as head:
        head.writelines(itertools.islice(whole, lines))
    return out / inventory.name


def seconds(run: tuple[float, int, float]) -> tuple[int, float]:
    """(lines, seconds) of a `shadow_run`: its lines and how long the daemon took over them."""
    rate, lines, _ = run
    return lines, lines / rate


def place_speed(work: Path, engines: int, repeat: int, queries: int = 30_000) -> tuple[float, float]:
    """(µs per `core.place`, µs per `choose_engine`) on a half-full book of `engines` engines."""
    inventory = load_inventory(write_fleet(work / f"place-{engines}", engines, 64, 16, 64 * engines))
    core = PolicyCore(inventory, make_policy("lru"))
    rng = random.Random(engines)
    names = list(inventory.adapters)
    rng.shuffle(names)
    keys = list(core.book.engines)
    held = iter(names)
    resident, loading = [], []
    for key in keys:
        state = core.book.engines[key]
        for _ in range(32):
            adapter = next(held)
            state.admit(adapter, core.sizes[adapter])
            resident.append(adapter)
        adapter = next(held)
        state.start_load(adapter, core.sizes[adapter])
        loading.append(adapter)
    nowhere = list(held)
    asked = [rng.choice(group) for _ in range(queries // 3) for group in (resident, loading, nowhere)]
    pools, book = core.pools, core.book.engines
    place = core.place
    assert all(place(a) == choose_engine(a, pools[a], book) for a in asked[:3000])

    def best(fn: object) -> float:
        times = []
        for _ in range(repeat):
            started = time.perf_counter()
            if fn is place:
                for a in asked:
                    place(a)
            else:
                for a in asked:
                    choose_engine(a, pools[a], book)
            times.append(time.perf_counter() - started)
        return min(times) / len(asked) * 1e6

    return best(place), best(choose_engine)


def decision_times(inventory: Inventory, log: Path, policy: str) -> tuple[float, float, float]:
    """(p50, p99, max) µs of `Session.request` over the log's adapter requests, simulated engines: the decision,
    up to its calls; the policy's work after them (`Session.idle`, as the daemon runs it) is not timed."""
    events = [e for e in in_arrival_order(read_events([log], inventory)[0]) if e.kind == ADAPTER]
    core = PolicyCore(inventory, make_policy(policy, events))
    session = Session(core, simulate=True, answers=False)
    session.start(events[0].time)
    request, idle = session.request, session.idle
    clock = time.perf_counter_ns
    spent = []
    for event in events:
        started = clock()
        request(event)
        spent.append(clock() - started)
        idle()  # what the daemon does once the request's calls are sent (the experts that do not lead)
    spent.sort()
    n = len(spent)
    return spent[n // 2] / 1e3, spent[min(n - 1, int(n * 0.99))] / 1e3, spent[-1] / 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engines", default="10,100,500")
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--adapters", type=int, default=50_000)
    parser.add_argument("--rate", type=float, default=2000.0, help="requests per second over the fleet")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--policies", default="lru,lorafleet")
    parser.add_argument("--short", type=int, default=1_000, help="the daemon's short run: the log's first lines")
    parser.add_argument("--skip-daemon", action="store_true")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="lorafleet-wide-"))
    try:
        for n in (int(x) for x in args.engines.split(",")):
            ours, scan = place_speed(work, n, args.repeat)
            print(f"place at {n:>3} engines: {ours:6.2f} µs (choose_engine scan {scan:6.2f} µs, x{scan / ours:.1f})")
        if args.skip_daemon:
            return
        policies = args.policies.split(",")
        for slots, gpu in ((64, 16), (256, 32)):
            out = work / f"fleet-{slots}"
            inv_path = write_fleet(out, 500, slots, gpu, args.adapters)
            inventory = load_inventory(inv_path)
            log = out / "access.jsonl"
            write_log(log, inventory, args.lines, args.rate)
            for policy in policies:
                runs = [decision_times(inventory, log, policy) for _ in range(args.repeat)]
                p50, p99, top = min(r[0] for r in runs), min(r[1] for r in runs), min(r[2] for r in runs)
                print(
                    f"decision, 500 engines x {slots} slots, {policy}: p50 {p50:.0f} µs, p99 {p99:.0f} µs, "
                    f"max {top / 1000:.1f} ms"
                )
            if slots != 64:
                continue
            base = max(json_loads_rate(log) for _ in range(args.repeat))
            short_inv = head_of(inv_path, out / "short", args.short)
            for policy in policies:
                shorts, wholes = [], []  # seconds of each run, the two kinds in turn
                for i in range(args.repeat):
                    short_lines, taken = seconds(shadow_run(short_inv, out / f"short-{policy}-{i}.db", policy))
                    shorts.append(taken)
                    lines, taken = seconds(shadow_run(inv_path, out / f"{policy}-{i}.db", policy))
                    wholes.append(taken)
                short_s, whole_s = min(shorts), min(wholes)  # each the fastest of its runs
                steady = (lines - short_lines) / (whole_s - short_s) if whole_s > short_s else float("inf")
                start = short_s - short_lines / steady
                print(
                    f"daemon --shadow --once, 500 engines x 64 slots, {policy}: steady {steady:,.0f} lines/s "
                    f"= {steady / base:.3f} of json.loads ({base:,.0f}/s); start {start:.2f} s; "
                    f"whole run {lines:,} lines at {lines / whole_s:,.0f}/s"
                )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
