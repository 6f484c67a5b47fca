"""Replay: the policy core driven by a log against simulated engines (`policy/engine_model.py`).

The clock is the log's own: no sleeping, no wall clock. A request is a hit when its adapter is resident on the
serving engine when it arrives, late when a load of it is in flight (it waits the remainder), and a miss
otherwise (it waits for a cold load). Cold ms of a request is the time it waited on an adapter load; hits wait 0.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from lorafleet.inventory.model import Inventory
from lorafleet.policy.core import HIT, LATE, UNSERVED, PolicyCore
from lorafleet.policy.engine_model import SimulatedEngines
from lorafleet.policy.events import ADAPTER, BASE, RequestEvent
from lorafleet.policy.placement import Placement
from lorafleet.policy.policies import ONLINE_POLICIES, ORACLE_VARIANTS, make_policy


@dataclass
class PolicyResult:
    policy: str
    requests: int = 0  # adapter requests served by an engine
    hits: int = 0
    late: int = 0
    misses: int = 0
    gpu_hits: int = 0
    base_requests: int = 0
    unknown_requests: int = 0
    unserved: int = 0  # adapter requests no engine can serve (base model or rank)
    cold_ms: list[float] = field(default_factory=list, repr=False)
    copy_ms_total: float = 0.0
    loads: int = 0
    prefetch_loads: int = 0
    prefetch_used: int = 0
    wasted_prefetches: int = 0
    evictions: int = 0
    touches: int = 0
    unloads: int = 0
    bypassed: int = 0
    budget_violations: int = 0
    loader_busy_ms: float = 0.0
    loader_span_ms: float = 0.0
    engines: int = 0
    wall_s: float = 0.0

    @property
    def hit_ratio(self) -> float:
        return self.hits / self.requests if self.requests else 0.0

    @property
    def cold_ms_total(self) -> float:
        return sum(self.cold_ms)

    def cold_ms_percentile(self, q: float) -> float:
        """Nearest-rank percentile over every served adapter request (hits count as 0 ms)."""
        if not self.cold_ms:
            return 0.0
        ordered = sorted(self.cold_ms)
        rank = max(1, min(len(ordered), int(-(-q * len(ordered) // 100))))
        return ordered[rank - 1]

    @property
    def loader_utilization(self) -> float:
        span = self.loader_span_ms * self.engines
        return self.loader_busy_ms / span if span > 0 else 0.0

    @property
    def requests_per_s(self) -> float:
        return self.requests / self.wall_s if self.wall_s > 0 else 0.0


class Simulation:
    def __init__(
        self,
        inventory: Inventory,
        policy: str,
        events: Sequence[RequestEvent],
        variant: int = 0,
        plan: Sequence[Placement] = (),
    ) -> None:
        self.inventory = inventory
        self.events = events
        self.core = PolicyCore(inventory, make_policy(policy, events, variant, plan))
        self.result = PolicyResult(policy, engines=len(inventory.engines))
        budgets = {key: state.budget for key, state in self.core.book.engines.items()}
        self.engines = SimulatedEngines({e.key: e.load for e in inventory.engines}, budgets, self.core.sizes)
        self.waiters: dict[tuple[str, str], list[float]] = {}

    def _complete_until(self, until_ms: float) -> None:
        engines = self.engines
        while engines.completions and engines.next_done_ms() <= until_ms:
            done = engines.pop_done()
            for arrived in self.waiters.pop((done.engine, done.adapter), ()):
                self.result.cold_ms.append(done.done_ms - arrived)
            decisions = self.core.load_finished(done.done_ms / 1000.0, done.engine, done.adapter)
            engines.apply(done.done_ms, decisions)
            engines.start_next(done.done_ms, done.engine)

    def _advance(self, until_ms: float) -> None:
        """Run load completions and the policy's scheduled wakeups in time order up to `until_ms`."""
        core = self.core
        while True:
            wakeup = core.next_wakeup()
            wake_ms = wakeup * 1000.0 if wakeup is not None else float("inf")
            done_ms = self.engines.next_done_ms()
            if min(wake_ms, done_ms) > until_ms:
                return
            if done_ms <= wake_ms:
                self._complete_until(done_ms)
            else:
                assert wakeup is not None
                self.engines.apply(wake_ms, core.tick(wakeup))  # the policy's own time, not a ms round trip

    # the run -------------------------------------------------------------------------------------------------
    def run(self, progress: Callable[[int], None] | None = None) -> PolicyResult:
        started = time.perf_counter()
        result = self.result
        events = self.events
        if not events:
            return result
        origin = events[0].time
        core = self.core
        engines = self.engines
        engines.apply(0.0, core.start(0.0))
        on_request = core.on_request
        route = core.route
        book = core.book.engines
        now_ms = 0.0
        for index, event in enumerate(events):
            if progress is not None and index % 4096 == 0:
                progress(index)
            now_ms = (event.time - origin) * 1000.0
            wakeup = core.next_wakeup()
            if engines.next_done_ms() <= now_ms or (wakeup is not None and wakeup * 1000.0 <= now_ms):
                self._advance(now_ms)  # completions and wakeups in time order: a tick sees the book as of then
            if event.kind != ADAPTER:
                if event.kind == BASE:
                    result.base_requests += 1
                else:
                    result.unknown_requests += 1
                continue
            engine = route(event)
            outcome, decisions = on_request(now_ms / 1000.0, event, engine)
            adapter = event.adapter
            assert adapter is not None
            if outcome == UNSERVED or engine is None:
                result.unserved += 1
                continue
            result.requests += 1
            state = book[engine]
            if outcome == HIT:
                result.hits += 1
                result.cold_ms.append(0.0)
                if state.use_gpu(adapter):
                    result.gpu_hits += 1
                else:
                    result.copy_ms_total += engines.copy_ms(engine, adapter)
            else:
                if outcome == LATE:
                    result.late += 1
                    engines.promote(engine, adapter)
                else:
                    result.misses += 1
                if adapter in state.in_flight:
                    self.waiters.setdefault((engine, adapter), []).append(now_ms)
                else:  # no room could be made: served by a transient load that is not kept
                    result.cold_ms.append(engines.cold_ms(engine, adapter))
            if decisions:
                engines.apply(now_ms, decisions)
        self._complete_until(float("inf"))  # finish what is loading; later wakeups serve no request
        counters = core.counters
        result.loads = counters.loads
        result.prefetch_loads = counters.prefetch_loads
        result.prefetch_used = counters.prefetch_used
        result.wasted_prefetches = counters.wasted_prefetches
        result.evictions = counters.evictions
        result.touches = counters.touches
        result.unloads = counters.unloads
        result.bypassed = counters.bypassed
        result.loader_busy_ms = engines.busy_ms
        result.budget_violations = engines.violations
        # Loads queued near the end finish after the last request: the span runs until the last one is done, so
        # a serial loader is never busy for more than 100% of it.
        result.loader_span_ms = max(now_ms, engines.last_done_ms, 1.0)
        result.wall_s = time.perf_counter() - started
        return result


def replay(
    inventory: Inventory,
    events: Sequence[RequestEvent],
    policies: Sequence[str],
    progress: Callable[[str, int], None] | None = None,
    plan: Sequence[Placement] = (),
) -> list[PolicyResult]:
    """Run each policy over the same events from empty engines (lorafleet from `plan`, when given); the oracle
    last, so it can count the others' schedules among its own."""
    results: dict[str, PolicyResult] = {}
    for name in sorted(policies, key=lambda n: n == "oracle"):
        callback = (lambda i, n=name: progress(n, i)) if progress is not None else None
        results[name] = simulate(inventory, name, events, callback, plan, known=list(results.values()))
    return [results[name] for name in policies]


def simulate(
    inventory: Inventory,
    policy: str,
    events: Sequence[RequestEvent],
    progress: Callable[[int], None] | None = None,
    plan: Sequence[Placement] = (),
    known: Sequence[PolicyResult] = (),
) -> PolicyResult:
    """One policy over the events. The oracle is the best schedule it knows (most hits, then least waiting):
    its own offline schedules, and every online policy's — each of those is a schedule the same engines carry
    out, so a controller that knows the future can do at least as well. So the oracle bounds every policy by
    construction; `known` passes results already computed on the same events (and plan), to reuse them."""
    if policy != "oracle":
        return Simulation(inventory, policy, events, plan=plan).run(progress)
    runs = [Simulation(inventory, policy, events, v).run(progress) for v in range(len(ORACLE_VARIANTS))]
    have = {r.policy for r in known}
    runs += list(known)
    runs += [Simulation(inventory, p, events, plan=plan).run() for p in ONLINE_POLICIES if p not in have]
    best = max(runs, key=lambda r: (r.hits, -r.cold_ms_total))
    return dataclasses.replace(best, policy="oracle", wall_s=sum(r.wall_s for r in runs))


def headroom_captured(result: PolicyResult, lru: PolicyResult, oracle: PolicyResult) -> float | None:
    """(policy − lru) / (oracle − lru) in hit ratio; None when the oracle has no headroom over lru."""
    gap = oracle.hit_ratio - lru.hit_ratio
    if gap <= 1e-12:
        return None
    return (result.hit_ratio - lru.hit_ratio) / gap


__all__ = ["PolicyResult", "Simulation", "headroom_captured", "replay", "simulate"]
