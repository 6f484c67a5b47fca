"""A week of production in one run: the live daemon against emulated engines while everything a month brings
happens to it, one simulated hour every `--hour-s` seconds.

    python benchmarks/soak.py [--hours 168] [--hour-s 1.0] [--lines-per-hour 200]

The daemon runs as its own process (live, not shadow) against an emulated vLLM and an emulated SGLang engine on
free loopback ports, following a log the benchmark writes: `--lines-per-hour` requests a simulated hour, their
timestamps spread over that hour of a week starting seven days ago. Every simulated hour the log is rotated
(by rename, every fourth time by copy-truncate once the daemon has caught up); every day one engine restarts
(its registry emptied) and the daemon gets SIGHUP (an inventory reload); in hour 50 the vLLM engine is dead
(every call answers 503) for the hour; in hour 80 the files of an adapter registered on the vLLM engine vanish,
to come back in hour 83. Printed: requests written and journaled (every one once), the daemon's RSS after the
first simulated day and at the end, the journal's size per million requests, engine restarts and vanished files
it saw (of those made), and any traceback.

Hit ratios are not measured here: at an hour a second the log's clock runs 3600 times faster than the engines',
so every load seems to last minutes of traffic (`benchmarks/daemon.py` measures the policy in the daemon).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.daemon.conftest import log_line, sglang, vllm, write_adapters, write_fleet  # noqa: E402
from tests.engine_emulator import EngineEmulator, EngineState, Fault  # noqa: E402


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def journaled(state: Path) -> int:
    """Requests in the journal: the hourly sums, which keep what the minute detail's retention drops."""
    with sqlite3.connect(state) as c:
        found = c.execute("SELECT COALESCE(SUM(requests), 0) FROM rollups_hourly WHERE dim = 'all'").fetchone()
        return int(found[0])


def metric(port: int, name: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name))


def wait_until(condition, timeout: float) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=int, default=168, help="simulated hours (168: a week)")
    parser.add_argument("--hour-s", type=float, default=1.0, help="real seconds a simulated hour lasts")
    parser.add_argument("--lines-per-hour", type=int, default=200)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="lorafleet-soak-"))
    v = EngineEmulator(EngineState(kind="vllm", gpu_slots=2, host_slots=4))
    s = EngineEmulator(EngineState(kind="sglang", gpu_slots=2, host_slots=4))
    adapters = write_adapters(work / "adapters", 8)
    tenants = "  t0: {workflows: [[a0, a1, a2]]}\n  t1: {workflows: [[a3, a4, a5]]}\n"
    inv = write_fleet(work, [vllm("v", v.url, host=4), sglang("s", s.url, host=4)], adapters, tenants=tenants)
    log, state = work / "access.jsonl", work / "state.db"
    command = [sys.executable, "-m", "lorafleet", "daemon", "-i", str(inv), "--state", str(state), "-v",
               "--reconcile-every", "1", "--metrics-addr", "127.0.0.1:0", "--retention", "30d"]  # fmt: skip
    errors = open(work / "daemon.log", "wb")  # noqa: SIM115 - closed at the end
    summary = open(work / "daemon.out", "wb")  # noqa: SIM115 - closed at the end
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    daemon = subprocess.Popen(command, stdout=summary, stderr=errors, env=env, cwd=work)
    port = 0
    if not wait_until(lambda: "following" in (work / "daemon.log").read_text(), 30):
        raise SystemExit("the daemon did not start")
    port = int((work / "daemon.log").read_text().split("metrics on http://127.0.0.1:")[1].split("/")[0])
    start = time.time() - 7 * 86400
    written, rss_day, gone_dir, gone = 0, 0.0, work / "gone", None
    restarts_made = 0
    started = time.monotonic()
    try:
        for hour in range(args.hours):
            hour_started = time.monotonic()
            if hour == 50:
                v.state.faults.append(Fault(status=503, times=10**9))
            if hour == 51:
                v.state.faults.clear()
            if hour == 80 and v.state.registry:
                gone = work / "adapters" / next(iter(v.state.registry))
                shutil.move(str(gone), str(gone_dir))
            if hour == 83 and gone is not None:
                shutil.move(str(gone_dir), str(gone))
            if hour % 24 == 12:
                (v if hour % 48 == 12 else s).state.restart()
                restarts_made += 1
                daemon.send_signal(signal.SIGHUP)
            with open(log, "a") as fh:
                for i in range(args.lines_per_hour):
                    ts = start + hour * 3600 + i * 3600 / args.lines_per_hour
                    tenant = f"t{i % 3}"
                    adapter = f"a{(i // 3) % 8}" if tenant != "t2" else f"a{i % 8}"
                    fh.write(log_line(adapter, tenant=tenant, engine="h/v" if i % 2 else "h/s", ts=ts))
                    written += 1
            time.sleep(max(0.0, args.hour_s * 0.6 - (time.monotonic() - hour_started)))
            if hour % 4 == 3:  # copy-truncate, once the daemon caught up (it loses what was unread, for anyone)
                wait_until(lambda w=written: journaled(state) == w, 30)
                shutil.copy(log, work / "access.copy")
                with open(log, "r+") as fh:
                    fh.truncate(0)
            else:
                log.rename(work / f"access.jsonl.{hour % 3}")  # rename rotation, keeping three old files
            if hour == 24:
                rss_day = rss_mb(daemon.pid)
            if os.environ.get("SOAK_TRACE"):
                print(f"hour {hour}: written {written}, journaled {journaled(state)}", flush=True)
            time.sleep(max(0.0, args.hour_s - (time.monotonic() - hour_started)))
        wait_until(lambda: journaled(state) == written, 60)
        rss_end = rss_mb(daemon.pid)
        restarts = metric(port, "lorafleet_engine_restarts_total")
        vanished = metric(port, "lorafleet_vanished_adapters_total")
    finally:
        daemon.send_signal(signal.SIGTERM)
        code = daemon.wait(30)
        errors.close()
        summary.close()
        v.stop()
        s.stop()
    elapsed = time.monotonic() - started
    count = journaled(state)
    size = state.stat().st_size
    wal = sum(p.stat().st_size for p in work.glob("state.db-*"))  # the write-ahead log: at most ~4 MB, any size
    text = (work / "daemon.log").read_text()
    print(f"{args.hours} simulated hours in {elapsed:.0f} s; daemon exit {code}")
    print(f"requests written {written:,}, journaled {count:,} ({'every one once' if count == written else 'DIFFER'})")
    print(f"RSS after the first day {rss_day:.1f} MB, at the end {rss_end:.1f} MB ({rss_end - rss_day:+.1f} MB)")
    print(f"journal {size / 1e6:.1f} MB: {size / max(1, count):.1f} MB per million requests (+ WAL {wal / 1e6:.1f} MB)")
    print(f"engine restarts seen {restarts:.0f} of {restarts_made}, vanished adapters seen {vanished:.0f} of 1")
    print(f"tracebacks in the daemon's log: {text.count('Traceback')}")
    if os.environ.get("SOAK_TRACE"):
        print(f"kept {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
