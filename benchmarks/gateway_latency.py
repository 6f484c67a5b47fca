"""What nginx and the recipe's hint mirror add to a request's latency, with lorafleet up, dead, slow or stopped.

    python benchmarks/gateway_latency.py [--requests 2000] [--clients 4] [--gen-ms 0] [--daemon] [--json]

Scenarios, each timed by keep-alive clients (one sequential client, then --clients concurrent ones, each holding
one connection as SDK clients do): straight to the emulated engine; through nginx without the mirror; with the
mirror and the stand-in hint receiver up, slow (answers after 5 s), dead (nothing listening) and stopped
(listening, never accepting: a SIGSTOPped daemon); with --daemon also a real `lorafleet daemon --hints-addr`
(skipped, with the reason, where the daemon does not take that option yet). The engine, the receivers and nginx
run in their own processes, so the client's interpreter times only itself. Prints p50/p99 per scenario and
what each adds to the direct figure; `--json` prints the same as one object. The generation time defaults to 0:
the mirror can only cost anything when the hint takes longer than the request (see docs/gateway.md).
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.nginx_gateway import NginxGateway, free_port, nginx_missing  # noqa: E402

BODY = json.dumps({"model": "base-model", "prompt": "hello", "max_tokens": 8, "user": "bench"})
HEADERS = {"Content-Type": "application/json", "X-Tenant-Id": "bench", "X-Lora-Adapter": "base-model"}
ENGINE = """
import sys, threading
from tests.engine_emulator import EngineEmulator, EngineState
e = EngineEmulator(EngineState(kind="vllm", gen_fixed_s=float(sys.argv[1]), gen_spread=float(sys.argv[2])))
print(e.url, flush=True)
threading.Event().wait()
"""


class Child:
    """A helper process printing its address on its first line; stopped with SIGTERM."""

    def __init__(self, args: list[str], env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
        assert self.proc.stdout is not None
        self.first_line = self.proc.stdout.readline().strip()
        if not self.first_line:
            raise RuntimeError(f"{args[:4]} printed nothing: {self.proc.stderr.read() if self.proc.stderr else ''}")

    def stop(self) -> str:
        """Terminate; what it printed after its first line."""
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            out, _ = self.proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, _ = self.proc.communicate()
        return out


def timed_client(port: int, count: int, out: list[float], errors: list[str]) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        for _ in range(count):
            started = time.perf_counter()
            conn.request("POST", "/v1/completions", BODY, HEADERS)
            response = conn.getresponse()
            response.read()
            out.append(time.perf_counter() - started)
            if response.status != 200:
                errors.append(str(response.status))
    except OSError as exc:
        errors.append(repr(exc))
    finally:
        conn.close()


def measure(port: int, requests: int, clients: int) -> tuple[list[float], list[str]]:
    """Latencies (s) of `requests` requests over `clients` keep-alive connections."""
    out: list[float] = []
    errors: list[str] = []
    threads = [
        threading.Thread(target=timed_client, args=(port, requests // clients, out, errors)) for _ in range(clients)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out, errors


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summary(latencies: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(quantile(latencies, 0.50) * 1000, 3),
        "p99_ms": round(quantile(latencies, 0.99) * 1000, 3),
        "mean_ms": round(statistics.fmean(latencies) * 1000, 3),
    }


@contextmanager
def daemon_hints(engine_url: str, folder: Path, nginx_folder: Path) -> Iterator[tuple[int | None, str]]:
    """A real `lorafleet daemon --hints-addr 127.0.0.1:PORT` over a one-engine inventory, following the access
    log of the nginx that will run in `nginx_folder`: (port, "") once it accepts, or (None, why not)."""
    from tests.peft_files import write_peft_adapter

    access_log = nginx_folder / "access.jsonl"
    folder.mkdir(parents=True, exist_ok=True)
    adapters = folder / "adapters"
    for i in range(2):
        write_peft_adapter(adapters / f"a{i}", rank=8, modules={"q_proj": (64, 64), "v_proj": (64, 16)}, layers=2)
    inventory = folder / "inv.yaml"
    inventory.write_text(
        "base_models:\n"
        "  m: {hidden_size: 64, intermediate_size: 128, num_layers: 2, num_attention_heads: 4}\n"
        "hosts:\n  - name: h\n    provider: onprem\n    connection: local\n    engines:\n"
        f"      - {{name: e0, kind: vllm, url: '{engine_url}', base_model: m, max_loras: 2, max_cpu_loras: 4}}\n"
        "adapters:\n"
        + "".join(f"  - {{id: a{i}, base_model: m, path: '{adapters / f'a{i}'}', rank: 8}}\n" for i in range(2))
        + f"gateway:\n  logs:\n    - path: '{access_log}'\n      format: jsonl\n"
        "      fields: {time: ts, duration_s: duration_s, request_id: request_id, tenant: tenant, adapter: adapter,"
        " engine: upstream, status: status}\n"
    )
    access_log.parent.mkdir(parents=True, exist_ok=True)
    access_log.touch()
    port = free_port()
    command = [sys.executable, "-m", "lorafleet", "daemon", "-i", str(inventory), "--state", str(folder / "s.db")]
    command += ["--metrics-addr", "127.0.0.1:0", "--hints-addr", f"127.0.0.1:{port}"]
    stderr = open(folder / "daemon.stderr", "wb")  # noqa: SIM115 - closed below
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(command, cwd=folder, env=env, stdout=subprocess.DEVNULL, stderr=stderr)  # its summary
    try:
        deadline = time.monotonic() + 20
        ready = False
        while time.monotonic() < deadline and proc.poll() is None and not ready:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                ready = True
            except OSError:
                time.sleep(0.1)
        if ready:
            yield port, ""
        else:
            tail = (folder / "daemon.stderr").read_text(errors="replace").strip().splitlines()[-3:]
            yield None, "the daemon did not listen on --hints-addr: " + " | ".join(tail)
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        stderr.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000, help="per scenario and client mode")
    parser.add_argument("--clients", type=int, default=4, help="concurrent keep-alive clients")
    parser.add_argument("--gen-ms", type=float, default=0.0, help="the engine's generation time per request")
    parser.add_argument("--gen-spread", type=float, default=0.0)
    parser.add_argument("--workers", type=int, default=1, help="nginx worker processes")
    parser.add_argument("--daemon", action="store_true", help="also a real lorafleet daemon's hint endpoint")
    parser.add_argument("--rounds", type=int, default=10, help="turns the scenarios take at the requests")
    parser.add_argument("--skip", action="append", default=[], help="scenario to leave out (repeatable)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    why = nginx_missing()
    if why:
        raise SystemExit(f"error: {why}")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    py = sys.executable
    work = Path(tempfile.mkdtemp(prefix="lorafleet-gateway-bench-"))
    targets: dict[str, int] = {}
    gateways: dict[str, NginxGateway] = {}
    skipped: dict[str, str] = {}
    printed: dict[str, str] = {}
    with contextlib.ExitStack() as stack:
        engine = Child([py, "-c", ENGINE, str(args.gen_ms / 1000), str(args.gen_spread)], env)
        stack.callback(engine.stop)
        engine_url = engine.first_line
        engine_port = int(engine_url.rsplit(":", 1)[1])
        hint_ports = {"dead": free_port()}
        for mode in ("up", "slow", "stopped"):
            child = Child([py, "-m", "tests.nginx_gateway", "receiver", "--mode", mode], env)
            stack.callback(lambda m=mode, c=child: printed.__setitem__(m, c.stop().strip()))
            hint_ports[mode] = int(child.first_line.rsplit(":", 1)[1])
        scenarios: list[tuple[str, int | None, bool]] = [
            ("direct", None, False),
            ("nginx, no mirror", hint_ports["up"], False),
            ("mirror, receiver up", hint_ports["up"], True),
            ("mirror, receiver slow", hint_ports["slow"], True),
            ("mirror, receiver dead", hint_ports["dead"], True),
            ("mirror, receiver stopped", hint_ports["stopped"], True),
        ]
        for name, hints, mirror in scenarios:
            if name in args.skip:
                continue
            if hints is None:
                targets[name] = engine_port
                continue
            folder = work / name.replace(", ", "-").replace(" ", "_")
            gateway = NginxGateway(folder, [engine_url], hints, mirror=mirror, workers=args.workers).start()
            stack.callback(gateway.stop)
            gateways[name] = gateway
            targets[name] = gateway.port
        if args.daemon:
            name = "mirror, lorafleet daemon"
            port, why = stack.enter_context(daemon_hints(engine_url, work / "daemon", work / "daemon-nginx"))
            if port is None:
                skipped[name] = why
            else:
                gateway = NginxGateway(work / "daemon-nginx", [engine_url], port, workers=args.workers).start()
                stack.callback(gateway.stop)
                gateways[name] = gateway
                targets[name] = gateway.port
        results = run_rounds(targets, args)
        for name, gateway in gateways.items():
            time.sleep(0.2)  # the last requests' lines
            durations = [r["duration_s"] for r in gateway.records()]
            results[name]["log_duration_p50_ms"] = round(quantile(durations, 0.5) * 1000, 1)
            results[name]["log_duration_p99_ms"] = round(quantile(durations, 0.99) * 1000, 1)
            results[name]["nginx_error_lines"] = len(gateway.errors().splitlines())
    results.update({name: {"skipped": why} for name, why in skipped.items()})
    hints_up = printed.get("up", "")
    direct = results.get("direct")
    for result in results.values():
        if direct is None or "skipped" in result:
            continue
        for mode in ("sequential", "concurrent"):
            for q in ("p50_ms", "p99_ms"):
                result[mode][f"added_{q}"] = round(result[mode][q] - direct[mode][q], 3)
    report = {
        "requests": args.requests,
        "clients": args.clients,
        "gen_ms": args.gen_ms,
        "nginx_workers": args.workers,
        "hints_received_by_up_receiver": hints_up,
        "scenarios": results,
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(
        f"{args.requests} requests per row, engine generation {args.gen_ms:g} ms; sequential = 1 keep-alive client, "
        f"concurrent = {args.clients}; ms (added over direct)"
    )
    print(f"{'scenario':<26} {'seq p50':>16} {'seq p99':>16} {'conc p50':>16} {'conc p99':>16} {'log p50':>8}")
    for name, result in results.items():
        if "skipped" in result:
            print(f"{name:<26} skipped: {result['skipped']}")
            continue
        cells = []
        for mode in ("sequential", "concurrent"):
            for q in ("p50_ms", "p99_ms"):
                added = result[mode].get(f"added_{q}")
                extra = f" ({added:+.2f})" if added is not None and name != "direct" else ""
                cells.append(f"{result[mode][q]:.2f}{extra}")
        log = result.get("log_duration_p50_ms")
        print(f"{name:<26} " + " ".join(f"{c:>16}" for c in cells) + f" {'' if log is None else log:>8}")
    print(f"stand-in receiver (up): {hints_up}")


def run_rounds(targets: dict[str, int], args: Any) -> dict[str, dict[str, Any]]:
    """Both client modes against every target, in rounds that take turns (a shared machine's noise then falls
    on every scenario alike rather than on whichever ran during it)."""
    rounds = max(1, min(args.rounds, args.requests // max(1, args.clients)))
    latencies: dict[tuple[str, str], list[float]] = {(n, m): [] for n in targets for m in ("sequential", "concurrent")}
    errors: dict[tuple[str, str], list[str]] = {key: [] for key in latencies}
    for port in targets.values():
        timed_client(port, 50, [], [])  # warm-up: connections, nginx's upstream pool
    for _ in range(rounds):
        for name, port in targets.items():
            for mode, clients in (("sequential", 1), ("concurrent", args.clients)):
                got, failed = measure(port, args.requests // rounds, clients)
                latencies[name, mode] += got
                errors[name, mode] += failed
    results: dict[str, dict[str, Any]] = {}
    for (name, mode), values in latencies.items():
        entry = {**summary(values), "requests": len(values), "errors": len(errors[name, mode])}
        if errors[name, mode]:
            entry["first_error"] = errors[name, mode][0]
        results.setdefault(name, {})[mode] = entry
    return results


if __name__ == "__main__":
    main()
