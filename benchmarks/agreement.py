"""Replay vs live, per traffic shape: the same requests sent to an emulated vLLM engine (which counts its own hits,
with vLLM's lazy resolver bringing in what is asked for) while the daemon follows the log, then replayed.

    python benchmarks/agreement.py [--requests 240] [--gap-ms 60] [--seed 5]

Shapes: `workflows` (4 tenants stepping through chains, steps repeated 1–2 times, 10% strays), `zipf`
(independent requests, Zipf 1.1 over 8 adapters), `drift` (a hot set of 3 of the 8 adapters that moves every 60
requests). One engine: max_loras 1, max_cpu_loras 3. Prints live and replay hit ratios and their difference
(the daemon test asserts ≤ 3 points on workflows).
"""

from __future__ import annotations

import argparse
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lorafleet.inventory import load_inventory  # noqa: E402
from lorafleet.logs.reader import read_events  # noqa: E402
from lorafleet.replay.driver import simulate  # noqa: E402
from tests.daemon.conftest import log_line, vllm, write_adapters, write_fleet  # noqa: E402
from tests.daemon.test_agreement import CHAINS, send, traffic  # noqa: E402
from tests.engine_emulator import EngineEmulator, EngineState  # noqa: E402

ADAPTERS = 8


def zipf(count: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    weights = [1.0 / (i + 1) ** 1.1 for i in range(ADAPTERS)]
    return [(f"t{rng.randrange(4)}", f"a{rng.choices(range(ADAPTERS), weights)[0]}") for _ in range(count)]


def drift(count: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    out = []
    for i in range(count):
        hot = [(i // 60 + k) % ADAPTERS for k in range(3)]
        adapter = rng.choice(hot) if rng.random() < 0.85 else rng.randrange(ADAPTERS)
        out.append((f"t{rng.randrange(4)}", f"a{adapter}"))
    return out


SHAPES = {"workflows": traffic, "zipf": zipf, "drift": drift}


def run(shape: str, policy: str, requests: list[tuple[str, str]], gap_s: float, work: Path) -> tuple[float, float]:
    engine = EngineEmulator(EngineState(kind="vllm", gpu_slots=1, host_slots=3))
    try:
        adapters = write_adapters(work / "adapters", ADAPTERS)
        engine.state.resolver = {f"a{i}": str(p) for i, p in enumerate(adapters)}
        tenants = "".join(f"  {t}: {{workflows: [[{', '.join(f'a{i}' for i in c)}]]}}\n" for t, c in CHAINS.items())
        declared = tenants if shape == "workflows" else ""
        inv = write_fleet(work, [vllm("e0", engine.url, gpu=1, host=3)], adapters, tenants=declared)
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        command = [sys.executable, "-m", "lorafleet", "daemon", "-i", str(inv), "--state", str(work / "s.db")]
        stderr = open(work / "daemon.log", "wb")  # noqa: SIM115
        proc = subprocess.Popen(
            [*command, "-v", "--policy", policy, "--metrics-addr", "off"],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=env,
        )
        try:
            for _ in range(400):
                if re.search("following", (work / "daemon.log").read_text()):
                    break
                time.sleep(0.05)
            log = work / "access.jsonl"
            for tenant, adapter in requests:
                send(engine.url, adapter)
                with open(log, "a") as fh:
                    fh.write(log_line(adapter, tenant, "h/e0"))
                time.sleep(gap_s)
            time.sleep(1.0)
        finally:
            proc.terminate()
            proc.wait(10)
            stderr.close()
        served = engine.state.served
        live = served["hit"] / max(1, served["hit"] + served["miss"])
        inventory = load_inventory(inv)
        events, _ = read_events([log], inventory)
        return live, simulate(inventory, policy, events).hit_ratio
    finally:
        engine.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=240)
    parser.add_argument("--gap-ms", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=5)
    args = parser.parse_args()
    print("| shape | policy | live | replay | difference |\n|---|---|---|---|---|")
    for shape, make in SHAPES.items():
        requests = make(args.requests, args.seed)
        for policy in ("lru", "lorafleet"):
            with tempfile.TemporaryDirectory(prefix="lorafleet-agreement-") as tmp:
                live, replayed = run(shape, policy, requests, args.gap_ms / 1000.0, Path(tmp))
            print(f"| {shape} | {policy} | {live:.4f} | {replayed:.4f} | {100 * (live - replayed):+.1f} pts |")


if __name__ == "__main__":
    main()
