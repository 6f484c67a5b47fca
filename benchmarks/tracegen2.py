"""A second trace generator, written apart from tracegen.py, to judge the policy on traffic it was not tuned on.

Every family is a function `(seed) -> (Inventory, events)` (or None when the data it reads is absent), listed in
FAMILIES2. Each draws its own parameters from the seed — pool sizes, skews, rates, think-time tails — so two seeds
of one family are two fleets, not two samples of one. Tune on TUNE2 only; REPORT2 is for the figures. Nothing
here was fitted to a policy's result.

The shapes (docs/benchmarks.md, "Second generator"):
  wf-shared-pool       agentic chains over one adapter pool shared by every tenant, interleaved sessions
  wf-large-pool        one fixed chain per tenant over a pool far larger than the engines hold (recency fails)
  wf-flat-pool         one fixed chain per tenant over a flat pool, host slots a prefetch can wait in (markov ≫ lru)
  tenants-500-longtail 500+ tenants, long-tailed adapter counts, Zipf activity, re-use bursts
  tool-loops           planner -> tool -> planner -> tool ... loops, planner ~40% of a tenant's traffic
  tool-loops-tight     the same loops, next tool nearly fixed, a flat pool, few host slots (markov > lru)
  diurnal-switch       working sets that switch with (compressed) time of day, sinusoidal rates, regions
  flash-crowd          Zipf background plus short crowds on cold adapters
  real-arrivals        Azure LLM 2023 (Splitwise) arrival instants, tenants and adapters drawn independently
  mixed-ranks-bytes    SGLang and vLLM engines bound by a byte budget, ranks 8-128
  cron-jobs            scheduled jobs (every 10-120 s, some on a shared mark, delayed, skipped) beside Zipf traffic

Only the standard library: `random.Random(f"gen2:{family}:{seed}")` is the one source of randomness.
"""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from lorafleet.errors import Location
from lorafleet.inventory import sizing
from lorafleet.inventory.model import Adapter, BaseModel, Engine, Host, Inventory, LoadModel, SshSettings, Tenant
from lorafleet.policy.events import ADAPTER, RequestEvent

TRACES = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces"
AZURE_LLM = TRACES / "azure_llm_inference_2023"
# A Qwen2.5-7B-shaped base (not tracegen's Llama-3-8B), so sizes per rank differ too.
BASE = BaseModel("qwen2.5-7b", "Qwen/Qwen2.5-7B-Instruct", 3584, 18944, 28, 28, 4, 128, "bfloat16")
ATTN = ("q_proj", "k_proj", "v_proj", "o_proj")
QV = ("q_proj", "v_proj")
EPOCH = 1_900_000_000.0
WHERE = Location("tracegen2", None)
DOMAINS = (
    "code",
    "review",
    "sql",
    "summarize",
    "translate",
    "extract",
    "classify",
    "search",
    "rerank",
    "legal",
    "medical",
    "finance",
    "support",
    "vision",
    "math",
    "chat",
)
TUNE2 = (100, 101)
REPORT2 = (200, 201, 202, 203)

Trace = tuple[Inventory, list[RequestEvent]]


# --- sampling ---------------------------------------------------------------------------------------------
def _rng(family: str, seed: int) -> random.Random:
    return random.Random(f"gen2:{family}:{seed}")


class Weighted:
    """Draws items by fixed weights in O(log n) (cumulative weights + bisect)."""

    def __init__(self, items: list[str], weights: Iterable[float]) -> None:
        self.items = items
        self.cum: list[float] = []
        total = 0.0
        for w in weights:
            total += w
            self.cum.append(total)
        self.total = total

    def draw(self, rng: random.Random) -> str:
        return self.items[min(bisect.bisect_right(self.cum, rng.random() * self.total), len(self.items) - 1)]


def zipf(n: int, s: float) -> list[float]:
    return [1.0 / (k + 1) ** s for k in range(n)]


def lognormal(rng: random.Random, median: float, sigma: float) -> float:
    return median * math.exp(rng.gauss(0.0, sigma))


def pareto(rng: random.Random, scale: float, alpha: float, cap: float) -> float:
    return min(cap, scale * rng.paretovariate(alpha))


def geometric(rng: random.Random, mean: float, cap: int) -> int:
    """1, 2, ... with the given mean (before the cap): each further one with probability 1 - 1/mean."""
    more = 1.0 - 1.0 / max(mean, 1.0)
    k = 1
    while k < cap and rng.random() < more:
        k += 1
    return k


def poisson(rng: random.Random, rate: float, start: float, end: float) -> list[float]:
    out: list[float] = []
    if rate <= 0:
        return out
    t = start + rng.expovariate(rate)
    while t < end:
        out.append(t)
        t += rng.expovariate(rate)
    return out


# --- the fleet --------------------------------------------------------------------------------------------
@dataclass
class Catalog:
    """Adapters as they are named, and who uses them: owners are every tenant whose own traffic asks for one
    (stray calls do not make an owner; an adapter only strays reach keeps an open owner list)."""

    ranks: dict[str, int] = field(default_factory=dict)
    modules: dict[str, tuple[str, ...]] = field(default_factory=dict)
    owners: dict[str, set[str]] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)

    def new(self, domain: str, rank: int, modules: tuple[str, ...] = ATTN) -> str:
        n = self.counters.get(domain, 0) + 1
        self.counters[domain] = n
        name = f"lora-{domain}-{n}"
        self.ranks[name] = rank
        self.modules[name] = modules
        self.owners[name] = set()
        return name

    def own(self, tenant: str, name: str) -> None:
        self.owners[name].add(tenant)

    def adapters(self) -> dict[str, Adapter]:
        out = {}
        for name, rank in self.ranks.items():
            modules = self.modules[name]
            out[name] = Adapter(
                name,
                BASE.id,
                f"/srv/loras/{name}",
                rank,
                modules,
                tuple(sorted(self.owners[name])),
                None,
                sizing.estimate_bytes(BASE, rank, modules),
                "estimated",
                WHERE,
            )
        return out


def _engine(
    index: int,
    kind: str,
    gpu_slots: int,
    host_slots: int | None,
    budget_bytes: int | None = None,
    load: LoadModel | None = None,
) -> Engine:
    return Engine(
        host="gen2-node",
        name=f"{kind}-{index}",
        kind=kind,
        url=f"http://127.0.0.1:{19300 + index}",
        base_model=BASE.id,
        gpus=(index,),
        gpu_slots=gpu_slots,
        host_slots=host_slots,
        max_lora_rank=128,
        lora_budget_bytes=budget_bytes,
        api_key_env=None,
        load=load or LoadModel(),
        request_timeout_s=30.0,
        source=WHERE,
    )


def _host(engines: list[Engine], name: str = "gen2-node") -> Host:
    """The one host every engine of a generated fleet runs on."""
    return Host(
        name,
        "onprem",
        "local",
        "127.0.0.1",
        len(engines),
        None,
        None,
        None,
        None,
        None,
        SshSettings(),
        "nvidia-smi",
        tuple(engines),
        WHERE,
    )


def _inventory(name: str, catalog: Catalog, engines: list[Engine], tenants: Iterable[str]) -> Inventory:
    people = {t: Tenant(t, None, (), ()) for t in sorted(set(tenants))}
    return Inventory(f"gen2-{name}", ("tracegen2",), {BASE.id: BASE}, (_host(engines),), catalog.adapters(), people, ())


def _events(raw: list[tuple[float, str, str]], limit: int, origin: float) -> list[RequestEvent]:
    """Sorted, cut to `limit` requests, shifted so the first is at `origin` (epoch seconds)."""
    raw.sort()
    raw = raw[:limit]
    if not raw:
        return []
    shift = origin - raw[0][0]
    return [RequestEvent(t + shift, ADAPTER, a, tenant, None, BASE.id) for t, a, tenant in raw]


def _rank(rng: random.Random, ranks: tuple[int, ...], weights: tuple[float, ...]) -> int:
    return rng.choices(ranks, weights)[0]


def _tools(rng: random.Random, catalog: Catalog, count: int) -> list[str]:
    """`count` tool adapters of agents (ranks mostly 16), each named after a domain."""
    return [catalog.new(f"tool-{rng.choice(DOMAINS)}", _rank(rng, (8, 16, 32), (2, 3, 1))) for _ in range(count)]


def _pool(
    rng: random.Random, catalog: Catalog, size: tuple[int, int], misc: tuple[int, int]
) -> tuple[list[str], list[str]]:
    """A shared pool of adapters (ranks mostly 16-32) and a few misc ones only stray calls reach."""
    pool = [
        catalog.new(rng.choice(DOMAINS), _rank(rng, (8, 16, 32, 64), (2, 4, 3, 1))) for _ in range(rng.randint(*size))
    ]
    extras = [catalog.new("misc", _rank(rng, (8, 16, 32), (1, 2, 1))) for _ in range(rng.randint(*misc))]
    return pool, extras


def _tenant_names(count: int, prefix: str = "org") -> list[str]:
    return [f"{prefix}-{i:03d}" for i in range(1, count + 1)]


def _owned_adapters(
    rng: random.Random, catalog: Catalog, count: tuple[int, int], owner_pick: Weighted
) -> tuple[list[str], dict[str, str]]:
    """`count` adapters (drawn between the bounds) of any domain, ranks 8-64 (mostly 16-32), each owned by a
    tenant drawn by weight."""
    adapters = [
        catalog.new(rng.choice(DOMAINS), _rank(rng, (8, 16, 32, 64), (2, 3, 2, 1))) for _ in range(rng.randint(*count))
    ]
    return adapters, {a: owner_pick.draw(rng) for a in adapters}


def _background(
    rng: random.Random, background: Weighted, owner: dict[str, str], rate: float, end: float
) -> list[tuple[float, str, str]]:
    """Poisson requests at `rate` from 0 to `end`, each for an adapter drawn from `background`, by its owner."""
    raw: list[tuple[float, str, str]] = []
    for now in poisson(rng, rate, 0.0, end):
        a = background.draw(rng)
        raw.append((now, a, owner[a]))
    return raw


def _weighted_tenants(rng: random.Random, count: tuple[int, int], prefix: str) -> tuple[list[str], Weighted]:
    """`count` tenants (drawn between the bounds), each busy by a lognormal weight (σ 1), and a draw by weight."""
    tenants = _tenant_names(rng.randint(*count), prefix)
    return tenants, Weighted(tenants, [math.exp(rng.gauss(0.0, 1.0)) for _ in tenants])


# --- agentic sessions: chains of steps, a few calls each ----------------------------------------------------
def _chains(
    rng: random.Random,
    tenants: list[str],
    catalog: Catalog,
    step_pick: Weighted,
    count: Callable[[], int],
    length: Callable[[], int],
    distinct: bool,
) -> dict[str, tuple[Weighted, dict[str, list[str]]]]:
    """Per tenant, `count()` chains of `length()` steps drawn from `step_pick` (no step twice in a chain when
    `distinct`, else never twice in a row) and how often it runs each; the tenant is made an owner of each step
    in `catalog`. `count` and `length` draw from `rng` themselves, so the draws keep their order."""
    out: dict[str, tuple[Weighted, dict[str, list[str]]]] = {}
    for t in tenants:
        steps_of: dict[str, list[str]] = {}
        for c in range(count()):
            steps: list[str] = []
            n = length()
            assert not distinct or n <= len(step_pick.items), "fewer adapters than distinct steps"
            while len(steps) < n:
                a = step_pick.draw(rng)
                if (a not in steps) if distinct else (not steps or steps[-1] != a):
                    steps.append(a)
            for a in steps:
                catalog.own(t, a)
            steps_of[f"{t}#{c}"] = steps
        keys = list(steps_of)
        out[t] = (Weighted(keys, [math.exp(rng.gauss(0.0, 0.8)) for _ in keys]), steps_of)
    return out


@dataclass(frozen=True)
class Sessions:
    """How a tenant runs a chain: a geometric number of calls per step (mean `calls_mean`, at most
    `calls_cap`) `gap_median` s apart (lognormal), a Pareto think time between steps, a share of stray calls to
    any adapter, and a share of steps skipped."""

    calls_mean: float
    calls_cap: int
    gap_median: float
    think_scale: float
    think_alpha: float
    think_cap: float
    stray: float
    skip: float = 0.0

    def emit(
        self,
        rng: random.Random,
        weight: dict[str, float],
        chains: dict[str, tuple[Weighted, dict[str, list[str]]]],
        sessions_per_s: float,
        horizon: float,
        everything: list[str],
    ) -> list[tuple[float, str, str]]:
        """Sessions started by a Poisson process per tenant, at its share (`weight`) of `sessions_per_s`."""
        total = sum(weight.values())
        raw: list[tuple[float, str, str]] = []
        for t, (pick, steps_of) in chains.items():
            for start in poisson(rng, sessions_per_s * weight[t] / total, 0.0, horizon):
                now = start
                for step in steps_of[pick.draw(rng)]:
                    if self.skip and rng.random() < self.skip:
                        continue
                    for _ in range(geometric(rng, self.calls_mean, self.calls_cap)):
                        target = rng.choice(everything) if rng.random() < self.stray else step
                        raw.append((now, target, t))
                        now += lognormal(rng, self.gap_median, 0.7)
                    now += pareto(rng, self.think_scale, self.think_alpha, self.think_cap)
        return raw


# --- 1. workflows over a shared pool ----------------------------------------------------------------------
def wf_shared_pool(seed: int) -> Trace:
    """Dozens of tenants (lognormal popularity), each with 1-3 chains of 3-5 steps drawn from one pool shared by
    all; 1-4 calls per step (geometric), Pareto think times between steps, a share of stray calls, sessions
    started by a Poisson process per tenant so many run interleaved."""
    name = "wf-shared-pool"
    rng = _rng(name, seed)
    limit = rng.randint(12_000, 16_000)
    rate = rng.uniform(6.0, 10.0)  # adapter requests per second over the fleet
    catalog = Catalog()
    pool, extras = _pool(rng, catalog, (20, 40), (8, 20))
    rng.shuffle(pool)
    step_pick = Weighted(pool, zipf(len(pool), rng.uniform(0.5, 1.1)))
    tenants = _tenant_names(rng.randint(30, 60))
    sigma = rng.uniform(1.0, 1.6)
    weight = {t: math.exp(rng.gauss(0.0, sigma)) for t in tenants}
    calls_mean = rng.uniform(1.5, 2.5)
    gap_median = rng.uniform(0.15, 0.6)  # between calls of one step
    think_scale, think_alpha = rng.uniform(0.3, 1.2), rng.uniform(1.3, 2.2)
    stray = rng.uniform(0.05, 0.15)
    skip = rng.uniform(0.0, 0.1)  # a step left out of a session now and then
    chains = _chains(
        rng, tenants, catalog, step_pick, lambda: rng.randint(1, 3), lambda: rng.randint(3, 5), distinct=False
    )
    flow = Sessions(calls_mean, 4, gap_median, think_scale, think_alpha, 120.0, stray, skip)
    raw = flow.emit(rng, weight, chains, rate / (4.0 * calls_mean), limit / rate * 1.2, pool + extras)
    gpu = rng.randint(2, 4)
    engines = [_engine(i, "vllm", gpu, 8) for i in range(2)]
    return _inventory(name, catalog, engines, tenants), _events(raw, limit, EPOCH + rng.uniform(0, 3600))


# --- 1b. fixed chains over a pool far larger than the engines hold --------------------------------------------
def wf_large_pool(seed: int) -> Trace:
    """The agentic shape where recency fails and a next-step predictor wins: dozens of tenants of skewed
    popularity, each with one fixed chain (sometimes two) of 2-5 distinct steps drawn from a pool of hundreds of
    adapters shared by all, so the engines' few slots cannot hold the interleaved sessions' steps between calls;
    a few calls per step, Pareto think times, some stray calls. (wf-shared-pool's pool of 20-40 is small enough
    that recency keeps most steps resident between calls.)"""
    name = "wf-large-pool"
    rng = _rng(name, seed)
    limit = rng.randint(12_000, 16_000)
    rate = rng.uniform(6.0, 12.0)
    catalog = Catalog()
    pool, extras = _pool(rng, catalog, (200, 400), (8, 20))
    step_pick = Weighted(pool, zipf(len(pool), rng.uniform(0.5, 1.0)))
    tenants = _tenant_names(rng.randint(40, 100), "team")
    sigma = rng.uniform(0.8, 1.4)
    weight = {t: math.exp(rng.gauss(0.0, sigma)) for t in tenants}
    shortest, longest = rng.choice(((2, 3), (3, 5), (2, 5), (4, 5)))
    calls_mean = rng.uniform(1.5, 3.0)
    gap_median = rng.uniform(0.1, 0.4)  # between calls of one step
    think_scale, think_alpha = rng.uniform(0.4, 1.5), rng.uniform(1.3, 1.8)
    stray = rng.uniform(0.03, 0.15)
    two_chains = rng.uniform(0.0, 0.4)  # the share of tenants with a second chain
    chains = _chains(
        rng,
        tenants,
        catalog,
        step_pick,
        lambda: 2 if rng.random() < two_chains else 1,
        lambda: rng.randint(shortest, longest),
        distinct=True,
    )
    flow = Sessions(calls_mean, 6, gap_median, think_scale, think_alpha, 60.0, stray)
    per_session = (shortest + longest) / 2 * calls_mean
    raw = flow.emit(rng, weight, chains, rate / per_session, limit / rate * 1.2, pool + extras)
    engines = [_engine(i, "vllm", rng.randint(2, 4), rng.randint(8, 16)) for i in range(2)]
    return _inventory(name, catalog, engines, tenants), _events(raw, limit, EPOCH + rng.uniform(0, 3600))


# --- 1c. fixed chains over a flat pool, room for a prefetch to wait for its step ------------------------------
def wf_flat_pool(seed: int) -> Trace:
    """The agentic shape where a next-step prefetch wins by ten points and more: dozens of tenants of skewed
    popularity, each with one fixed chain of 3-5 distinct steps from a pool of hundreds of adapters of nearly flat
    popularity (Zipf 0.3-0.5), so a step's adapter is seldom still resident from another tenant's use; engines
    with host slots enough (10-24) that a prefetched adapter waits there for its step; 1.5-2.2 calls per step, few
    stray calls (2-6%), several sessions interleaved. Written for the issue's independent agentic trace (markov
    0.696 against lru 0.565), which neither generator's other families came near (markov leads lru by at most
    3-4 points on wf-large-pool): parameters chosen for markov's lead over lru alone, before lorafleet ran on it."""
    name = "wf-flat-pool"
    rng = _rng(name, seed)
    limit = rng.randint(12_000, 16_000)
    rate = rng.uniform(6.0, 12.0)
    catalog = Catalog()
    pool, extras = _pool(rng, catalog, (200, 400), (5, 12))
    step_pick = Weighted(pool, zipf(len(pool), rng.uniform(0.3, 0.5)))
    tenants = _tenant_names(rng.randint(30, 60), "crew")
    sigma = rng.uniform(1.0, 1.5)
    weight = {t: math.exp(rng.gauss(0.0, sigma)) for t in tenants}
    calls_mean = rng.uniform(1.5, 2.2)
    think_scale = rng.uniform(0.5, 1.5)
    stray = rng.uniform(0.02, 0.06)
    chains = _chains(rng, tenants, catalog, step_pick, lambda: 1, lambda: rng.randint(3, 5), distinct=True)
    flow = Sessions(calls_mean, 6, rng.uniform(0.1, 0.3), think_scale, rng.uniform(1.3, 1.8), 60.0, stray)
    raw = flow.emit(rng, weight, chains, rate / (4.0 * calls_mean), limit / rate * 1.2, pool + extras)
    engines = [_engine(i, "vllm", rng.randint(2, 4), rng.randint(10, 24)) for i in range(2)]
    return _inventory(name, catalog, engines, tenants), _events(raw, limit, EPOCH + rng.uniform(0, 3600))


# --- 2. 500+ tenants, long-tailed adapter counts ----------------------------------------------------------
def tenants_500_longtail(seed: int) -> Trace:
    """500-700 tenants; adapters per tenant Pareto-distributed (most 1-2, a few dozens); tenant activity Zipf,
    larger tenants tending to be busier; traffic comes in bursts on one of the tenant's own adapters (switching
    within the burst now and then), busy tenants return soon after, and a few public adapters take the rest."""
    name = "tenants-500-longtail"
    rng = _rng(name, seed)
    limit = rng.randint(15_000, 20_000)
    rate = rng.uniform(15.0, 30.0)
    catalog = Catalog()
    tenants = _tenant_names(rng.randint(500, 700), "acct")
    alpha = rng.uniform(1.15, 1.6)
    own: dict[str, Weighted] = {}
    sizes: dict[str, int] = {}
    for t in tenants:
        count = min(40, int(rng.paretovariate(alpha)))
        names = [catalog.new(rng.choice(DOMAINS), _rank(rng, (8, 16, 32, 64), (3, 4, 2, 1))) for _ in range(count)]
        for a in names:
            catalog.own(t, a)
        own[t] = Weighted(names, zipf(count, rng.uniform(0.7, 1.4)))
        sizes[t] = count
    public = [catalog.new("public", 16) for _ in range(rng.randint(5, 12))]
    public_pick = Weighted(public, zipf(len(public), 1.0))
    public_share = rng.uniform(0.02, 0.08)
    order = sorted(tenants, key=lambda t: sizes[t] * math.exp(rng.gauss(0.0, 1.5)), reverse=True)
    tenant_pick = Weighted(order, zipf(len(order), rng.uniform(0.9, 1.25)))
    burst_mean = rng.uniform(2.0, 5.0)
    gap_mean = rng.uniform(0.3, 1.5)
    switch = rng.uniform(0.05, 0.25)
    comeback = rng.uniform(0.15, 0.4)
    recent: list[str] = []
    raw: list[tuple[float, str, str]] = []
    now = 0.0
    while len(raw) < limit:
        now += rng.expovariate(rate / burst_mean)
        if rng.random() < public_share:
            raw.append((now, public_pick.draw(rng), tenant_pick.draw(rng)))
            continue
        t = rng.choice(recent) if recent and rng.random() < comeback else tenant_pick.draw(rng)
        recent.append(t)
        if len(recent) > 30:
            recent.pop(0)
        a = own[t].draw(rng)
        at = now
        for _ in range(geometric(rng, burst_mean, 30)):
            if rng.random() < switch:
                a = own[t].draw(rng)
            raw.append((at, a, t))
            at += rng.expovariate(1.0 / gap_mean)
    gpu, host = rng.choice((4, 6, 8)), rng.choice((16, 24, 32))
    engines = [_engine(i, "vllm", gpu, host) for i in range(rng.randint(2, 3))]
    return _inventory(name, catalog, engines, tenants), _events(raw, limit, EPOCH + rng.uniform(0, 3600))


# --- 3. tool loops ----------------------------------------------------------------------------------------
def tool_loops(seed: int) -> Trace:
    """Agent sessions: a tenant's planner adapter, then a tool, back to the planner, another tool ... for a
    random number of rounds. Tools come from a shared pool plus a few private ones; which tool follows which is
    a fixed, tenant-specific random preference. The planner is about 40% of a tenant's traffic."""
    name = "tool-loops"
    rng = _rng(name, seed)
    limit = rng.randint(12_000, 16_000)
    rate = rng.uniform(6.0, 12.0)
    catalog = Catalog()
    tools = _tools(rng, catalog, rng.randint(18, 30))
    rng.shuffle(tools)
    tool_pick = Weighted(tools, zipf(len(tools), rng.uniform(0.6, 1.0)))
    tenants = _tenant_names(rng.randint(25, 50), "agent")
    weight = {t: math.exp(rng.gauss(0.0, rng.uniform(0.5, 1.0))) for t in tenants}
    loops = _Loops(rng, catalog, tool_pick, tenants, lambda: rng.randint(3, 7), lambda: rng.randint(0, 2), 1.2)
    raw = loops.emit(rng, weight, limit, rate)
    gpu, host = rng.randint(2, 4), rng.randint(6, 10)
    engines = [_engine(i, "vllm", gpu, host) for i in range(2)]
    return _inventory(name, catalog, engines, tenants), _events(raw, limit, EPOCH + rng.uniform(0, 3600))


def tool_loops_tight(seed: int) -> Trace:
    """Tool loops where the next tool is nearly fixed and the engines hold few: a tenant's 2-5 tools from a flat
    pool of 80-150 (Zipf 0.3-0.5), its preference for the next tool sharp (lognormal σ 2-3), 4-6 host slots per
    engine. Recency keeps the planner and little else, and a next-tool prefetch pays: markov leads lru here, as
    on the policy issue's independent tool-loop trace (markov 0.469 there), where it trails lru on tool-loops."""
    name = "tool-loops-tight"
    rng = _rng(name, seed)
    limit = rng.randint(12_000, 16_000)
    rate = rng.uniform(6.0, 12.0)
    catalog = Catalog()
    tools = _tools(rng, catalog, rng.randint(80, 150))
    tool_pick = Weighted(tools, zipf(len(tools), rng.uniform(0.3, 0.5)))
    tenants = _tenant_names(rng.randint(30, 50), "bot")
    weight = {t: math.exp(rng.gauss(0.0, rng.uniform(0.6, 1.0))) for t in tenants}
    sharp = rng.uniform(2.0, 3.0)
    loops = _Loops(rng, catalog, tool_pick, tenants, lambda: rng.randint(2, 5), lambda: 0, sharp)
    raw = loops.emit(rng, weight, limit, rate)
    engines = [_engine(i, "vllm", 2, rng.randint(4, 6)) for i in range(2)]
    return _inventory(name, catalog, engines, tenants), _events(raw, limit, EPOCH + rng.uniform(0, 3600))


class _Loops:
    """Each tenant's planner, its tools (`shared()` from the pool, `private()` of its own) and, per last tool, its
    fixed random preference for the next (lognormal weights of spread `sharp`); then the sessions."""

    def __init__(
        self,
        rng: random.Random,
        catalog: Catalog,
        tool_pick: Weighted,
        tenants: list[str],
        shared: Callable[[], int],
        private: Callable[[], int],
        sharp: float,
    ) -> None:
        self.catalog = catalog
        self.planner: dict[str, str] = {}
        self.follows: dict[str, dict[str, Weighted]] = {}
        for t in tenants:
            self.planner[t] = catalog.new("planner", _rank(rng, (16, 32, 64), (2, 2, 1)))
            catalog.own(t, self.planner[t])
            mine: list[str] = []
            while len(mine) < shared():
                a = tool_pick.draw(rng)
                if a not in mine:
                    mine.append(a)
            mine += [catalog.new("tool-private", 8) for _ in range(private())]
            for a in mine:
                catalog.own(t, a)
            self.follows[t] = {
                prev: Weighted(mine, [math.exp(rng.gauss(0.0, sharp)) for _ in mine]) for prev in ["", *mine]
            }

    def emit(
        self, rng: random.Random, weight: dict[str, float], limit: int, rate: float
    ) -> list[tuple[float, str, str]]:
        """Sessions started by a Poisson process per tenant: planner, tool (a geometric number of calls), back to
        the planner, for a geometric number of rounds; the planner answers last."""
        planner, follows = self.planner, self.follows
        rounds_mean = rng.uniform(3.0, 7.0)
        tool_calls = rng.uniform(1.6, 2.3)
        plan_gap = rng.uniform(0.15, 0.5)  # planner -> tool
        tool_gap = rng.uniform(0.4, 2.0)  # tool runs, back to the planner
        stray = rng.uniform(0.01, 0.05)
        everything = list(self.catalog.ranks)
        per_session = rounds_mean * (1.1 + tool_calls) + 1.0
        horizon = limit / rate * 1.2
        total = sum(weight.values())
        raw: list[tuple[float, str, str]] = []
        for t in weight:
            for start in poisson(rng, rate / per_session * weight[t] / total, 0.0, horizon):
                now, prev = start, ""
                for _ in range(geometric(rng, rounds_mean, 20)):
                    for _ in range(2 if rng.random() < 0.05 else 1):
                        raw.append((now, planner[t], t))
                        now += lognormal(rng, plan_gap, 0.5)
                    prev = follows[t][prev].draw(rng)
                    for _ in range(geometric(rng, tool_calls, 4)):
                        raw.append((now, rng.choice(everything) if rng.random() < stray else prev, t))
                        now += lognormal(rng, 0.2, 0.5)
                    now += lognormal(rng, tool_gap, 1.0)
                raw.append((now, planner[t], t))  # the planner answers
        return raw


# --- 4. diurnal working sets ------------------------------------------------------------------------------
def diurnal_switch(seed: int) -> Trace:
    """A compressed day (2-5 minutes), 3-5 of them. Tenants sit in 2-4 regions (phase offsets); each region's
    rate is sinusoidal, and each tenant has a daytime and a night-time working set, switched softly with its
    local time. Some daytime sets include shared adapters."""
    name = "diurnal-switch"
    rng = _rng(name, seed)
    limit = rng.randint(12_000, 18_000)
    day = rng.uniform(120.0, 300.0)
    horizon = day * rng.randint(3, 5)
    amplitude = rng.uniform(0.5, 0.9)
    sharpness = rng.uniform(3.0, 10.0)
    regions = rng.randint(2, 4)
    phases = [(r / regions + rng.uniform(-0.05, 0.05)) % 1.0 for r in range(regions)]
    catalog = Catalog()
    common = [catalog.new("common", 16) for _ in range(rng.randint(3, 8))]
    tenants = _tenant_names(rng.randint(20, 40), "tz")
    region = {t: rng.randrange(regions) for t in tenants}
    weight = {t: math.exp(rng.gauss(0.0, 1.0)) for t in tenants}
    sets: dict[str, tuple[Weighted, Weighted]] = {}
    within = rng.uniform(0.6, 1.2)
    for t in tenants:
        day_set = [
            catalog.new(rng.choice(DOMAINS), _rank(rng, (8, 16, 32, 64), (2, 3, 2, 1)))
            for _ in range(rng.randint(2, 6))
        ]
        if rng.random() < 0.4:
            day_set.append(rng.choice(common))
        night_set = [
            catalog.new(f"batch-{rng.choice(DOMAINS)}", _rank(rng, (8, 16, 32), (1, 2, 1)))
            for _ in range(rng.randint(1, 4))
        ]
        if rng.random() < 0.3:
            night_set.append(day_set[0])  # one adapter used around the clock
        for a in day_set + night_set:
            catalog.own(t, a)
        sets[t] = (Weighted(day_set, zipf(len(day_set), within)), Weighted(night_set, zipf(len(night_set), within)))
    mean_rate = limit / horizon * 1.1
    peak = mean_rate * (1.0 + amplitude)
    tenant_pick = Weighted(tenants, [weight[t] for t in tenants])
    raw: list[tuple[float, str, str]] = []
    for now in poisson(rng, peak, 0.0, horizon):  # thinning: accept at rate(t) / peak
        t = tenant_pick.draw(rng)
        wave = math.sin(2.0 * math.pi * (now / day + phases[region[t]]))
        if rng.random() * (1.0 + amplitude) > 1.0 + amplitude * wave:
            continue
        daytime = rng.random() < 1.0 / (1.0 + math.exp(-sharpness * wave))
        raw.append((now, sets[t][0 if daytime else 1].draw(rng), t))
    host = rng.randint(12, 20)
    engines = [_engine(i, "vllm", 4, host) for i in range(2)]
    return _inventory(name, catalog, engines, tenants), _events(raw, limit, EPOCH + rng.uniform(0, 3600))


# --- 5. flash crowds --------------------------------------------------------------------------------------
def flash_crowd(seed: int) -> Trace:
    """Steady Zipf background over 150-300 adapters, plus 3-6 crowds: each on 1-3 cold adapters (tail ranks or
    ones never asked for before), rising over a few seconds to 0.5-1.5x the background rate, holding 8-40 s and
    decaying."""
    name = "flash-crowd"
    rng = _rng(name, seed)
    limit = rng.randint(14_000, 18_000)
    rate = rng.uniform(12.0, 25.0)
    catalog = Catalog()
    tenants, owner_pick = _weighted_tenants(rng, (15, 30), "app")
    adapters, owner = _owned_adapters(rng, catalog, (150, 300), owner_pick)
    rng.shuffle(adapters)
    background = Weighted(adapters, zipf(len(adapters), rng.uniform(0.8, 1.15)))
    horizon = limit / rate
    raw = _background(rng, background, owner, rate, horizon * 1.5)
    tail = adapters[int(len(adapters) * 0.6) :]
    for _ in range(rng.randint(3, 6)):
        start = rng.uniform(0.1, 0.85) * horizon
        hot = []
        for _ in range(rng.randint(1, 3)):
            if rng.random() < 0.5:
                a = catalog.new("launch", _rank(rng, (8, 16, 32), (1, 2, 1)))
                owner[a] = owner_pick.draw(rng)
            else:
                a = rng.choice(tail)
            hot.append(a)
        crowd_rate = rng.uniform(0.5, 1.5) * rate
        rise, hold, decay = rng.uniform(0.5, 3.0), rng.uniform(8.0, 40.0), rng.uniform(2.0, 10.0)
        crowd_pick = Weighted(hot, zipf(len(hot), 1.0))
        for now in poisson(rng, crowd_rate, 0.0, rise + hold + 5 * decay):
            level = now / rise if now < rise else (1.0 if now < rise + hold else math.exp(-(now - rise - hold) / decay))
            if rng.random() < level:
                a = crowd_pick.draw(rng)
                raw.append((start + now, a, owner[a]))
    for a, t in owner.items():
        catalog.own(t, a)
    host = rng.choice((12, 16, 24))
    engines = [_engine(i, "vllm", 4, host) for i in range(2)]
    return _inventory(name, catalog, engines, tenants), _events(raw, limit, EPOCH + rng.uniform(0, 3600))


# --- 6. real arrivals -------------------------------------------------------------------------------------
def _splitwise(path: Path) -> list[float]:
    """Seconds of the day of each request in one Azure LLM 2023 file (`YYYY-MM-DD HH:MM:SS.fffffff,...`)."""
    out = []
    with path.open(encoding="utf-8") as fh:
        next(fh)
        for line in fh:
            stamp = line.split(",", 1)[0]
            clock = stamp.split(" ", 1)[1]
            h, m, s = clock.split(":")
            out.append(int(h) * 3600 + int(m) * 60 + float(s))
    return out


def real_arrivals(seed: int) -> Trace | None:
    """The arrival instants of the Azure LLM inference trace 2023 (Splitwise; code and conversation services,
    very bursty code stream), a window of 12-16k requests from the code, the conversation or both merged. The
    trace names no tenant or model, so code requests go to code tenants and chat requests to chat tenants,
    drawn by gamma-distributed popularity; an arrival continues one of the live sessions (same tenant, mostly the
    same adapter) or opens a new one. None when the shared traces are absent."""
    name = "real-arrivals"
    code_file, conv_file = AZURE_LLM / "AzureLLMInferenceTrace_code.csv", AZURE_LLM / "AzureLLMInferenceTrace_conv.csv"
    if not code_file.is_file() or not conv_file.is_file():
        return None
    rng = _rng(name, seed)
    source = rng.choice(("code", "conv", "both"))
    stream: list[tuple[float, str]] = []
    if source in ("code", "both"):
        stream += [(t, "code") for t in _splitwise(code_file)]
    if source in ("conv", "both"):
        stream += [(t, "chat") for t in _splitwise(conv_file)]
    stream.sort()
    limit = min(len(stream), rng.randint(12_000, 16_000))
    first = rng.randint(0, len(stream) - limit)
    stream = stream[first : first + limit]
    catalog = Catalog()
    picks: dict[str, Weighted] = {}
    own: dict[str, Weighted] = {}
    tenants: list[str] = []
    for service, count in (("code", rng.randint(8, 20)), ("chat", rng.randint(15, 40))):
        names = _tenant_names(count, f"{service}-team")
        tenants += names
        shape = rng.uniform(0.3, 0.7)
        picks[service] = Weighted(names, [rng.gammavariate(shape, 1.0) + 1e-9 for _ in names])
        mean_count = rng.uniform(2.0, 6.0)
        for t in names:
            mine = [
                catalog.new(
                    service if rng.random() < 0.5 else rng.choice(DOMAINS), _rank(rng, (8, 16, 32, 64), (2, 3, 2, 1))
                )
                for _ in range(min(15, 1 + int(rng.expovariate(1.0 / mean_count))))
            ]
            for a in mine:
                catalog.own(t, a)
            own[t] = Weighted(mine, zipf(len(mine), rng.uniform(0.8, 1.4)))
    carry_on = rng.uniform(0.4, 0.75)
    switch = rng.uniform(0.1, 0.3)
    life_median = rng.uniform(5.0, 30.0)
    live: dict[str, list[tuple[float, str, str]]] = {"code": [], "chat": []}  # (ends, tenant, adapter)
    raw: list[tuple[float, str, str]] = []
    for now, service in stream:
        sessions = [s for s in live[service] if s[0] > now]
        if sessions and rng.random() < carry_on:
            i = rng.randrange(len(sessions))
            ends, t, a = sessions[i]
            if rng.random() < switch:
                a = own[t].draw(rng)
                sessions[i] = (ends, t, a)
        else:
            t = picks[service].draw(rng)
            a = own[t].draw(rng)
            sessions.append((now + lognormal(rng, life_median, 1.0), t, a))
        live[service] = sessions
        raw.append((now, a, t))
    host = rng.randint(8, 12)
    engines = [_engine(i, "vllm", 4, host) for i in range(2)]
    return _inventory(name, catalog, engines, tenants), _events(raw, limit, EPOCH + rng.uniform(0, 3600))


# --- 7. byte-bound, mixed ranks and kinds -----------------------------------------------------------------
def mixed_ranks_bytes(seed: int) -> Trace:
    """1-2 SGLang and 1-2 vLLM engines, each with a byte budget of 200-450 MiB and slots to spare (16 GPU, 64
    host), over 150-250 adapters of ranks 8-128 (attention or q/v only): the byte budget binds, not the slots.
    Popularity is Zipf and independent of size; traffic comes in short per-tenant bursts; disks are slower, so
    a large adapter's cold load costs more."""
    name = "mixed-ranks-bytes"
    rng = _rng(name, seed)
    limit = rng.randint(12_000, 16_000)
    rate = rng.uniform(8.0, 16.0)
    catalog = Catalog()
    tenants, owner_pick = _weighted_tenants(rng, (10, 25), "biz")
    adapters = []
    for _ in range(rng.randint(150, 250)):
        modules = ATTN if rng.random() < 0.7 else QV
        adapters.append(catalog.new(rng.choice(DOMAINS), _rank(rng, (8, 16, 32, 64, 128), (5, 5, 4, 3, 2)), modules))
    owner = {a: owner_pick.draw(rng) for a in adapters}
    for a, t in owner.items():
        catalog.own(t, a)
    rng.shuffle(adapters)
    pick = Weighted(adapters, zipf(len(adapters), rng.uniform(0.7, 1.0)))
    burst_mean, gap_mean = rng.uniform(1.5, 4.0), rng.uniform(0.2, 1.0)
    raw: list[tuple[float, str, str]] = []
    now = 0.0
    while len(raw) < limit:
        now += rng.expovariate(rate / burst_mean)
        a, at = pick.draw(rng), now
        for _ in range(geometric(rng, burst_mean, 20)):
            raw.append((at, a, owner[a]))
            at += rng.expovariate(1.0 / gap_mean)
    load = LoadModel(load_fixed_ms=rng.uniform(10.0, 25.0), disk_gbps=rng.uniform(1.0, 2.5), h2d_gbps=20.0)
    kinds = ["sglang"] * rng.randint(1, 2) + ["vllm"] * rng.randint(1, 2)
    engines = [_engine(i, kind, 16, 64, int(rng.uniform(200, 450) * 2**20), load) for i, kind in enumerate(kinds)]
    return _inventory(name, catalog, engines, tenants), _events(raw, limit, EPOCH + rng.uniform(0, 3600))


# --- 8. scheduled jobs ------------------------------------------------------------------------------------
def cron_jobs(seed: int) -> Trace:
    """Scheduled jobs beside interactive traffic. 20-60 jobs, each a tenant's batch adapter (a fifth of them one
    the interactive traffic uses too) run every 10-120 s: part on a shared minute mark, the rest at their own
    offset; each run starts after a scheduler delay (lognormal), is skipped now and then, and makes 1-4 calls a
    short think apart. Background: Zipf over 100-250 adapters from 10-30 tenants, Poisson 6-15 requests/s."""
    name = "cron-jobs"
    rng = _rng(name, seed)
    limit = rng.randint(12_000, 16_000)
    rate = rng.uniform(6.0, 15.0)
    catalog = Catalog()
    tenants, owner_pick = _weighted_tenants(rng, (10, 30), "svc")
    adapters, owner = _owned_adapters(rng, catalog, (100, 250), owner_pick)
    background = Weighted(adapters, zipf(len(adapters), rng.uniform(0.7, 1.1)))
    horizon = limit / rate
    raw = _background(rng, background, owner, rate, horizon)
    aligned = rng.uniform(0.2, 0.7)
    delay_median, delay_sigma = rng.uniform(0.1, 1.5), rng.uniform(0.3, 1.0)
    skip = rng.uniform(0.0, 0.1)
    for _ in range(rng.randint(20, 60)):
        tenant = owner_pick.draw(rng)
        if rng.random() < 0.2:
            job = rng.choice(adapters[len(adapters) // 4 :])
        else:
            job = catalog.new(f"batch-{rng.choice(DOMAINS)}", _rank(rng, (8, 16, 32), (1, 2, 1)))
            owner[job] = tenant
        period = rng.choice((10.0, 15.0, 20.0, 30.0, 45.0, 60.0, 90.0, 120.0))
        offset = 0.0 if rng.random() < aligned else rng.uniform(0.0, period)
        calls = rng.randint(1, 4)
        tick = offset
        while tick < horizon:
            if rng.random() >= skip:
                at = tick + lognormal(rng, delay_median, delay_sigma)
                for _ in range(calls):
                    raw.append((at, job, tenant))
                    at += lognormal(rng, 0.4, 0.6)
            tick += period
    for a, t in owner.items():
        catalog.own(t, a)
    host = rng.choice((8, 12, 16))
    engines = [_engine(i, "vllm", 4, host) for i in range(2)]
    return _inventory(name, catalog, engines, tenants), _events(raw, limit, EPOCH + rng.uniform(0, 3600))


FAMILIES2: dict[str, Callable[[int], Trace | None]] = {
    "wf-shared-pool": wf_shared_pool,
    "wf-large-pool": wf_large_pool,
    "wf-flat-pool": wf_flat_pool,
    "tenants-500-longtail": tenants_500_longtail,
    "tool-loops": tool_loops,
    "tool-loops-tight": tool_loops_tight,
    "diurnal-switch": diurnal_switch,
    "flash-crowd": flash_crowd,
    "real-arrivals": real_arrivals,
    "mixed-ranks-bytes": mixed_ranks_bytes,
    "cron-jobs": cron_jobs,
}

__all__ = ["FAMILIES2", "REPORT2", "TUNE2", "Trace"]
