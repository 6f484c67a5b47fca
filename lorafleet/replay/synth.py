"""Synthetic access logs (JSON lines, the reference inventory's layout) with a matching inventory.

Shapes (all deterministic for a given seed):

- `seed`: the shape of the published benchmark lorafleet answers: 800 requests, 8 tenants, 10 adapters of ranks
  8–128 on one vLLM engine holding 4 (2 GPU slots). Each tenant works through its own 3-step workflow
  (e.g. code → review → sql) with think time between steps (Gamma, shape 4, mean 2 s), sessions starting
  at exponential gaps (mean 6 s), and 10% stray requests; half of the workflows are declared in the inventory.
- `zipf`: true Zipf popularity (s = 1.1) over 300 adapters owned by 40 tenants, bursty arrivals (Gamma inter-arrival,
  shape 0.3, CV ≈ 1.8, mean 50 ms); two vLLM engines holding 24 adapters each.
- `workflows`: agentic sessions. 12 tenants over 40 adapters; each tenant's sessions begin at its entry adapter
  and follow one of its 2 chains (3–4 steps, e.g. plan → code → review → sql), with think time between steps
  (Gamma, shape 4, mean 3 s), sessions starting at exponential gaps (mean 20 s), and 1% stray requests.
  Two vLLM engines holding 8 each; half the tenants declare their first chain as an inventory workflow.
- `drift`: 100 adapters; 80% of requests go to a hot set of 8 that is replaced every fifth of the trace, the
  rest to a Zipf tail; one vLLM engine holding 12.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import yaml

from lorafleet.errors import InputError
from lorafleet.inventory.model import Inventory
from lorafleet.logs.reader import DEFAULT_JSONL

SHAPES = ("seed", "zipf", "workflows", "drift")
START = datetime(2026, 11, 2, 9, 0, 0, tzinfo=UTC).timestamp()
RANKS = (8, 16, 32, 64, 128)
DOMAINS = (
    "code",
    "review",
    "sql",
    "finance",
    "medical",
    "legal",
    "translate",
    "support",
    "summarize",
    "math",
    "chat",
    "search",
)
DEFAULT_REQUESTS = {"seed": 800, "zipf": 20_000, "workflows": 5_000, "drift": 10_000}


@dataclass(frozen=True)
class Synthetic:
    log_path: Path
    inventory_path: Path
    requests: int


@dataclass(frozen=True)
class _Spec:
    adapters: list[tuple[str, int, str]]  # id, rank, owner tenant
    tenants: dict[str, dict[str, object]]
    engines: list[dict[str, object]]
    records: list[tuple[float, str, str]]  # time, tenant, adapter


# The synthetic fleets' load-time defaults and base model (Llama 3 8B's shapes), as inventory sections.
DEFAULTS = {"load_fixed_ms": 15, "disk_gbps": 3, "h2d_gbps": 25}
LLAMA3_8B = {
    "name": "meta-llama/Meta-Llama-3-8B-Instruct",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_layers": 32,
    "num_attention_heads": 32,
    "num_kv_heads": 8,
    "dtype": "bfloat16",
}


def _adapter_ids(rng: random.Random, count: int) -> list[tuple[str, int]]:
    out = []
    for i in range(count):
        rank = RANKS[i % len(RANKS)] if count <= 10 else rng.choice(RANKS)
        out.append((f"{DOMAINS[i % len(DOMAINS)]}-{i:03d}-r{rank}", rank))
    return out


def _vllm(name: str, port: int, max_loras: int, max_cpu_loras: int) -> dict[str, object]:
    """A loopback vLLM engine; ports from 18100 up, clear of the demo fleet's 18000-18001 (the tour's emulator)."""
    return {
        "name": name,
        "kind": "vllm",
        "url": f"http://127.0.0.1:{port}",
        "base_model": "llama3-8b",
        "max_loras": max_loras,
        "max_cpu_loras": max_cpu_loras,
        "max_lora_rank": 128,
    }


def _sessions(
    rng: random.Random,
    tenants: list[str],
    chains: dict[str, list[list[str]]],
    all_adapters: list[str],
    requests: int,
    think_s: float,
    noise: float,
    session_gap_s: float,
    think_shape: float = 4.0,
) -> list[tuple[float, str, str]]:
    """Tenants start sessions at random (exponential gaps); a session walks one of the tenant's chains with a
    Gamma-distributed think time between steps (shape 4: generation plus reading, rarely near zero)."""
    records: list[tuple[float, str, str]] = []
    clock = {t: rng.expovariate(1 / session_gap_s) for t in tenants}
    while len(records) < requests:
        tenant = min(clock, key=clock.__getitem__)
        now = clock[tenant]
        chain = rng.choice(chains[tenant])
        for step in chain:
            adapter = rng.choice(all_adapters) if rng.random() < noise else step
            records.append((now, tenant, adapter))
            now += rng.gammavariate(think_shape, think_s / think_shape)
        clock[tenant] = now + rng.expovariate(1 / session_gap_s)
    records.sort()
    return records[:requests]


def _seed(rng: random.Random, requests: int) -> _Spec:
    ids = _adapter_ids(rng, 10)
    names = [a for a, _ in ids]
    tenants = [f"tenant-{i}" for i in range(8)]
    chains = {t: [rng.sample(names, 3)] for t in tenants}
    owners = {a: [t for t in tenants if a in chains[t][0]] or [tenants[0]] for a in names}
    records = _sessions(rng, tenants, chains, names, requests, think_s=2.0, noise=0.1, session_gap_s=6.0)
    return _Spec(
        adapters=[(a, r, owners[a][0]) for a, r in ids],
        tenants={
            t: {"tier": "silver", **({"workflows": chains[t]} if i % 2 == 0 else {})} for i, t in enumerate(tenants)
        },
        engines=[_vllm("vllm-0", 18100, 2, 4)],
        records=records,
    )


def _zipf(rng: random.Random, requests: int) -> _Spec:
    ids = _adapter_ids(rng, 300)
    tenants = [f"tenant-{i:02d}" for i in range(40)]
    owners = {a: tenants[i % len(tenants)] for i, (a, _) in enumerate(ids)}
    weights = [1 / (k + 1) ** 1.1 for k in range(len(ids))]
    shuffled = [a for a, _ in ids]
    rng.shuffle(shuffled)
    cumulative = []
    total = 0.0
    for w in weights:
        total += w
        cumulative.append(total)
    records = []
    now = 0.0
    shape, mean = 0.3, 0.05
    for _ in range(requests):
        now += rng.gammavariate(shape, mean / shape)
        adapter = shuffled[_bisect(cumulative, rng.random() * total)]
        records.append((now, owners[adapter], adapter))
    return _Spec(
        adapters=[(a, r, owners[a]) for a, r in ids],
        tenants={t: {"tier": "bronze"} for t in tenants},
        engines=[_vllm("vllm-0", 18100, 8, 24), _vllm("vllm-1", 18101, 8, 24)],
        records=records,
    )


def _workflows(rng: random.Random, requests: int) -> _Spec:
    ids = _adapter_ids(rng, 40)
    names = [a for a, _ in ids]
    tenants = [f"tenant-{i:02d}" for i in range(12)]
    chains = {}
    for tenant in tenants:
        entry, *rest = rng.sample(names, 7)
        chains[tenant] = [[entry, *rest[:3]], [entry, *rest[3 : 3 + rng.choice((2, 3))]]]
    owners = {a: next((t for t in tenants if any(a in c for c in chains[t])), tenants[0]) for a in names}
    records = _sessions(rng, tenants, chains, names, requests, think_s=3.0, noise=0.01, session_gap_s=20.0)
    return _Spec(
        adapters=[(a, r, owners[a]) for a, r in ids],
        tenants={
            t: {"tier": "silver", **({"workflows": chains[t][:1]} if i % 2 == 0 else {})} for i, t in enumerate(tenants)
        },
        engines=[_vllm("vllm-0", 18100, 4, 8), _vllm("vllm-1", 18101, 4, 8)],
        records=records,
    )


def _drift(rng: random.Random, requests: int) -> _Spec:
    ids = _adapter_ids(rng, 100)
    names = [a for a, _ in ids]
    tenants = [f"tenant-{i:02d}" for i in range(20)]
    owners = {a: tenants[i % len(tenants)] for i, a in enumerate(names)}
    weights = [1 / (k + 1) ** 1.1 for k in range(len(names))]
    phase_len = max(1, math.ceil(requests / 5))
    records = []
    now = 0.0
    hot: list[str] = []
    for i in range(requests):
        if i % phase_len == 0:
            hot = rng.sample(names, 8)
        now += rng.expovariate(1 / 0.1)
        adapter = rng.choice(hot) if rng.random() < 0.8 else rng.choices(names, weights)[0]
        records.append((now, owners[adapter], adapter))
    return _Spec(
        adapters=[(a, r, owners[a]) for a, r in ids],
        tenants={t: {"tier": "bronze"} for t in tenants},
        engines=[_vllm("vllm-0", 18100, 4, 12)],
        records=records,
    )


def _bisect(cumulative: list[float], x: float) -> int:
    lo, hi = 0, len(cumulative) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if cumulative[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _claim(paths: list[Path], force: bool) -> None:
    """Refuse to overwrite files (a real access log, say) unless told to; make their folder. Input errors."""
    if not force:
        taken = [p for p in paths if p.exists()]
        if taken:
            raise InputError(f"refusing to overwrite {taken[0]}", hint="choose another --out, or pass --force")
    for path in paths:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(f"cannot create {path.parent}: {exc.strerror or exc}") from exc
        if path.is_dir():
            raise InputError(f"{path} is a folder; cannot write a file there")


def _write_text(path: Path, text: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot write {path}: {exc.strerror or exc}") from exc


def _write_log(path: Path, records: list[tuple[float, str, str]], upstream: str | None) -> None:
    """JSON lines in the reference inventory's gateway layout (see DEFAULT_JSONL)."""
    lines = []
    for when, tenant, adapter in records:
        line = {
            "ts": _iso(START + when),
            "tenant_id": tenant,
            "model": adapter,
            "upstream": upstream,
            "status": 200,
            "ttft_ms": None,
        }
        lines.append(json.dumps(line) + "\n")
    _write_text(path, "".join(lines))


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def synthesize(shape: str, requests: int | None, seed: int, out: Path, force: bool = False) -> Synthetic:
    """Write `access.jsonl` and `inventory.yaml` for a shape into `out`."""
    if shape not in SHAPES:
        raise ValueError(f"unknown shape {shape!r} (known: {', '.join(SHAPES)})")
    count = requests if requests is not None else DEFAULT_REQUESTS[shape]
    if count < 1:
        raise ValueError("--requests must be at least 1")
    rng = random.Random(f"{shape}:{seed}")
    spec = {"seed": _seed, "zipf": _zipf, "workflows": _workflows, "drift": _drift}[shape](rng, count)
    log_path = out / "access.jsonl"
    inventory_path = out / "inventory.yaml"
    _claim([log_path, inventory_path], force)
    engine_keys = [f"localhost/{e['name']}" for e in spec.engines]
    _write_log(log_path, spec.records, None if len(engine_keys) > 1 else engine_keys[0])
    inventory = {
        "fleet": f"synthetic-{shape}",
        "defaults": dict(DEFAULTS),
        "base_models": {"llama3-8b": dict(LLAMA3_8B)},
        "hosts": [
            {"name": "localhost", "provider": "onprem", "connection": "local", "gpus": 0, "engines": spec.engines}
        ],
        "adapters": [
            {
                "id": a,
                "base_model": "llama3-8b",
                "path": f"/adapters/{a}",
                "rank": r,
                "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"],
                "tenants": [owner],
            }
            for a, r, owner in spec.adapters
        ],
        "tenants": spec.tenants,
        "gateway": {
            "logs": [
                {
                    "path": "access.jsonl",
                    "format": "jsonl",
                    "fields": dict(DEFAULT_JSONL.fields),
                }
            ]
        },
    }
    header = f"# Written by `lorafleet trace synth --shape {shape} --requests {count} --seed {seed}`.\n"
    _write_text(inventory_path, header + yaml.safe_dump(inventory, sort_keys=False, width=120))
    return Synthetic(log_path, inventory_path, len(spec.records))


def synthesize_for_inventory(
    inventory: Inventory, requests: int, seed: int, out: Path, force: bool = False
) -> Synthetic:
    """Traffic for an existing inventory: tenants walk their declared workflows (10% noise, think time mean
    3 s); tenants without workflows ask for their own adapters with Zipf popularity. Writes only the log."""
    if requests < 1:
        raise ValueError("--requests must be at least 1")
    rng = random.Random(f"inventory:{seed}")
    names = list(inventory.adapters)
    if not names:
        raise ValueError("the inventory names no adapters")
    tenants = list(inventory.tenants) or sorted({t for a in inventory.adapters.values() for t in a.tenants})
    if not tenants:
        tenants = ["default"]
    chains: dict[str, list[list[str]]] = {}
    for tenant in tenants:
        declared = inventory.tenants.get(tenant)
        if declared is not None and declared.workflows:
            chains[tenant] = [list(c) for c in declared.workflows]
            continue
        own = [a.id for a in inventory.adapters.values() if tenant in a.tenants] or names
        weights = [1 / (k + 1) ** 1.1 for k in range(len(own))]
        chains[tenant] = [[rng.choices(own, weights)[0] for _ in range(3)] for _ in range(3)]
    records = _sessions(rng, tenants, chains, names, requests, think_s=3.0, noise=0.1, session_gap_s=10.0)
    _claim([out], force)
    _write_log(out, records, None)
    return Synthetic(out, Path(inventory.sources[0]) if inventory.sources else out, len(records))
