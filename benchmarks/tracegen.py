"""Trace families for the evaluation suite, each from explicit parameters and a seed (no fitting to a trace).

A family is a `Family` value: fleet shape (engines, kinds, slots), traffic shape (Zipf exponent, drift,
workflows with calls per step, strays, think times, periodic or bursty tenants) and load (request rate, so
loader utilisation follows). `build(family, seed)` gives an inventory and its request stream. Two more come
from public traces in the workspace's shared data when present: Azure Functions 2019 with random arrival
offsets inside each minute, and ServeGen's per-client rates sampled as gamma arrivals.
"""

from __future__ import annotations

import bisect
import csv
import gzip
import hashlib
import math
import random
from dataclasses import dataclass, replace
from pathlib import Path

from lorafleet.errors import Location
from lorafleet.inventory import sizing
from lorafleet.inventory.model import Adapter, BaseModel, Engine, Host, Inventory, LoadModel, SshSettings, Tenant
from lorafleet.policy.events import ADAPTER, RequestEvent

SHARED = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "traces"
AZURE = SHARED / "azure_functions_2019_invitro_sample" / "1000_inv.csv"
SERVEGEN = SHARED / "servegen_client_rates" / "language_m-mid_client_rates.csv.gz"
BASE = BaseModel("llama3-8b", "llama3-8b", 4096, 14336, 32, 32, 8, 128, "bfloat16")
MODULES = ("q_proj", "k_proj", "v_proj", "o_proj")
RANKS = (8, 16, 32, 64, 128)
HERE = Location("suite", None)


@dataclass(frozen=True)
class Family:
    name: str
    mode: str = "zipf"  # zipf | drift | workflow | periodic | bursty | loop
    adapters: int = 200
    tenants: int = 20
    engines: int = 2
    kind: str = "vllm"  # vllm | sglang | mixed
    slots: int = 16  # host-memory slots per engine (max_cpu_loras / max_loaded_loras)
    gpu_slots: int = 4
    budget_mib: int | None = None  # lora_budget_mb per engine: bytes bind before slots when set low enough
    requests: int = 8000
    rate: float = 20.0  # requests per second over the fleet
    zipf: float = 1.0
    drift_every: int = 1000  # requests between hot-set moves (drift)
    drift_shift: int = 20  # ranks the hot set moves each time
    calls_per_step: float = 1.0  # mean calls per workflow step (geometric)
    stray: float = 0.0  # share of requests for a random adapter
    think_s: float = 3.0  # mean think time between steps (workflow)
    think_spread: float = 0.5  # coefficient of variation of think times
    sessions: int = 1  # concurrent sessions per tenant
    declared: bool = False  # workflows written in the inventory
    periodic_share: float = 0.5  # periodic mode: share of adapters on a period
    aligned: bool = False  # periodic mode: arrivals at the start of their period, else a random offset
    calls_per_run: float = 1.0  # periodic mode: mean calls each time a timer fires (geometric), 0.4 s apart
    loop_share: float = 0.4  # loop mode: share of requests from a poller cycling over adapters in a fixed order
    loop_factor: float = 1.25  # loop mode: the poller's cycle, in the fleet's host slots
    shared_pool: bool = False  # workflow mode: every tenant's chains drawn from all adapters, not its own
    tenant_skew: float = 0.0  # workflow mode: Zipf exponent of the tenants' session rates (0: all alike)


FAMILIES = (
    Family("zipf-0.6", zipf=0.6),
    Family("zipf-1.0"),
    Family("zipf-1.3", zipf=1.3),
    Family("drift-slow", mode="drift", drift_every=2000, drift_shift=10),
    Family("drift-fast", mode="drift", drift_every=300, drift_shift=40),
    Family("workflow-declared", mode="workflow", adapters=40, tenants=12, slots=8, declared=True, rate=4.0),
    Family("workflow-undeclared", mode="workflow", adapters=40, tenants=12, slots=8, rate=4.0),
    Family(
        "agentic-noisy",
        mode="workflow",
        adapters=120,
        tenants=60,
        slots=16,
        calls_per_step=2.0,
        stray=0.15,
        think_s=0.5,
        think_spread=1.0,
        sessions=2,
        rate=30.0,
    ),
    # Agentic workflows over one pool of adapters all tenants share, tenants of skewed activity, a few calls a
    # step, stray calls, sessions interleaved: the shape the product exists for, with the loader not saturated.
    Family(
        "agentic-shared",
        mode="workflow",
        adapters=60,
        tenants=30,
        slots=8,
        calls_per_step=1.6,
        stray=0.05,
        think_s=1.0,
        think_spread=1.0,
        sessions=2,
        rate=8.0,
        shared_pool=True,
        tenant_skew=1.0,
    ),
    Family("periodic-aligned", mode="periodic", aligned=True),
    Family("periodic-random", mode="periodic"),
    # Timers that make a few calls each time they fire (a batch job's run): their rhythm is between runs.
    Family("periodic-runs", mode="periodic", aligned=True, calls_per_run=2.5),
    Family("bursty-tenants", mode="bursty", tenants=30),
    # A poller cycling in a fixed order over a quarter more adapters than the fleet holds, beside Zipf traffic:
    # recency's worst case, where each next adapter is certain.
    Family("loop-poller", mode="loop"),
    Family("overload", zipf=0.9, adapters=240, rate=60.0, engines=1, slots=16),
    Family("few-slots", slots=4, gpu_slots=2, adapters=60),
    Family("many-slots", slots=64, gpu_slots=16, adapters=1000, rate=60.0),
    Family("sglang-mixed", kind="mixed", zipf=1.1),
    # Adapters of rank 8-128 (13-208 MiB) under a byte budget of about six average ones: bytes bind, not slots.
    Family("bytes-bound", kind="mixed", zipf=0.9, slots=64, gpu_slots=16, budget_mib=600),
)

# Shapes between and beyond the suite's, for a check that nothing was fitted to the families above: never tuned
# on, and run on their own seeds (`suite.py --holdout`).
HOLDOUT = (
    Family("h-drift-mid", mode="drift", drift_every=600, drift_shift=20),
    Family("h-drift-quick-small", mode="drift", drift_every=150, drift_shift=16, slots=8, adapters=120),
    Family("h-drift-32slots", mode="drift", drift_every=1000, drift_shift=30, slots=32, adapters=400, zipf=0.9),
    Family("h-drift-sglang", mode="drift", kind="sglang", drift_every=400, drift_shift=25, zipf=1.2),
    Family("h-zipf-0.8-8", zipf=0.8, slots=8, adapters=150),
    Family("h-zipf-1.1-mixed", zipf=1.1, kind="mixed", slots=24, adapters=500),
    Family(
        "h-workflow-stray", mode="workflow", adapters=60, tenants=20, slots=10, stray=0.2, calls_per_step=1.5, rate=6.0
    ),
    Family(
        "h-agentic-3",
        mode="workflow",
        adapters=200,
        tenants=80,
        slots=24,
        calls_per_step=3.0,
        stray=0.1,
        think_s=0.3,
        think_spread=1.2,
        sessions=3,
        rate=50.0,
    ),
    Family("h-bursty-60", mode="bursty", tenants=60, slots=12),
    Family("h-periodic-few", mode="periodic", periodic_share=0.2, slots=12),
    Family("h-overload-0.7", zipf=0.7, adapters=300, rate=80.0, engines=1, slots=24),
    Family("h-bytes-drift", mode="drift", drift_every=800, drift_shift=15, slots=48, gpu_slots=8, budget_mib=900),
)


# --- the fleet -------------------------------------------------------------------------------------------
def _adapter(index: int, owner: str) -> Adapter:
    name = f"a{index:04d}"
    rank = RANKS[int(hashlib.sha256(name.encode()).hexdigest(), 16) % len(RANKS)]
    size = sizing.estimate_bytes(BASE, rank, MODULES)
    return Adapter(name, BASE.id, f"/adapters/{name}", rank, MODULES, (owner,), None, size, "estimated", HERE)


def _engine(i: int, family: Family) -> Engine:
    kind = family.kind if family.kind != "mixed" else ("vllm", "sglang")[i % 2]
    return Engine(
        host="h",
        name=f"{kind}-{i}",
        kind=kind,
        url=f"http://127.0.0.1:{18200 + i}",
        base_model=BASE.id,
        gpus=(),
        gpu_slots=family.gpu_slots,
        host_slots=family.slots,
        max_lora_rank=128,
        lora_budget_bytes=None if family.budget_mib is None else family.budget_mib * 2**20,
        api_key_env=None,
        load=LoadModel(),
        request_timeout_s=30.0,
        source=HERE,
    )


def fleet(family: Family, owners: list[str], workflows: dict[str, list[list[str]]]) -> Inventory:
    adapters = {a.id: a for a in (_adapter(i, owners[i]) for i in range(family.adapters))}
    engines = tuple(_engine(i, family) for i in range(family.engines))
    host = Host(
        "h", "onprem", "local", "127.0.0.1", 0, None, None, None, None, None, SshSettings(), "nvidia-smi", engines, HERE
    )
    tenants = {
        t: Tenant(t, None, (), tuple(tuple(c) for c in workflows.get(t, ())) if family.declared else ())
        for t in sorted(set(owners))
    }
    return Inventory(family.name, ("suite",), {BASE.id: BASE}, (host,), adapters, tenants, ())


# --- traffic ---------------------------------------------------------------------------------------------
def _zipf_weights(n: int, s: float) -> list[float]:
    return [1.0 / (k + 1) ** s for k in range(n)]


def _gap(rng: random.Random, mean: float, cv: float) -> float:
    """A gamma-distributed gap with this mean and coefficient of variation (cv 1 = exponential)."""
    if cv <= 0:
        return mean
    shape = 1.0 / (cv * cv)
    return rng.gammavariate(shape, mean / shape)


def build(family: Family, seed: int) -> tuple[Inventory, list[RequestEvent]]:
    rng = random.Random(f"{family.name}:{seed}")
    owners = [f"t{rng.randrange(family.tenants):02d}" for _ in range(family.adapters)]
    workflows: dict[str, list[list[str]]] = {}
    records: list[tuple[float, str, str]] = []
    names = [f"a{i:04d}" for i in range(family.adapters)]
    if family.mode in ("zipf", "drift"):
        records = _popularity(family, rng, names, owners)
    elif family.mode == "workflow":
        records, workflows = _workflows(family, rng, names, owners)
    elif family.mode == "periodic":
        records = _periodic(family, rng, names, owners)
    elif family.mode == "bursty":
        records = _bursty(family, rng, names, owners)
    elif family.mode == "loop":
        records = _loop(family, rng, names, owners)
    else:
        raise ValueError(family.mode)
    records.sort(key=lambda r: r[0])
    events = [RequestEvent(1e9 + t, ADAPTER, a, tenant=tenant, base_model=BASE.id) for t, tenant, a in records]
    return fleet(family, owners, workflows), events[: family.requests]


def _popularity(
    family: Family, rng: random.Random, names: list[str], owners: list[str]
) -> list[tuple[float, str, str]]:
    order = names[:]
    rng.shuffle(order)
    weights = _zipf_weights(len(order), family.zipf)
    cumulative = list(_accumulate(weights))
    now, out = 0.0, []
    for i in range(family.requests):
        if family.mode == "drift" and i and i % family.drift_every == 0:
            order = order[family.drift_shift :] + order[: family.drift_shift]
        now += rng.expovariate(family.rate)
        adapter = order[_pick(cumulative, rng.random() * cumulative[-1])]
        out.append((now, owners[int(adapter[1:])], adapter))
    return out


def _workflows(
    family: Family, rng: random.Random, names: list[str], owners: list[str]
) -> tuple[list[tuple[float, str, str]], dict[str, list[list[str]]]]:
    tenants = sorted(set(owners))
    own = {t: [a for a, o in zip(names, owners, strict=True) if o == t] or names for t in tenants}
    chains = {}
    for t in tenants:
        pool = own[t] if len(own[t]) >= 3 and not family.shared_pool else names
        chains[t] = [rng.sample(pool, min(len(pool), rng.randint(3, 5))) for _ in range(2)]
    out: list[tuple[float, str, str]] = []
    per_session = family.requests // max(1, len(tenants) * family.sessions) + 1
    session_rate = family.rate / max(1, len(tenants) * family.sessions)
    shares = _zipf_weights(len(tenants), family.tenant_skew) if family.tenant_skew else None
    for index, t in enumerate(tenants):
        if shares is not None:  # this tenant's share of the sessions; its requests come over the same span
            share = shares[index] / sum(shares)
            per_session = int(family.requests * share / family.sessions) + 1
            session_rate = family.rate * share / family.sessions
        for _ in range(family.sessions):
            now = rng.uniform(0, 10.0)
            count = 0
            while count < per_session:
                for step in rng.choice(chains[t]):
                    calls = 1 + (
                        int(math.log(rng.random()) / math.log(1 - 1 / family.calls_per_step))
                        if family.calls_per_step > 1
                        else 0
                    )
                    for _ in range(calls):
                        adapter = rng.choice(names) if rng.random() < family.stray else step
                        out.append((now, t, adapter))
                        count += 1
                        now += _gap(rng, 0.2, 0.5)
                    now += _gap(rng, family.think_s, family.think_spread)
                now += _gap(rng, 1.0 / max(session_rate, 1e-6), 1.0)
    return out, chains


def _periodic(family: Family, rng: random.Random, names: list[str], owners: list[str]) -> list[tuple[float, str, str]]:
    span = family.requests / family.rate
    periodic = names[: int(len(names) * family.periodic_share)]
    out = []
    budget = family.requests // 2
    per_adapter = max(1, int(budget / family.calls_per_run) // max(1, len(periodic)))  # timer runs, not calls
    for a in periodic:
        period = span / per_adapter * rng.uniform(0.5, 1.5)
        start = rng.uniform(0, period)
        t = start
        while t < span:
            offset = 0.0 if family.aligned else rng.uniform(0, period * 0.5)
            out.append((t + offset, owners[int(a[1:])], a))
            if family.calls_per_run > 1:  # the run's further calls
                at = t + offset
                for _ in range(int(math.log(rng.random()) / math.log(1 - 1 / family.calls_per_run))):
                    at += _gap(rng, 0.4, 0.5)
                    out.append((at, owners[int(a[1:])], a))
            t += period
    rest = names[len(periodic) :] or names
    cumulative = list(_accumulate(_zipf_weights(len(rest), family.zipf)))
    for _ in range(family.requests - len(out)):
        a = rest[_pick(cumulative, rng.random() * cumulative[-1])]
        out.append((rng.uniform(0, span), owners[int(a[1:])], a))
    return out


def _bursty(family: Family, rng: random.Random, names: list[str], owners: list[str]) -> list[tuple[float, str, str]]:
    tenants = sorted(set(owners))
    own = {t: [a for a, o in zip(names, owners, strict=True) if o == t] or names[:5] for t in tenants}
    span = family.requests / family.rate
    out: list[tuple[float, str, str]] = []
    for t in tenants:
        now = rng.uniform(0, 30)
        weights = list(_accumulate(_zipf_weights(len(own[t]), 1.2)))
        while now < span:
            on = rng.expovariate(1 / 20.0)
            end = now + on
            rate = family.rate / len(tenants) * 4
            while now < end:
                now += rng.expovariate(rate)
                out.append((now, t, own[t][_pick(weights, rng.random() * weights[-1])]))
            now += rng.expovariate(1 / 60.0)
    return out


def _loop(family: Family, rng: random.Random, names: list[str], owners: list[str]) -> list[tuple[float, str, str]]:
    """One tenant's poller walks the first adapters in order, round and round; the rest is Zipf traffic. The
    poller's tenant is made the owner of the adapters it walks (`owners` is changed in place: the fleet reads it)."""
    length = min(len(names) - 1, int(family.loop_factor * family.slots * family.engines))
    cycle, rest = names[:length], names[length:]
    poller = owners[0]
    for i in range(length):
        owners[i] = poller
    cumulative = list(_accumulate(_zipf_weights(len(rest), family.zipf)))
    now, step, out = 0.0, 0, []
    for _ in range(family.requests):
        now += rng.expovariate(family.rate)
        if rng.random() < family.loop_share:
            out.append((now, poller, cycle[step % length]))
            step += 1
        else:
            adapter = rest[_pick(cumulative, rng.random() * cumulative[-1])]
            out.append((now, owners[int(adapter[1:])], adapter))
    return out


def _accumulate(weights: list[float]) -> list[float]:
    total, out = 0.0, []
    for w in weights:
        total += w
        out.append(total)
    return out


def _pick(cumulative: list[float], x: float) -> int:
    """The index whose cumulative weight first reaches x."""
    return min(bisect.bisect_left(cumulative, x), len(cumulative) - 1)


# --- public traces ---------------------------------------------------------------------------------------
def azure_random_offsets(seed: int, minutes: int = 30, cap: int = 30) -> tuple[Inventory, list[RequestEvent]] | None:
    """Azure Functions 2019: each function an adapter, each minute's invocations at random offsets in it."""
    if not AZURE.exists():
        return None
    rng = random.Random(f"azure:{seed}")
    with AZURE.open(newline="") as fh:
        reader = csv.reader(fh)
        next(reader)
        rows = [[min(int(c), cap) for c in row[3 : 3 + minutes]] for row in reader]
    active = [counts for counts in rows if any(counts)]
    owners = [f"t{i % 40:02d}" for i in range(len(active))]
    family = Family("azure-random", adapters=len(active), engines=2, slots=32, gpu_slots=8)
    records = []
    for i, counts in enumerate(active):
        for minute, count in enumerate(counts):
            for _ in range(count):
                records.append((minute * 60.0 + rng.uniform(0, 60.0), owners[i], f"a{i:04d}"))
    records.sort()
    events = [RequestEvent(1e9 + t, ADAPTER, a, tenant=o, base_model=BASE.id) for t, o, a in records]
    return fleet(family, owners, {}), events


def servegen(seed: int, windows: int = 6, max_requests: int = 30000) -> tuple[Inventory, list[RequestEvent]] | None:
    """ServeGen m-mid: each client a tenant with its own Zipf-popular adapters; each 600 s window's rate and CV
    sampled as gamma arrivals (scaled so the whole stream holds about `max_requests`)."""
    if not SERVEGEN.exists():
        return None
    rng = random.Random(f"servegen:{seed}")
    rates: dict[str, list[tuple[float, float]]] = {}
    with gzip.open(SERVEGEN, "rt", newline="") as fh:
        for row in csv.DictReader(fh):
            if int(row["timestamp_s"]) >= windows * 600:
                continue
            rates.setdefault(row["client_id"], []).append((float(row["rate_rps"] or 0), float(row["cv"] or 1)))
    total = sum(r * 600 for series in rates.values() for r, _ in series)
    scale = min(1.0, max_requests / total) if total else 1.0
    clients = sorted(c for c, series in rates.items() if any(r > 0 for r, _ in series))
    names: list[str] = []
    owners: list[str] = []
    own: dict[str, list[str]] = {}
    for c in clients:
        k = 1 + int(rng.paretovariate(1.5)) % 6
        own[c] = [f"a{len(names) + j:04d}" for j in range(k)]
        names += own[c]
        owners += [f"c{c}"] * k
    records = []
    for c in clients:
        weights = list(_accumulate(_zipf_weights(len(own[c]), 1.1)))
        for w, (rate, cv) in enumerate(rates[c]):
            if rate <= 0:
                continue
            now, end = w * 600.0, (w + 1) * 600.0
            mean = 1.0 / (rate * scale)
            while True:
                now += _gap(rng, mean, min(max(cv, 0.1), 4.0))
                if now >= end:
                    break
                records.append((now, f"c{c}", own[c][_pick(weights, rng.random() * weights[-1])]))
    records.sort()
    family = Family("servegen", adapters=len(names), engines=2, slots=16, gpu_slots=4)
    events = [RequestEvent(1e9 + t, ADAPTER, a, tenant=o, base_model=BASE.id) for t, o, a in records]
    return fleet(family, owners, {}), events


def with_requests(family: Family, requests: int) -> Family:
    return replace(family, requests=requests)
