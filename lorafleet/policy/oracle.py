"""The oracle (replay only): it sees the future; the bound a policy is measured against."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable, Sequence

from mypy_extensions import mypyc_attr

from lorafleet.policy.core import PREFETCH, Decision, Policy
from lorafleet.policy.events import ADAPTER, RequestEvent
from lorafleet.policy.residency import EngineResidency


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class OraclePolicy(Policy):
    """Sees the future (replay only): Belady eviction, and each next-needed adapter loaded as early as the
    engine's one-at-a-time loader allows, displacing only adapters needed later than it. The bound to beat.

    Without `prefetch` it is Belady's MIN alone (`belady`): nothing is loaded before a request asks for it, and
    a load evicts the adapter needed furthest ahead — the most hits any eviction order gives these budgets, exact
    where an eviction is an unload (SGLang) or the touch budget lets vLLM's LRU be steered all the way. What a
    policy reaches beyond it, it reaches by loading ahead of demand."""

    name = "oracle"
    window = 48

    def __init__(self, events: Sequence[RequestEvent], yield_to_demand: bool = False, prefetch: bool = True) -> None:
        self.yield_to_demand = yield_to_demand
        self.prefetch = prefetch
        self.events = [e for e in events if e.kind == ADAPTER and e.adapter is not None]
        self.positions: dict[str, deque[int]] = {}
        for i, event in enumerate(self.events):
            assert event.adapter is not None
            self.positions.setdefault(event.adapter, deque()).append(i)
        self.position = 0  # index of the next request to arrive

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

    def _victims_after(self, state: EngineResidency, now: float, position: int) -> Callable[[], list[str]]:
        """Victims for a prefetch serving request `position`: only adapters needed after it."""
        return lambda: [a for a in self.victim_order(state, now) if self.next_use(a) > position]

    def _prefetch(self, now: float) -> list[Decision]:
        core = self.core
        engines = core.book.engines
        if not self.prefetch or all(state.in_flight for state in engines.values()):
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
            if event.time < ready_at:
                if self.yield_to_demand:
                    # Too late to save this request, and its demand load comes soon: a prefetch started now
                    # would hold the loader and delay it, and what follows it. Leave the loader free.
                    busy.add(target)
                continue  # else: a later request may still be saved
            loaded = core.load(
                now,
                target,
                adapter,
                PREFETCH,
                self._victims_after(state, now, j),
            )
            busy.add(target)
            decisions += loaded
        return decisions


# The oracle is a family of offline schedules; replay keeps the best of them for each trace (it knows the whole
# trace, so choosing the better schedule is itself an offline strategy). Belady's MIN alone is one of them, and a
# policy of its own in replay: the most eviction can give, without loading ahead.
BELADY: dict[str, bool] = {"prefetch": False}
ORACLE_VARIANTS: tuple[dict[str, bool], ...] = ({"yield_to_demand": False}, {"yield_to_demand": True}, BELADY)
