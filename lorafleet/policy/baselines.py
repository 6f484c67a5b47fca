"""Strong baselines, each realisable with what the engines let a controller do: lru, aged lfu, arc, W-TinyLFU
and a per-tenant next-adapter prefetcher on top of LRU (markov).

Every one of them keeps its own state and sees the fleet only through the residency book it is handed. The
sizes they depend on are the engine's own slot counts, never constants fitted to a trace.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

from mypy_extensions import mypyc_attr

from lorafleet.policy.core import PREFETCH, Decision, Policy, PolicyCore
from lorafleet.policy.events import RequestEvent
from lorafleet.policy.residency import EngineResidency


def capacity(state: EngineResidency) -> int:
    """How many adapters an engine keeps: its host slots (SGLang without a cap: its GPU slots, at least)."""
    return max(1, state.budget.slot_cap)


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class LruPolicy(Policy):
    """Load on demand, evict the least recently used: what vLLM and SGLang do by themselves (the baseline)."""

    name = "lru"


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class AgedCounts:
    """Request counts halved every `period` requests (TinyLFU's reset), so old popularity fades."""

    def __init__(self, period: int) -> None:
        self.period = max(1, period)
        self.counts: dict[str, float] = {}
        self.seen = 0

    def add(self, key: str) -> None:
        counts = self.counts
        counts[key] = counts.get(key, 0.0) + 1.0
        self.seen += 1
        if self.seen >= self.period:
            self.seen = 0
            for k in list(counts):
                counts[k] /= 2.0
                if counts[k] < 0.25:
                    del counts[k]

    def get(self, key: str) -> float:
        return self.counts.get(key, 0.0)


def _counts(policy: Policy, core: PolicyCore) -> AgedCounts:
    """The policy's request counts, aged every ten turnovers of the fleet's slots. Bound again (a reload, pods
    found or gone on Kubernetes, a restart's memory on a changed fleet), it keeps what it counted: only the
    period follows the fleet. (It started again from nothing at every such change, so under autoscaling the
    lfu and wtinylfu experts never knew more than the last few minutes.)"""
    period = 10 * sum(capacity(s) for s in core.book.engines.values())
    counts = getattr(policy, "counts", None)
    if isinstance(counts, AgedCounts):
        counts.period = max(1, period)
        return counts
    return AgedCounts(period)


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class LfuPolicy(Policy):
    """Load on demand, evict the least frequently requested (ties: least recently used); counts age by half every
    ten turnovers of the fleet's slots."""

    name = "lfu"

    def bind(self, core: PolicyCore) -> None:
        super().bind(core)
        self.counts = _counts(self, core)

    def victim_order(self, state: EngineResidency, now: float) -> Iterable[str]:
        get = self.counts.get
        return sorted(state.resident, key=get)  # stable: ties stay least recently used first

    def on_request(self, now: float, event: RequestEvent, engine: str | None, outcome: str) -> list[Decision]:
        assert event.adapter is not None
        self.counts.add(event.adapter)
        return []


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class _ArcLists:
    """One engine's ARC lists: t1 (seen once lately), t2 (seen at least twice), their ghosts b1 and b2, and the
    adaptive target size p of t1 (Megiddo and Modha, 2003)."""

    def __init__(self, size: int) -> None:
        self.c = size
        self.p = 0.0
        self.t1: OrderedDict[str, None] = OrderedDict()
        self.t2: OrderedDict[str, None] = OrderedDict()
        self.b1: OrderedDict[str, None] = OrderedDict()
        self.b2: OrderedDict[str, None] = OrderedDict()

    def request(self, adapter: str) -> None:
        if adapter in self.t1:
            del self.t1[adapter]
            self.t2[adapter] = None
        elif adapter in self.t2:
            self.t2.move_to_end(adapter)
        elif adapter in self.b1:  # a recency ghost came back: give recency more room
            self.p = min(float(self.c), self.p + max(len(self.b2) / len(self.b1), 1.0))
            del self.b1[adapter]
            self.t2[adapter] = None
        elif adapter in self.b2:  # a frequency ghost came back: give frequency more room
            self.p = max(0.0, self.p - max(len(self.b1) / len(self.b2), 1.0))
            del self.b2[adapter]
            self.t2[adapter] = None
        else:
            self.t1[adapter] = None

    def evicted(self, adapter: str) -> None:
        if adapter in self.t1:
            del self.t1[adapter]
            self.b1[adapter] = None
        elif adapter in self.t2:
            del self.t2[adapter]
            self.b2[adapter] = None
        while len(self.b1) > self.c:
            self.b1.popitem(last=False)
        while len(self.b2) > self.c:
            self.b2.popitem(last=False)

    def order(self, resident: Iterable[str]) -> list[str]:
        """Residents in ARC's eviction order: t1's oldest first while t1 is over its target p, else t2's."""
        held = list(resident)
        t1 = [a for a in self.t1 if a in held]
        t2 = [a for a in self.t2 if a in held]
        others = [a for a in held if a not in self.t1 and a not in self.t2]  # e.g. restored: oldest first
        first, second = (t1, t2) if t1 and len(t1) > self.p else (t2, t1)
        return others + first + second


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class ArcPolicy(Policy):
    """Adaptive Replacement Cache per engine: balances recency and frequency by the ghosts of what it evicted."""

    name = "arc"

    def bind(self, core: PolicyCore) -> None:
        super().bind(core)
        learned: dict[str, _ArcLists] = getattr(self, "lists", {})  # bound again: kept where the engine stayed
        self.lists = {}
        for key, state in core.book.engines.items():
            lists = learned.get(key)
            self.lists[key] = lists if lists is not None and lists.c == capacity(state) else _ArcLists(capacity(state))

    def victim_order(self, state: EngineResidency, now: float) -> Iterable[str]:
        return self.lists[state.key].order(state.resident)

    def on_request(self, now: float, event: RequestEvent, engine: str | None, outcome: str) -> list[Decision]:
        if engine is not None and event.adapter is not None:
            self.lists[engine].request(event.adapter)
        return []

    def on_evicted(self, now: float, engine: str, adapter: str) -> None:
        self.lists[engine].evicted(adapter)


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class WTinyLfuPolicy(Policy):
    """W-TinyLFU per engine: a small window of the newest adapters (1% of the slots, at least 1, at most 2), and a
    main area that admits the window's oldest only when it has been requested more often (aged counts) than the
    main area's least recently used (Einziger, Friedman and Manes, 2017)."""

    name = "wtinylfu"

    def bind(self, core: PolicyCore) -> None:
        super().bind(core)
        self.counts = _counts(self, core)
        learned: dict[str, OrderedDict[str, None]] = getattr(self, "windows", {})  # bound again: kept
        self.windows = {key: learned.get(key, OrderedDict()) for key in core.book.engines}
        self.window_size = {key: min(2, max(1, capacity(s) // 100)) for key, s in core.book.engines.items()}

    def victim_order(self, state: EngineResidency, now: float) -> Iterable[str]:
        window = self.windows[state.key]
        main = [a for a in state.resident if a not in window]
        candidates = [a for a in window if a in state.resident]
        if len(window) < self.window_size[state.key] or not candidates or not main:
            return main + candidates
        # The newcomer pushes the window's oldest out: it stays only if it is wanted more than main's oldest.
        candidate, incumbent = candidates[0], main[0]
        if self.counts.get(candidate) > self.counts.get(incumbent):
            del window[candidate]  # admitted to the main area
            return main + candidates[1:] + [candidate]
        return [candidate, *main, *candidates[1:]]

    def on_request(self, now: float, event: RequestEvent, engine: str | None, outcome: str) -> list[Decision]:
        adapter = event.adapter
        assert adapter is not None
        self.counts.add(adapter)
        if engine is not None:
            window = self.windows[engine]
            if adapter in window:
                window.move_to_end(adapter)
            elif outcome != "hit":  # a newcomer enters through the window; the oldest there moves to main
                window[adapter] = None
                while len(window) > self.window_size[engine]:
                    window.popitem(last=False)
        return []

    def on_evicted(self, now: float, engine: str, adapter: str) -> None:
        self.windows[engine].pop(adapter, None)


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class MarkovPolicy(Policy):
    """LRU, plus a per-tenant next-adapter prefetch: on the first call of a new step (repeats collapsed), the
    tenant's most frequent successor of this adapter is loaded on the serving engine when it has come next at
    least half the time (counts shrunk by one pseudo-count)."""

    name = "markov"
    min_probability = 0.5

    def __init__(self) -> None:
        self.last: dict[str | None, str] = {}
        self.successors: dict[tuple[str | None, str], dict[str, int]] = {}

    def forget_tenant(self, tenant: str, adapters: set[str]) -> None:
        self.last.pop(tenant, None)
        for adapter in adapters:
            self.successors.pop((tenant, adapter), None)

    def on_request(self, now: float, event: RequestEvent, engine: str | None, outcome: str) -> list[Decision]:
        adapter = event.adapter
        assert adapter is not None
        tenant = event.tenant
        previous = self.last.get(tenant)
        if previous == adapter:
            return []  # the same step again: no new information, no new prediction
        self.last[tenant] = adapter
        if previous is not None:
            seen = self.successors.setdefault((tenant, previous), {})
            seen[adapter] = seen.get(adapter, 0) + 1
        row = self.successors.get((tenant, adapter))
        if engine is None or not row:
            return []
        guess, count = max(row.items(), key=lambda kv: kv[1])
        if count / (sum(row.values()) + 1) < self.min_probability or engine not in self.core.serving.get(guess, ()):
            return []
        state = self.core.book.engines[engine]
        return self.core.load(now, engine, guess, PREFETCH, lambda: (a for a in state.resident if a != adapter))
