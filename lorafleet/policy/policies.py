"""The policies behind one interface: lru (the engines alone), lfu, lorafleet, and oracle (replay only)."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Sequence

from lorafleet.logs.records import ADAPTER, RequestEvent
from lorafleet.policy.core import DEMAND, PLAN, PREFETCH, Decision, Policy, PolicyCore
from lorafleet.policy.residency import EngineResidency

POLICY_NAMES = ("lru", "lfu", "lorafleet", "oracle")


class LruPolicy(Policy):
    """Load on demand, evict the least recently used: what vLLM and SGLang do by themselves (the baseline)."""

    name = "lru"


class LfuPolicy(Policy):
    """Load on demand, evict the least frequently requested (ties: least recently used)."""

    name = "lfu"

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def victim_order(self, state: EngineResidency, now: float) -> Iterable[str]:
        counts = self.counts
        return sorted(state.resident, key=lambda a: counts.get(a, 0))

    def on_request(self, now: float, event: RequestEvent, engine: str | None, outcome: str) -> list[Decision]:
        adapter = event.adapter
        assert adapter is not None
        self.counts[adapter] = self.counts.get(adapter, 0) + 1
        return []


class LorafleetPolicy(Policy):
    """Plan-based preload, predictive prefetch and demand-aware eviction.

    - Preload: each tenant's pinned adapters on one engine that can serve them (pinned, never evicted), then
      the first steps of their workflows.
    - Prefetch: after each request, the adapters most likely to follow it for that tenant (transition model,
      workflows as priors) are loaded onto the serving engine, displacing only adapters worth less.
    - Eviction: lowest value first. Value is the chance the adapter is requested within the horizon (the
      next `horizon` requests, by default as many as the fleet has adapter slots): from its traffic-aged share
      of requests (LRFU-style popularity), combined with each tenant's prediction of it, weighted by how
      likely that tenant is to send a request within the horizon. A prediction lasts until the tenant's next
      request.
    - Trust: each tenant's predictions are weighed by how often they came true (moving average), so tenants
      without a pattern (or a pattern that drifted) stop causing prefetches and protecting adapters.
    """

    name = "lorafleet"
    honours_pins = True
    observes_demand = True
    initial_trust = 0.3  # a tenant's predictions must prove themselves ...
    initial_trust_declared = 0.6  # ... unless the inventory declares its workflows

    def __init__(
        self,
        min_probability: float = 0.3,
        max_in_flight: int = 2,
        hot_ttl_s: float = 300.0,
        trust_rate: float = 0.1,
    ) -> None:
        self.min_probability = min_probability
        self.max_in_flight = max_in_flight
        self.hot_ttl_s = hot_ttl_s
        self.trust_rate = trust_rate
        self.trust: dict[str | None, float] = {}  # tenant -> share of its predictions that came true
        self.hot: dict[str, dict[str | None, tuple[float, float]]] = {}  # adapter -> tenant -> (p, expires)
        self.predicted: dict[str | None, list[str]] = {}  # tenant -> adapters it is predicted to ask for
        self.recent: dict[str, deque[str]] = {}  # per base model: recently requested adapters (distinct)

    def bind(self, core: PolicyCore) -> None:
        super().bind(core)
        self.horizon = float(sum(e.host_slots or e.gpu_slots for e in core.inventory.engines) or 1)

    # scoring ---------------------------------------------------------------------------------------------
    def score(self, adapter: str, now: float) -> float:
        """Chance of a request for the adapter within the horizon."""
        demand = self.core.demand
        horizon = self.horizon
        miss = math.exp(-demand.share(adapter) * horizon)
        hot = self.hot.get(adapter)
        if hot:
            for tenant, (probability, expires) in hot.items():
                if expires >= now:
                    active = 1.0 - math.exp(-demand.tenant_share(tenant) * horizon)
                    miss *= 1.0 - probability * active
        return 1.0 - miss

    def victim_order(self, state: EngineResidency, now: float) -> Iterable[str]:
        # sorted() is stable and `resident` is in LRU order, so equal values go least recently used first.
        return sorted(state.resident, key=lambda a: self.score(a, now))

    # preload ---------------------------------------------------------------------------------------------
    def start(self, now: float) -> list[Decision]:
        core = self.core
        decisions: list[Decision] = []
        pinned = [a for t in core.inventory.tenants.values() for a in t.pinned]
        heads = [chain[0] for t in core.inventory.tenants.values() for chain in t.workflows if chain]
        engines = core.book.engines
        for adapter in dict.fromkeys(pinned):
            # One resident copy per pool: requests without an engine are routed to where it is resident.
            for engine in sorted(core.pools.get(adapter, ()), key=lambda k: len(engines[k].pins)):
                state = engines[engine]
                if len(state.pins) < self._pin_limit(state) and state.has_room(core.sizes[adapter]):
                    decisions += core.load(now, engine, adapter, PLAN, (), pin=True)
                    break
        for adapter in dict.fromkeys(heads):
            target = self._place(adapter)
            if target is not None and engines[target].has_room(core.sizes[adapter]):
                decisions += core.load(now, target, adapter, PLAN, ())
        return decisions

    @staticmethod
    def _pin_limit(state: EngineResidency) -> int:
        # SGLang allows at most max_loras_per_batch - 1 pinned; keep one host slot free for everything else.
        host = state.budget.host_slots
        limits = [state.budget.gpu_slots - 1] + ([host - 1] if host is not None else [])
        return max(0, min(limits))

    def _place(self, adapter: str) -> str | None:
        core = self.core
        pool = core.pools.get(adapter)
        if not pool:
            return None
        engines = core.book.engines
        for key in pool:
            if engines[key].holds(adapter):
                return key
        return min(pool, key=lambda k: (len(engines[k].in_flight), engines[k].used_slots))

    # prefetch --------------------------------------------------------------------------------------------
    def _remember(self, base: str, adapter: str) -> None:
        recent = self.recent.get(base)
        if recent is None:
            recent = self.recent[base] = deque(maxlen=32)
        if adapter in recent:
            recent.remove(adapter)
        recent.append(adapter)

    def _predict(self, now: float, tenant: str | None, adapter: str) -> list[tuple[str, float]]:
        """Score the tenant's standing predictions against this request, then replace them."""
        hot = self.hot
        previous = self.predicted.pop(tenant, None)
        trust = self.trust.get(tenant)
        if trust is None:
            declared = self.core.inventory.tenants.get(tenant or "")
            trust = self.initial_trust_declared if declared and declared.workflows else self.initial_trust
        if previous is not None:
            came_true = 1.0 if adapter in previous else 0.0
            trust += self.trust_rate * (came_true - trust)
            self.trust[tenant] = trust
            for predicted in previous:
                entry = hot.get(predicted)
                if entry is not None:
                    entry.pop(tenant, None)
                    if not entry:
                        del hot[predicted]
        demand = self.core.demand
        guesses = [(c, p) for c, p in demand.next_after(tenant, adapter, limit=3) if c != adapter]
        if guesses:
            # Every guess is scored next time, acted on or not, so a tenant can earn trust back.
            self.predicted[tenant] = [c for c, _ in guesses]
        # Only what the sequence adds beyond the tenant's usual mix counts: popularity already holds the rest.
        lifted = [(c, max(0.0, p - demand.tenant_mix(tenant, c)) * trust) for c, p in guesses]
        predictions = [(c, q) for c, q in lifted if q >= self.min_probability]
        expires = now + self.hot_ttl_s
        for candidate, probability in predictions:
            hot.setdefault(candidate, {})[tenant] = (probability, expires)
        return predictions

    def on_request(self, now: float, event: RequestEvent, engine: str | None, outcome: str) -> list[Decision]:
        adapter = event.adapter
        assert adapter is not None
        core = self.core
        self._remember(event.base_model or "", adapter)
        predictions = self._predict(now, event.tenant, adapter)
        if engine is None or not predictions:
            return []
        decisions: list[Decision] = []
        engines = core.book.engines
        for candidate, _ in predictions:
            target = engine if engine in core.pools.get(candidate, ()) else self._place(candidate)
            if target is None:
                continue
            state = engines[target]
            if state.holds(candidate) or len(state.in_flight) >= self.max_in_flight:
                continue
            worth = self.score(candidate, now)
            cheaper = [a for a in self.victim_order(state, now) if a != adapter and self.score(a, now) < worth]
            decisions += core.load(now, target, candidate, PREFETCH, cheaper)
        return decisions


class OraclePolicy(Policy):
    """Sees the future (replay only): Belady eviction, and each next-needed adapter loaded as early as the
    engine's one-at-a-time loader allows, displacing only adapters needed later than it. The bound to beat."""

    name = "oracle"
    window = 48

    def __init__(self, events: Sequence[RequestEvent]) -> None:
        self.events = [e for e in events if e.kind == ADAPTER and e.adapter is not None]
        self.positions: dict[str, deque[int]] = {}
        for i, event in enumerate(self.events):
            assert event.adapter is not None
            self.positions.setdefault(event.adapter, deque()).append(i)
        self.position = 0  # index of the next request to arrive
        self.origin = self.events[0].time if self.events else 0.0  # replay time 0

    def start(self, now: float) -> list[Decision]:
        return self._prefetch(now)

    def next_use(self, adapter: str) -> float:
        queue = self.positions.get(adapter)
        return queue[0] if queue else math.inf

    def victim_order(self, state: EngineResidency, now: float) -> Iterable[str]:
        return sorted(state.resident, key=self.next_use, reverse=True)

    def on_request(self, now: float, event: RequestEvent, engine: str | None, outcome: str) -> list[Decision]:
        assert event.adapter is not None
        self.positions[event.adapter].popleft()
        self.position += 1
        return self._prefetch(now)

    def on_load_done(self, now: float, engine: str, adapter: str) -> list[Decision]:
        return self._prefetch(now)

    def _prefetch(self, now: float) -> list[Decision]:
        core = self.core
        engines = core.book.engines
        if all(state.in_flight for state in engines.values()):
            return []
        decisions: list[Decision] = []
        busy: set[str] = set()
        for j in range(self.position, min(len(self.events), self.position + self.window)):
            event = self.events[j]
            adapter = event.adapter
            assert adapter is not None
            target = core.route(event)
            if target is None or target in busy:
                continue
            state = engines[target]
            if state.holds(adapter):
                continue
            if state.in_flight:
                busy.add(target)
                continue
            ready_at = now + core.load_ms[target].cold_ms(core.sizes[adapter]) / 1000.0
            if event.time - self.origin < ready_at:
                continue  # too late to make this request a hit; a later request may still be saved
            later = [a for a in self.victim_order(state, now) if self.next_use(a) > j]
            loaded = core.load(now, target, adapter, PREFETCH, later)
            busy.add(target)
            decisions += loaded
        return decisions


def make_policy(name: str, events: Sequence[RequestEvent] = ()) -> Policy:
    if name == "lru":
        return LruPolicy()
    if name == "lfu":
        return LfuPolicy()
    if name == "lorafleet":
        return LorafleetPolicy()
    if name == "oracle":
        return OraclePolicy(events)
    raise ValueError(f"unknown policy {name!r} (known: {', '.join(POLICY_NAMES)})")


__all__ = ["DEMAND", "POLICY_NAMES", "LfuPolicy", "LorafleetPolicy", "LruPolicy", "OraclePolicy", "make_policy"]
