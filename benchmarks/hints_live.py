"""Lead time, live: a real nginx in front of an emulated vLLM, the daemon learning from log lines only or from the
gateway's start hints too, and replay's prediction of each from the access log nginx wrote.

    python benchmarks/hints_live.py [--shapes back-to-back,think,zipf] [--rounds 8] [--tenants 6] [--engines 1]
        [--json]

Every request goes client -> nginx (deploy/nginx-lorafleet.conf, tests/nginx_gateway.py) -> an emulated engine
(tests/engine_emulator.py: 4 GPU slots, 10 host slots, vLLM's lazy resolver, a cold load of 40 ms per MB, a
generation of `--gen-s` ± 50%), which says in a header whether the adapter was in its memory: the engine's own
count is the live figure. Modes: `log` — nginx without the mirror, the daemon tails the access log; `hints` —
nginx mirrors each request's start to `daemon --hints-addr`. Shapes:
- `back-to-back`: each tenant runs its declared chain of 4 steps (from a pool of 16 adapters), each step
  sent the moment the previous response ends (an agentic workflow: no think time); no adapter is in two chains,
  and the 16 adapters do not fit the engine's 10 slots, so the engine alone misses nearly every step;
- `think`: the same chains with 0.5-1.5 s between steps;
- `zipf`: independent requests, Zipf 1.1 over the pool (nothing to predict).
Per shape and mode: live hit ratio (all requests, and the later steps 2-4 of chains), then `replay` of the access
log nginx wrote under the same visibility, and the difference in points (goal: within 3); `counted`: the hit
ratio the daemon itself journaled (what `stats` reports), against the engine's own count (`live`).
`--engines N`: N such engines behind the recipe with its `hash $http_x_lora_adapter consistent` line enabled (each
adapter to one engine); `rerouted` is how many hints the daemon found, from their lines, to have run elsewhere than
its book took them (`lorafleet_hints_total{outcome="rerouted"}`).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lorafleet.inventory import load_inventory  # noqa: E402
from lorafleet.logs.reader import read_events  # noqa: E402
from lorafleet.replay.driver import in_arrival_order, simulate  # noqa: E402
from tests.engine_emulator import EngineEmulator, EngineState  # noqa: E402
from tests.nginx_gateway import RECIPE, NginxGateway, free_port  # noqa: E402
from tests.peft_files import write_peft_adapter  # noqa: E402

POOL = 16  # four tenants' chains of four steps, each adapter in one chain
STEPS = 4
LOAD_S_PER_MB = 0.04


def adapters(folder: Path) -> list[Path]:
    out = []
    for i in range(POOL):
        path = folder / f"a{i}"
        rank = (8, 16, 32, 64)[i % 4]
        write_peft_adapter(path, rank=rank, modules={"q_proj": (256, 256), "v_proj": (256, 64)}, layers=4)
        out.append(path)
    return out


def chains(tenants: int, seed: int) -> dict[str, list[str]]:
    rng = random.Random(seed)
    """Each tenant's chain of STEPS adapters, no adapter in two chains (the pool is shuffled and dealt out)."""
    order = rng.sample(range(POOL), POOL)
    return {f"t{i}": [f"a{j}" for j in order[i * STEPS : (i + 1) * STEPS]] for i in range(min(tenants, POOL // STEPS))}


def write_inventory(
    folder: Path, urls: list[str], paths: list[Path], flows: dict[str, list[str]], declared: bool, gpu: int, host: int
) -> Path:
    # The load-time model matches the emulator's: LOAD_S_PER_MB per MB read, no fixed part, a fast copy.
    tenants = "".join(
        f"  {t}: {{workflows: [[{', '.join(chain)}]]}}\n" if declared else f"  {t}: {{}}\n"
        for t, chain in flows.items()
    )
    text = (
        f"defaults: {{load_fixed_ms: 0, disk_gbps: {1e-3 / LOAD_S_PER_MB}, h2d_gbps: 1.0e+6}}\n"
        "base_models:\n  m: {hidden_size: 256, intermediate_size: 512, num_layers: 4, num_attention_heads: 4}\n"
        "hosts:\n  - name: h\n    provider: onprem\n    connection: local\n    request_timeout_s: 5\n    engines:\n"
        + "".join(
            f"      - {{name: e{i}, kind: vllm, url: '{url}', base_model: m, max_loras: {gpu}, max_cpu_loras: {host}, "
            "max_lora_rank: 64}\n"
            for i, url in enumerate(urls)
        )
        + "adapters:\n"
        + "".join(
            f"  - {{id: a{i}, base_model: m, path: '{p}', rank: {(8, 16, 32, 64)[i % 4]}}}\n"
            for i, p in enumerate(paths)
        )
        + f"tenants:\n{tenants}"
        + "gateway:\n  logs:\n    - path: nginx/access.jsonl\n      format: jsonl\n"
        "      fields: {time: ts, tenant: tenant, adapter: adapter, engine: upstream, status: status, "
        "duration_s: duration_s, request_id: request_id}\n"
    )
    path = folder / "inv.yaml"
    path.write_text(text)
    return path


def send(gateway: NginxGateway, tenant: str, adapter: str, tokens: int) -> bool:
    """One completion through the gateway; whether the engine had the adapter in memory."""
    conn = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=60)
    body = json.dumps({"model": adapter, "prompt": "go", "max_tokens": tokens, "user": tenant})
    headers = {"Content-Type": "application/json", "X-Tenant-Id": tenant, "X-Lora-Adapter": adapter}
    conn.request("POST", "/v1/completions", body, headers)
    response = conn.getresponse()
    response.read()
    conn.close()
    return response.getheader("X-Emulator-Cache") == "hit"


def run_tenant(gateway: NginxGateway, tenant: str, plan: list[tuple[str, int, float]], out: list[Any]) -> None:
    for adapter, step, pause in plan:
        hit = send(gateway, tenant, adapter, tokens=16)
        out.append((tenant, adapter, step, hit))
        if pause:
            time.sleep(pause)


def plans(shape: str, flows: dict[str, list[str]], rounds: int, seed: int) -> dict[str, list[tuple[str, int, float]]]:
    rng = random.Random(seed)
    out: dict[str, list[tuple[str, int, float]]] = {}
    weights = [1.0 / (i + 1) ** 1.1 for i in range(POOL)]
    for tenant, chain in flows.items():
        steps: list[tuple[str, int, float]] = []
        for _ in range(rounds):
            if shape == "zipf":
                steps += [(f"a{rng.choices(range(POOL), weights)[0]}", -1, rng.uniform(0.0, 0.5)) for _ in range(STEPS)]
                continue
            for i, adapter in enumerate(chain):
                pause = rng.uniform(0.5, 1.5) if shape == "think" else 0.0
                steps.append((adapter, i, pause))
            steps[-1] = (steps[-1][0], steps[-1][1], rng.uniform(0.5, 2.0))  # between rounds
        out[tenant] = steps
    return out


def start_daemon(inv: Path, state: Path, hints_port: int | None, metrics_port: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    args = [sys.executable, "-m", "lorafleet", "daemon", "-i", str(inv), "--state", str(state), "-v"]
    args += ["--metrics-addr", f"127.0.0.1:{metrics_port}"]
    if hints_port is not None:
        args += ["--hints-addr", f"127.0.0.1:{hints_port}"]
    log = open(state.with_suffix(".log"), "wb")  # noqa: SIM115 - the process owns it
    proc = subprocess.Popen(args, stderr=log, stdout=subprocess.DEVNULL, env=env, cwd=str(inv.parent))
    deadline = time.monotonic() + 20
    while b"following" not in state.with_suffix(".log").read_bytes():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(state.with_suffix(".log").read_text())
        time.sleep(0.05)
    return proc


def run(shape: str, mode: str, args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="lorafleet-hints-") as tmp:
        folder = Path(tmp)
        paths = adapters(folder / "adapters")
        engines = [
            EngineEmulator(
                EngineState(
                    kind="vllm",
                    served_model="m",
                    gpu_slots=args.gpu_slots,
                    host_slots=args.host_slots,
                    load_s_per_mb=LOAD_S_PER_MB,
                    gen_fixed_s=args.gen_s,
                    gen_spread=0.5,
                    gen_seed=args.seed + i,
                    resolver={f"a{i}": str(p) for i, p in enumerate(paths)},
                )
            )
            for i in range(args.engines)
        ]
        flows = chains(args.tenants, args.seed)
        urls = [engine.url for engine in engines]
        inv = write_inventory(folder, urls, paths, flows, not args.undeclared, args.gpu_slots, args.host_slots)
        hints_port = free_port() if mode == "hints" else None
        (folder / "nginx").mkdir()
        (folder / "nginx" / "access.jsonl").touch()
        recipe = RECIPE.read_text(encoding="utf-8")
        if args.engines > 1:  # each adapter to one engine
            recipe = recipe.replace("#   hash $http_x_lora_adapter", "hash $http_x_lora_adapter")
        gateway = NginxGateway(
            folder / "nginx", urls, hints_port or free_port(), mirror=mode == "hints", recipe_text=recipe
        )
        gateway.start()
        metrics_port = free_port()
        daemon = start_daemon(inv, folder / "state.db", hints_port, metrics_port)
        results: list[Any] = []
        try:
            threads = [
                threading.Thread(target=run_tenant, args=(gateway, t, p, results))
                for t, p in plans(shape, flows, args.rounds, args.seed).items()
            ]
            started = time.monotonic()
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            wall = time.monotonic() - started
            time.sleep(0.5)
            rerouted = hints_rerouted(metrics_port)
        finally:
            daemon.terminate()
            daemon.wait(30)
            gateway.stop()
            for engine in engines:
                engine.stop()
            if args.keep:
                import shutil

                kept = Path(args.keep) / f"{shape}-{mode}"
                shutil.copytree(folder, kept, dirs_exist_ok=True)
                (kept / "requests.json").write_text(json.dumps(results))
        with sqlite3.connect(folder / "state.db") as journal:  # what the daemon counted (`stats` reads it)
            counted, counted_hits = journal.execute("SELECT SUM(requests), SUM(hits) FROM rollups").fetchone()
        inventory = load_inventory(inv)
        events, _ = read_events([folder / "nginx" / "access.jsonl"], inventory)
        replayed = simulate(inventory, "lorafleet", events, visibility=mode)
        later = [hit for _, _, step, hit in results if step > 0]
        live = sum(hit for *_, hit in results) / len(results)
        # Replay's own verdict per request (a hit waits 0), in arrival order: the later steps of the chains.
        steps = {adapter: i for chain in flows.values() for i, adapter in enumerate(chain)}
        served = [e for e in in_arrival_order(events) if e.adapter is not None]
        replay_later = [w == 0.0 for e, w in zip(served, replayed.cold_ms, strict=False) if steps.get(e.adapter, 0) > 0]
        return {
            "shape": shape,
            "mode": mode,
            "requests": len(results),
            "wall_s": round(wall, 1),
            "live_hit_ratio": round(live, 4),
            "live_later_steps_hit_ratio": round(sum(later) / len(later), 4) if later else None,
            "replay_hit_ratio": round(replayed.hit_ratio, 4),
            "replay_later_steps_hit_ratio": round(sum(replay_later) / len(replay_later), 4)
            if replay_later and shape != "zipf"
            else None,
            "difference_points": round((replayed.hit_ratio - live) * 100, 1),
            "daemon_counted_hit_ratio": round(counted_hits / counted, 4) if counted else None,
            "engines": args.engines,
            "rerouted": rerouted,
        }


def hints_rerouted(port: int) -> int:
    """The daemon's count of hints whose lines named another engine than its book took them on."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return int(
        sum(
            sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name == "lorafleet_hints_total" and sample.labels.get("outcome") == "rerouted"
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default="back-to-back,think,zipf")
    parser.add_argument("--modes", default="log,hints")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--tenants", type=int, default=6)
    parser.add_argument("--gen-s", type=float, default=2.0, help="generation time per request (± 50%%)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--gpu-slots", type=int, default=4)
    parser.add_argument("--host-slots", type=int, default=10)
    parser.add_argument("--engines", type=int, default=1, help="engines behind nginx, which hashes adapters to them")
    parser.add_argument("--undeclared", action="store_true", help="tenants do not declare their chains")
    parser.add_argument("--keep", metavar="DIR", help="keep each run's files (logs, journal) under DIR")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = [run(shape, mode, args) for shape in args.shapes.split(",") for mode in args.modes.split(",")]
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    head = f"{'shape':<14}{'mode':<7}{'requests':>9}{'live':>8}{'replay':>8}{'diff pts':>9}"
    print(head + f"{'later live':>12}{'later replay':>14}{'counted':>9}{'rerouted':>9}{'wall s':>8}")
    for r in rows:
        later = [r[k] for k in ("live_later_steps_hit_ratio", "replay_later_steps_hit_ratio")]
        live_later, replay_later = ("-" if v is None else f"{v:.1%}" for v in later)
        counted = "-" if r["daemon_counted_hit_ratio"] is None else f"{r['daemon_counted_hit_ratio']:.1%}"
        print(
            f"{r['shape']:<14}{r['mode']:<7}{r['requests']:>9}{r['live_hit_ratio']:>8.1%}"
            f"{r['replay_hit_ratio']:>8.1%}{r['difference_points']:>9.1f}{live_later:>12}{replay_later:>14}"
            f"{counted:>9}{r['rerouted']:>9}{r['wall_s']:>8.1f}"
        )


if __name__ == "__main__":
    main()
