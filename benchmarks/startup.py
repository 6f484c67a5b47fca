"""Start-up cost of the CLI as a ratio to `python -c 'import click'`: `--version`, and a shell's Tab.

    python benchmarks/startup.py [--runs 15]

Goal: both within 2x of importing click, since completion runs the program on every Tab. Medians of N runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def median_s(args: list[str], env: dict[str, str], runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    py = sys.executable
    base = median_s([py, "-c", "import click"], env, args.runs)
    version = median_s([py, "-m", "lorafleet", "--version"], env, args.runs)
    tab_env = {**env, "_LORAFLEET_COMPLETE": "bash_complete", "COMP_WORDS": "lorafleet ", "COMP_CWORD": "1"}
    tab = median_s([py, "-m", "lorafleet"], tab_env, args.runs)
    print(f"python -c 'import click': {base * 1000:6.0f} ms")
    for name, value in (("lorafleet --version", version), ("completion of a command", tab)):
        ratio = value / base
        print(f"{name:<26} {value * 1000:6.0f} ms  {ratio:4.2f}x  goal <= 2x: {'met' if ratio <= 2 else 'NOT met'}")


if __name__ == "__main__":
    main()
