"""Daemon benchmark: log lines to committed rollups (as a ratio to plain json.loads over the same file, in the
same run), memory growth over a long log, decision latency against an emulated engine, and shadow-vs-replay.

    python benchmarks/daemon.py [--lines 200000] [--long 1000000] [--latency-lines 400] [--markdown]

Throughput and memory run the daemon in shadow mode (`--once --from-start`) in this process over a synthetic
workflow log of `--lines` lines (repeated with fresh timestamps for `--long`); the rate counts everything from
reading the file to the last commit. Latency runs the daemon as a subprocess against an emulated vLLM engine on a
free loopback port, appends lines at 50 per second, and reads the daemon's own decision-latency histogram
(line read → call sent) from its /metrics endpoint: p50 and p99 are bucket upper bounds.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lorafleet import COMPILED_CORE  # noqa: E402
from lorafleet.daemon.loop import Daemon, DaemonOptions  # noqa: E402
from lorafleet.drive.session import Counts  # noqa: E402
from lorafleet.inventory import load_inventory  # noqa: E402
from lorafleet.logs.reader import read_events  # noqa: E402
from lorafleet.replay.driver import simulate  # noqa: E402
from lorafleet.replay.synth import synthesize  # noqa: E402
from lorafleet.store.db import open_store  # noqa: E402


def rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def json_loads_rate(path: Path) -> float:
    started = time.perf_counter()
    n = 0
    with open(path, "rb") as fh:
        for line in fh:
            json.loads(line)
            n += 1
    return n / (time.perf_counter() - started)


def stretch(source: Path, target: Path, lines: int) -> None:
    """`lines` lines: the source's lines repeated, each pass shifted later by the source's span, so time keeps
    moving forward (a log whose time stood still would hold every load in flight)."""
    from lorafleet.logs.timeparse import parse_time

    records = [json.loads(x) for x in source.read_text().splitlines()]
    times = [parse_time(r["ts"]) for r in records]
    span = times[-1] - times[0] + 1.0
    with open(target, "w") as fh:
        written, shift = 0, 0.0
        while written < lines:
            for r, t in zip(records, times, strict=True):
                if written >= lines:
                    break
                fh.write(json.dumps({**r, "ts": round(t + shift, 3)}) + "\n")
                written += 1
            shift += span


def shadow_run(inventory: Path, db: Path, policy: str) -> tuple[float, int, float]:
    inv = load_inventory(inventory)
    with open_store(db) as store:
        options = DaemonOptions(policy=policy, shadow=True, once=True, from_start=True, retention_days=36500.0)
        gc.collect()
        before = rss_mb()
        started = time.perf_counter()
        summary = Daemon(inv, store, options).run()
        elapsed = time.perf_counter() - started
    return summary.lines / elapsed, summary.lines, rss_mb() - before


def latency(work: Path, lines: int) -> tuple[str, str, int]:
    from tests.daemon.conftest import log_line, vllm, write_adapters, write_fleet
    from tests.engine_emulator import EngineEmulator, EngineState

    engine = EngineEmulator(EngineState(kind="vllm", gpu_slots=2, host_slots=4))
    adapters = write_adapters(work / "adapters", 12)
    chains = "  t0: {workflows: [[a0, a1, a2]]}\n  t1: {workflows: [[a3, a4, a5, a6]]}\n"
    inv = write_fleet(work, [vllm("e0", engine.url, host=4)], adapters, tenants=chains)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "lorafleet", "daemon", "-i", str(inv), "--state", str(work / "l.db"), "-v"]
    stderr = open(work / "daemon.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [*command, "--metrics-addr", "127.0.0.1:0"], stdout=subprocess.DEVNULL, stderr=stderr, env=env
    )
    try:
        port = None
        for _ in range(400):
            found = re.search(r"metrics on http://127\.0\.0\.1:(\d+)", (work / "daemon.log").read_text())
            if found and "following" in (work / "daemon.log").read_text():
                port = int(found.group(1))
                break
            time.sleep(0.05)
        assert port is not None, (work / "daemon.log").read_text()
        import random

        rng = random.Random(1)
        chain = {"t0": ["a0", "a1", "a2"], "t1": ["a3", "a4", "a5", "a6"]}
        step = {"t0": 0, "t1": 0}
        with open(work / "access.jsonl", "a") as fh:
            for _ in range(lines):
                tenant = rng.choice(["t0", "t1"])
                stray = rng.random() < 0.2
                adapter = f"a{rng.randrange(12)}" if stray else chain[tenant][step[tenant] % len(chain[tenant])]
                step[tenant] += 1
                fh.write(log_line(adapter, tenant, "h/e0"))
                fh.flush()
                time.sleep(0.02)
        time.sleep(1.0)
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    finally:
        proc.terminate()
        proc.wait(10)
        stderr.close()
        engine.stop()
    buckets = [
        (float(m.group(1)), float(m.group(2)))
        for m in re.finditer(r'lorafleet_decision_latency_seconds_bucket\{[^}]*le="([^"]+)"[^}]*\} (\S+)', text)
        if m.group(1) != "+Inf"
    ]
    total = float(re.search(r"lorafleet_decision_latency_seconds_count(?:\{[^}]*\})? (\S+)", text).group(1))  # type: ignore[union-attr]

    def quantile(q: float) -> str:
        for bound, count in buckets:
            if count >= q * total:
                return f"≤ {bound * 1000:g} ms"
        return "> 5 s"

    return quantile(0.5), quantile(0.99), int(total)


def shadow_equals_replay(work: Path, requests: int) -> None:
    """One session, two drivers: the daemon in shadow mode and replay over the same Zipf log, every count
    compared exactly (not within a tolerance)."""
    synth = synthesize("zipf", requests, 5, work)
    for policy in ("lru", "lorafleet"):
        inv = load_inventory(synth.inventory_path)
        events, _ = read_events([synth.log_path], inv)
        replayed = simulate(inv, policy, events)
        with open_store(work / f"{policy}.db") as store:
            options = DaemonOptions(policy=policy, shadow=True, once=True, from_start=True, retention_days=36500.0)
            s = Daemon(load_inventory(synth.inventory_path), store, options).run()
        names = [f.name for f in dataclasses.fields(Counts)]
        differ = [n for n in names if getattr(s, n) != getattr(replayed, n)]
        verdict = "equal on every count" if not differ else f"DIFFER on {', '.join(differ)}"
        print(
            f"shadow vs replay, {policy}, Zipf log of {s.requests:,} requests: {verdict} ({len(names)} counts; "
            f"hit ratio {s.hit_ratio:.4f}, cold ms {s.cold_ms_paid:,.1f})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--long", type=int, default=1_000_000)
    parser.add_argument("--latency-lines", type=int, default=400)
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--agree-requests", type=int, default=100_000, help="Zipf requests for shadow vs replay")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="lorafleet-daemon-bench-"))
    try:
        synth = synthesize("workflows", 20_000, 11, work / "t")
        log = synth.log_path
        base = work / "t" / "base.jsonl"
        shutil.move(log, base)
        stretch(base, log, args.lines)
        base_rate = json_loads_rate(log)
        rows = []
        for policy in ("lru", "lorafleet"):
            rate, lines, _ = shadow_run(synth.inventory_path, work / f"{policy}.db", policy)
            rows.append((policy, lines, rate, rate / base_rate))
        print(f"core: {'compiled' if COMPILED_CORE else 'plain source'}")
        print(f"json.loads over the same file: {base_rate:,.0f} lines/s")
        for policy, lines, rate, ratio in rows:
            print(f"daemon --shadow --once, {policy}: {lines:,} lines at {rate:,.0f}/s = {ratio:.2f} of json.loads")
        stretch(base, log, args.long)
        (work / "lorafleet.db").unlink()
        rate, lines, grown = shadow_run(synth.inventory_path, work / "long.db", "lorafleet")
        print(f"memory growth over {lines:,} lines (lorafleet): {grown:+.1f} MB RSS ({rate:,.0f} lines/s)")
        shadow_equals_replay(work / "agree", args.agree_requests)
        p50, p99, count = latency(work / "latency", args.latency_lines) if args.latency_lines else ("-", "-", 0)
        print(f"decision latency (line read to call sent), {count} calls: p50 {p50}, p99 {p99}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
