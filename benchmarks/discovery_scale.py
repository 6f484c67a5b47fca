"""The live daemon on a Kubernetes fleet of N engine pods: how long it takes to start, and what it costs then.

    python benchmarks/discovery_scale.py [--pods 300,1000,3000] [--engines refused|answering] [--idle-s 10]

For each N a loopback fake Kubernetes API (tests/kube_server.py) serves EndpointSlices holding N ready pods, in
slices of at most 100 endpoints (as real slices are). The real daemon (`lorafleet daemon`, live, not shadow) is
started as a subprocess on an inventory whose one discovery group selects them, so it lists the slices, makes
one engine per pod, starts one actor thread per engine and reconciles every engine (a GET of its registry)
before it follows the gateway log.

Where the engines are, by `--engines`:
- `refused` (default): pod i is at its own loopback address 127.0.x.y, on a port where nothing listens (a free
  port taken by binding and closing a socket): every registry read is refused at once, and retried on the
  client's backoff (0.2 + 0.5 + 1.0 s) before that engine's reconcile fails.
- `answering`: every pod is at 127.0.0.1 (pods differ by name, which is what makes an engine), on the port of a
  small loopback HTTP server (asyncio, in the benchmark's own process: it shares the machine's CPUs) answering
  vLLM's registry calls at once (GET /v1/models: one base model card, GET /metrics: empty).
Nothing leaves 127.0.0.0/8; every port is bound as port 0.

Per N, one line:
- `init`: seconds from spawning the process to the log's `metrics on` line (imports, the inventory, the list of
  the slices, the N engines' books and actors — everything before the loop runs);
- `start`: seconds from spawning to the log's `following` line (after the first reconcile of every engine) with
  /metrics answering 200; `cpu`: the CPU time (user + system, all threads) the process used by then;
- `engines`: the engines /metrics reports (`lorafleet_budget_slots` series);
- `rss`: the daemon's VmRSS once started (and after the idle wait), from /proc/PID/status; `threads` likewise;
- `idle cpu`: its utime+stime (/proc/PID/stat) over `--idle-s` seconds after the start, as % of one core;
- `add 1 pod`: seconds from putting one more pod (a slice of its own: one watch event) to the log's `added` line;
- `stop`: seconds from SIGTERM to its exit, and the exit code.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.daemon.conftest import write_adapters  # noqa: E402
from tests.daemon.test_discovery import fleet_text  # noqa: E402
from tests.kube_server import FakeKube, endpoint_slice  # noqa: E402

SLICE_SIZE = 100  # endpoints per EndpointSlice: Kubernetes' own maximum
CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass
class Result:
    pods: int
    engines: int
    init_s: float
    start_s: float
    metrics_ms: float
    start_cpu_s: float
    rss_mb: float
    rss_idle_mb: float
    idle_cpu_pct: float
    threads: int
    add_s: float
    stop_s: float
    code: int

    def line(self) -> str:
        return (
            f"N={self.pods:5d}  engines {self.engines:5d}  init {self.init_s:6.2f} s  start {self.start_s:6.2f} s  "
            f"(cpu {self.start_cpu_s:5.1f} s)  /metrics {self.metrics_ms:6.0f} ms  "
            f"rss {self.rss_mb:6.1f} MB (idle {self.rss_idle_mb:6.1f})  "
            f"idle cpu {self.idle_cpu_pct:5.1f} %  threads {self.threads:5d}  add 1 pod {self.add_s:5.2f} s  "
            f"stop {self.stop_s:5.2f} s  exit {self.code}"
        )


MODELS = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}).encode()


def _reply(status: str, kind: str, body: bytes) -> bytes:
    head = f"HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\n\r\n"
    return head.encode() + body


REPLIES = {
    b"/v1/models": _reply("200 OK", "application/json", MODELS),
    b"/metrics": _reply("200 OK", "text/plain", b""),
}
NOT_FOUND = _reply("404 Not Found", "text/plain", b"")


async def _serve_registry(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """vLLM's registry calls, answered at once on a kept-alive connection: no adapter registered, nothing running.
    Requests carry no body (GETs), so a request ends at its blank line."""
    try:
        while head := await reader.readuntil(b"\r\n\r\n"):
            path = head.split(b" ", 2)[1].split(b"?", 1)[0]
            writer.write(REPLIES.get(path, NOT_FOUND))
            await writer.drain()
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, IndexError):
        pass
    finally:
        writer.close()


async def _closed(server: asyncio.Server) -> None:
    """The server closed and its connections' tasks ended, on its own loop."""
    server.close()
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


@contextmanager
def engines_at(mode: str) -> Iterator[tuple[int, bool]]:
    """(the pods' port, whether they all share 127.0.0.1)."""
    if mode == "answering":  # an event loop in a thread: far less CPU per request than a thread per connection
        loop = asyncio.new_event_loop()
        server = loop.run_until_complete(asyncio.start_server(_serve_registry, "127.0.0.1", 0, backlog=4096))
        thread = threading.Thread(target=loop.run_forever, daemon=True)
        thread.start()
        try:
            yield int(server.sockets[0].getsockname()[1]), True
        finally:
            asyncio.run_coroutine_threadsafe(_closed(server), loop).result(10)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)
            loop.close()
        return
    with socket.socket() as probe:  # a port nothing listens on: connections are refused at once
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    yield port, False


def pod_address(i: int, shared: bool) -> str:
    return "127.0.0.1" if shared else f"127.0.{1 + i // 250}.{1 + i % 250}"


def proc_status(pid: int) -> tuple[float, int]:
    """(VmRSS in MB, threads) of a process."""
    rss, threads = 0.0, 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) / 1024.0
        elif line.startswith("Threads:"):
            threads = int(line.split()[1])
    return rss, threads


def cpu_s(pid: int) -> float:
    """utime + stime of a process, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # fields 14 and 15 of proc(5), after pid and comm


def get(url: str, timeout: float = 30.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return int(response.status), response.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), b""
    except OSError:
        return 0, b""


def measure(pods: int, mode: str, idle_s: float, timeout_s: float, keep: Path | None) -> Result:
    tmp = Path(tempfile.mkdtemp(prefix=f"discovery-scale-{pods}-"))
    kube = FakeKube()
    proc: subprocess.Popen[bytes] | None = None
    try:
        with engines_at(mode) as (port, shared):
            for first in range(0, pods, SLICE_SIZE):
                members = [(f"vllm-{i}", pod_address(i, shared)) for i in range(first, min(pods, first + SLICE_SIZE))]
                kube.put(endpoint_slice(f"vllm-{first // SLICE_SIZE:04d}", members, port))  # type: ignore[arg-type]
            kube.kubeconfig(tmp / "kubeconfig")
            adapters = write_adapters(tmp / "adapters", 3)
            log = tmp / "access.jsonl"
            log.touch()
            inventory = tmp / "inv.yaml"
            inventory.write_text(fleet_text(adapters, log))
            stderr_path = tmp / "daemon.stderr"
            command = [sys.executable, "-m", "lorafleet", "daemon", "-i", str(inventory), "--state", str(tmp / "s.db")]
            with open(stderr_path, "wb") as stderr:
                spawned = time.monotonic()
                proc = subprocess.Popen(
                    [*command, "--metrics-addr", "127.0.0.1:0", "-v"],
                    stdout=subprocess.DEVNULL,
                    stderr=stderr,
                    env={**os.environ, "PYTHONPATH": str(ROOT)},
                    cwd=str(tmp),
                )
                init_s = start_s = None
                metrics_port = None
                deadline = spawned + timeout_s
                while start_s is None:
                    if time.monotonic() > deadline or proc.poll() is not None:
                        tail = "\n".join(stderr_path.read_text(errors="replace").splitlines()[-20:])
                        raise RuntimeError(f"N={pods}: the daemon did not start (exit {proc.poll()}):\n{tail}")
                    text = stderr_path.read_text(errors="replace")
                    if metrics_port is None and (found := re.search(r"metrics on http://127\.0\.0\.1:(\d+)/", text)):
                        init_s, metrics_port = time.monotonic() - spawned, int(found.group(1))
                    if metrics_port is not None and re.search(r" following \d+ log file", text):
                        began = time.monotonic()
                        status, body = get(f"http://127.0.0.1:{metrics_port}/metrics")
                        if status == 200:
                            start_s, metrics_ms = time.monotonic() - spawned, (time.monotonic() - began) * 1000.0
                            break
                    time.sleep(0.02)
                assert init_s is not None and metrics_port is not None
                engines = len(re.findall(rb"^lorafleet_budget_slots\{[^}]*engine=", body, re.MULTILINE))
                rss_mb, threads = proc_status(proc.pid)
                start_cpu = cpu_before = cpu_s(proc.pid)
                idle_began = time.monotonic()
                time.sleep(idle_s)
                cpu_pct = 100.0 * (cpu_s(proc.pid) - cpu_before) / (time.monotonic() - idle_began)
                rss_idle_mb, _ = proc_status(proc.pid)
                added = time.monotonic()  # one more pod, in a slice of its own: one watch event
                kube.put(endpoint_slice("vllm-extra", [(f"vllm-{pods}", pod_address(pods, shared))], port))
                while f"added pool/vllm-{pods};" not in stderr_path.read_text(errors="replace"):
                    if time.monotonic() > added + timeout_s or proc.poll() is not None:
                        raise RuntimeError(f"N={pods}: the pod added was not taken up")
                    time.sleep(0.01)
                add_s = time.monotonic() - added
                stopping = time.monotonic()
                proc.send_signal(signal.SIGTERM)
                try:
                    code = proc.wait(timeout_s)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    code = proc.wait()
                stop_s = time.monotonic() - stopping
            if keep is not None:
                keep.mkdir(parents=True, exist_ok=True)
                shutil.copy(stderr_path, keep / f"daemon-{pods}-{mode}.stderr")
            return Result(
                pods,
                engines,
                init_s,
                start_s,
                metrics_ms,
                start_cpu,
                rss_mb,
                rss_idle_mb,
                cpu_pct,
                threads,
                add_s,
                stop_s,
                code,
            )
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        kube.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", default="300,1000,3000", help="comma-separated numbers of pods")
    parser.add_argument("--engines", choices=("refused", "answering"), default="refused")
    parser.add_argument("--idle-s", type=float, default=10.0, help="the idle window CPU is measured over")
    parser.add_argument("--timeout-s", type=float, default=300.0, help="the longest wait for a start or a stop")
    parser.add_argument("--keep-logs", type=Path, default=None, help="copy each daemon's stderr into this folder")
    args = parser.parse_args()
    print(f"engines {args.engines}; {os.cpu_count()} CPUs; idle window {args.idle_s:g} s", flush=True)
    for pods in (int(p) for p in args.pods.split(",")):
        print(measure(pods, args.engines, args.idle_s, args.timeout_s, args.keep_logs).line(), flush=True)


if __name__ == "__main__":
    main()
