"""Hosts probed per second over SSH against N loopback hosts (aliases of one real sshd), serial vs parallel.

    python benchmarks/probe_fleet.py [--hosts 100] [--parallel 32]

Goal: 100 hosts in under 5 s on a 2-core machine. Every connection stays on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lorafleet.inventory import load_inventory  # noqa: E402
from lorafleet.probe.survey import probe_fleet  # noqa: E402
from tests.sshd_server import start_sshd  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=100)
    parser.add_argument("--parallel", type=int, default=32)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        sshd = start_sshd(root / "sshd")
        try:
            known = sshd.write_known_hosts(root / "known_hosts")
            hosts = "".join(f"  - {{name: bench-{i:03d}, address: 127.0.0.1}}\n" for i in range(args.hosts))
            inv_path = root / "inv.yaml"
            inv_path.write_text(
                f"defaults:\n  provider: onprem\n  ssh: {{user: {sshd.user}, port: {sshd.port}, "
                f"key: {sshd.client_key}, known_hosts: {known}, config: {root / 'none'}}}\nhosts:\n{hosts}"
            )
            inv = load_inventory(inv_path)
            print(f"{args.hosts} loopback hosts, one sshd, nvidia-smi reading 3 GPUs each")
            print(f"{'mode':<14}{'seconds':>10}{'hosts/s':>10}{'ok':>6}")
            timings = {}
            for label, parallel in (("serial", 1), (f"parallel={args.parallel}", args.parallel)):
                started = time.perf_counter()
                rows = probe_fleet(inv.hosts, inv, parallel=parallel)
                elapsed = time.perf_counter() - started
                timings[label] = elapsed
                ok = sum(r.ok for r in rows)
                print(f"{label:<14}{elapsed:>10.2f}{args.hosts / elapsed:>10.1f}{ok:>6}")
            serial, par = timings.values()
            print(
                f"speed-up: {serial / par:.1f}x; goal 100 hosts < 5 s: "
                f"{'met' if par * 100 / args.hosts < 5 else 'NOT met'}"
            )
        finally:
            sshd.stop()


if __name__ == "__main__":
    main()
