"""Inventory load time for big fleets: N adapters over M hosts, composed by libyaml (C) and by pure Python.

    python benchmarks/inventory_load.py [--adapters 10000] [--hosts 200]

Goal: 10,000 adapters in under 1.5 s on one core. The same file is loaded with each composer and the results
compared, so the faster path is known to give the same inventory.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lorafleet.inventory import load_inventory, yamlsource  # noqa: E402


def write_inventory(path: Path, adapters: int, hosts: int) -> None:
    lines = [
        "fleet: bench",
        "base_models:",
        "  llama3-8b: {hidden_size: 4096, intermediate_size: 14336, num_layers: 32, num_attention_heads: 32,",
        "              num_kv_heads: 8}",
        "hosts:",
    ]
    for h in range(hosts):
        lines += [
            f"  - name: node-{h:04d}",
            "    provider: onprem",
            "    address: 127.0.0.1",
            "    engines:",
            f"      - {{name: vllm, kind: vllm, url: 'http://{{host}}:{8000 + h % 1000}', base_model: llama3-8b,",
            "         max_loras: 8, max_cpu_loras: 64, max_lora_rank: 64}",
        ]
    lines.append("adapters:")
    ranks = (8, 16, 32, 64)
    for a in range(adapters):
        lines += [
            f"  - id: adapter-{a:05d}",
            "    base_model: llama3-8b",
            f"    path: /models/adapters/adapter-{a:05d}",
            f"    rank: {ranks[a % 4]}",
            "    target_modules: [q_proj, k_proj, v_proj, o_proj]",
        ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def timed(path: Path) -> tuple[float, object]:
    started = time.perf_counter()
    inventory = load_inventory(path)
    return time.perf_counter() - started, inventory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--adapters", type=int, default=10_000)
    parser.add_argument("--hosts", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.yaml"
        write_inventory(path, args.adapters, args.hosts)
        c_s, c_inv = timed(path)
        if yamlsource.C_LOADER is None:
            print("libyaml is not available: only the pure-Python composer can run")
            print(f"pure Python: {c_s:.2f} s")
            return
        saved = yamlsource.C_LOADER
        yamlsource.C_LOADER = None
        try:
            py_s, py_inv = timed(path)
        finally:
            yamlsource.C_LOADER = saved
    print(f"inventory: {args.adapters:,} adapters, {args.hosts:,} hosts")
    print(f"libyaml (C) composer:  {c_s:6.2f} s   goal < 1.5 s: {'met' if c_s < 1.5 else 'NOT met'}")
    print(f"pure-Python composer:  {py_s:6.2f} s")
    print(f"speed-up: {py_s / c_s:.1f}x; same inventory: {c_inv == py_inv}")


if __name__ == "__main__":
    main()
