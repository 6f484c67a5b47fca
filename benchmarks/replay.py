"""Replay benchmark: every policy on every synthetic shape and on a stream built from the Azure Functions 2019
sample; prints hit ratio, cold ms p99, headroom captured and replay speed.

    python benchmarks/replay.py [--minutes 60] [--cap 30] [--markdown]

Azure stream rule (the sample has per-minute invocation counts of 1000 functions, see
../shared/data/traces/README.md): each function active in the first `--minutes` minutes becomes one adapter of
llama3-8b; its rank is RANKS[int(sha256(function hash)) % 5] with RANKS = 8, 16, 32, 64, 128 and target modules
q,k,v,o; its invocations in a minute are capped at `--cap` (the two hottest functions alone send 900k an hour,
which would only add hits) and spread evenly over the minute (invitro's equidistant inter-arrival mode); its
tenant is the function's owner. Two vLLM engines with max_loras 8 and max_cpu_loras 32 serve them.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lorafleet.inventory import Inventory, load_inventory  # noqa: E402
from lorafleet.logs.reader import read_events  # noqa: E402
from lorafleet.policy.events import ADAPTER, RequestEvent  # noqa: E402
from lorafleet.replay.driver import PolicyResult, headroom_captured, simulate  # noqa: E402
from lorafleet.replay.synth import SHAPES, synthesize  # noqa: E402

POLICIES = ("lru", "lfu", "arc", "wtinylfu", "markov", "lorafleet", "oracle")
RANKS = (8, 16, 32, 64, 128)
AZURE = ROOT.parent / "shared" / "data" / "traces" / "azure_functions_2019_invitro_sample" / "1000_inv.csv"
START = 1_764_000_000.0


def azure_stream(minutes: int, cap: int, tmp: Path) -> tuple[Inventory, list[RequestEvent]]:
    with AZURE.open(newline="") as fh:
        reader = csv.reader(fh)
        next(reader)
        rows = [(row[0], row[2], [min(int(c), cap) for c in row[3 : 3 + minutes]]) for row in reader]
    active = [(f, owner, counts) for f, owner, counts in rows if any(counts)]
    adapters = []
    events: list[RequestEvent] = []
    for function, owner, counts in active:
        adapter = f"fn-{function[:12]}"
        rank = RANKS[int(hashlib.sha256(function.encode()).hexdigest(), 16) % len(RANKS)]
        adapters.append(
            f"  - {{id: {adapter}, base_model: llama3-8b, path: /adapters/{adapter}, rank: {rank}, "
            f"target_modules: [q_proj, k_proj, v_proj, o_proj]}}"
        )
        tenant = f"owner-{owner[:8]}"
        for minute, count in enumerate(counts):
            for k in range(count):
                when = START + minute * 60.0 + (k + 0.5) * 60.0 / count
                events.append(RequestEvent(when, ADAPTER, adapter, tenant=tenant, base_model="llama3-8b"))
    events.sort(key=lambda e: e.time)
    inventory = tmp / "azure.yaml"
    inventory.write_text(
        "fleet: azure-functions-2019\n"
        "defaults: {load_fixed_ms: 15, disk_gbps: 3, h2d_gbps: 25}\n"
        "base_models:\n  llama3-8b: {hidden_size: 4096, intermediate_size: 14336, num_layers: 32, "
        "num_attention_heads: 32, num_kv_heads: 8}\n"
        "hosts:\n  - name: localhost\n    provider: onprem\n    engines:\n"
        + "".join(
            f"      - {{name: vllm-{i}, kind: vllm, url: 'http://127.0.0.1:{18000 + i}', base_model: llama3-8b, "
            "max_loras: 8, max_cpu_loras: 32, max_lora_rank: 128}\n"
            for i in range(2)
        )
        + "adapters:\n"
        + "\n".join(adapters)
        + "\n"
    )
    return load_inventory(inventory), events


def run(inventory: Inventory, events: list[RequestEvent]) -> dict[str, PolicyResult]:
    return {name: simulate(inventory, name, events) for name in POLICIES}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=int, default=60)
    parser.add_argument("--cap", type=int, default=30)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table for docs/benchmarks.md")
    args = parser.parse_args()
    traces: list[tuple[str, Inventory, list[RequestEvent]]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for shape in SHAPES:
            synthetic = synthesize(shape, None, args.seed, Path(tmp) / shape)
            inventory = load_inventory(synthetic.inventory_path)
            events, _ = read_events([synthetic.log_path], inventory)
            traces.append((shape, inventory, events))
        if AZURE.exists():
            inventory, events = azure_stream(args.minutes, args.cap, Path(tmp))
            traces.append((f"azure-fn-{args.minutes}m", inventory, events))
        else:
            print(f"(skipping the Azure stream: {AZURE} not found)")
        rows = []
        for name, inventory, events in traces:
            results = run(inventory, events)
            lru, oracle = results["lru"], results["oracle"]
            for policy, r in results.items():
                captured = headroom_captured(r, lru, oracle)
                rows.append(
                    (
                        name,
                        len(events),
                        policy,
                        r.hit_ratio,
                        r.cold_ms_percentile(99),
                        captured,
                        r.prefetch_loads,
                        r.wasted_prefetches,
                        r.budget_violations,
                        r.requests_per_s,
                    )
                )
    header = (
        "trace",
        "requests",
        "policy",
        "hit ratio",
        "cold ms p99",
        "headroom",
        "prefetch",
        "wasted",
        "over budget",
        "req/s",
    )
    if args.markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
    else:
        print(
            f"{header[0]:<16}{header[1]:>9} {header[2]:<10}{header[3]:>10}{header[4]:>12}{header[5]:>10}"
            f"{header[6]:>10}{header[7]:>8}{header[8]:>12}{header[9]:>10}"
        )
    for name, n, policy, hit, p99, captured, prefetch, wasted, violations, rps in rows:
        head = "-" if captured is None else f"{captured:.0%}"
        if args.markdown:
            print(
                f"| {name} | {n:,} | {policy} | {hit:.1%} | {p99:.1f} | {head} | {prefetch:,} | {wasted:,} | "
                f"{violations} | {rps:,.0f} |"
            )
        else:
            print(
                f"{name:<16}{n:>9,} {policy:<10}{hit:>10.1%}{p99:>12.1f}{head:>10}{prefetch:>10,}{wasted:>8,}"
                f"{violations:>12}{rps:>10,.0f}"
            )


if __name__ == "__main__":
    started = time.perf_counter()
    main()
    print(f"(benchmark took {time.perf_counter() - started:.0f} s)", file=sys.stderr)
