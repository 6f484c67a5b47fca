"""How long the hint endpoint takes to answer while the daemon's loop is busy, at Python's default GIL switch
interval and at the daemon's (`hints.SWITCH_INTERVAL_S`).

    python benchmarks/hint_endpoint.py [--hints 600] [--gap-ms 2]

The endpoint (daemon/hints.py) runs in this process as in the daemon, beside a thread that never rests (the
loop's policy work on a big fleet, the worst case); a client in its own process posts hints one at a time on one
keep-alive connection, as nginx's mirror does, and times each answer. Prints p50/p99/max per interval.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lorafleet.daemon.hints import SWITCH_INTERVAL_S, HintIngress  # noqa: E402

CLIENT = r"""
import http.client, json, sys, time
port, hints, gap = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]) / 1000.0
conn = http.client.HTTPConnection("127.0.0.1", port)
body = json.dumps({"model": "code-review", "user": "bench"})
took = []
for _ in range(hints):
    started = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    conn.getresponse().read()
    took.append((time.perf_counter() - started) * 1000.0)
    time.sleep(gap)
took.sort()
print(f"{took[len(took) // 2]:.2f} {took[min(len(took) - 1, int(len(took) * 0.99))]:.2f} {took[-1]:.2f}")
"""


def answer_times(interval: float, hints: int, gap_ms: float) -> tuple[float, ...]:
    before = sys.getswitchinterval()
    sys.setswitchinterval(interval)
    ingress = HintIngress()
    port = ingress.serve("127.0.0.1:0").rsplit(":", 1)[1]
    busy = threading.Event()

    def loop() -> None:  # the daemon's loop at work: pure Python, never waiting
        total = 0
        while not busy.is_set():
            for i in range(20_000):
                total += i * i
            ingress.take()

    worker = threading.Thread(target=loop)
    worker.start()
    try:
        out = subprocess.run(
            [sys.executable, "-c", CLIENT, port, str(hints), str(gap_ms)], capture_output=True, text=True, check=True
        ).stdout
    finally:
        busy.set()
        worker.join()
        ingress.close()
        sys.setswitchinterval(before)
    return tuple(float(x) for x in out.split())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hints", type=int, default=600)
    parser.add_argument("--gap-ms", type=float, default=2.0)
    args = parser.parse_args()
    print(f"{args.hints} hints, one connection, {args.gap_ms:g} ms apart, the loop busy throughout; answer ms")
    for name, interval in (("default", 0.005), ("daemon", SWITCH_INTERVAL_S)):
        p50, p99, top = answer_times(interval, args.hints, args.gap_ms)
        print(f"  switch interval {interval * 1000:.1f} ms ({name}): p50 {p50:.2f}  p99 {p99:.2f}  max {top:.2f}")


if __name__ == "__main__":
    main()
