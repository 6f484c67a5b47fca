"""Which eviction order an engine should follow, recency (LRU) or the policy's value: judged by regret.

In the manner of LeCaR (Vietri et al., 2018), but settled pairwise: whenever the two experts would have evicted
different adapters, the pair (evicted, spared) stays open until one of the two is asked for on that engine. If
the evicted one comes first, the expert followed chose wrong and the other earns a point; if the spared one
comes first, the expert followed chose well and earns it. Both experts are judged in either mode, so following
one never hides the other's merit (a shadow LRU compared with actual outcomes could not see value's merit while
LRU was followed). Points decay by request, so the evidence covers the last `memory` turnovers of the engine's
slots; pairs left open expire after as many evictions.

Recency here is by request (a prefetch by its load), kept apart from the book's order, which touches reorder.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Iterator


class _Pair:
    __slots__ = ("chose_lru", "evicted", "open", "spared")

    def __init__(self, evicted: str, spared: str, chose_lru: bool) -> None:
        self.evicted = evicted
        self.spared = spared
        self.chose_lru = chose_lru
        self.open = True


class EvictionExperts:
    """One engine's two eviction experts: request recency, the regret pairs and their decayed points."""

    __slots__ = ("by_adapter", "evidence", "keep", "limit", "pairs", "pending", "recency")

    def __init__(self, slots: int, memory: float) -> None:
        self.keep = 1.0 - 1.0 / (memory * slots)  # per request
        self.limit = memory * slots  # open pairs
        self.evidence = [0.0, 0.0]  # [LRU's points, value's points]
        self.recency: dict[str, None] = {}  # least recently requested first
        self.pairs: deque[_Pair] = deque()
        self.by_adapter: dict[str, list[_Pair]] = {}
        self.pending: tuple[str, bool] | None = None  # (the other expert's victim, LRU followed)

    def follow_lru(self) -> bool:
        """Recency only while it has been clearly better lately: its lead is more than the noise in the count
        of settled disagreements (one standard deviation), so a few lucky pairs do not flip the engine."""
        lru, value = self.evidence
        return lru - value > math.sqrt(lru + value)

    def by_recency(self, resident: Iterable[str]) -> list[str]:
        """The residents, least recently requested first; those never seen arrive (restored, adopted) first."""
        held = dict.fromkeys(resident)
        recency = self.recency
        return [a for a in held if a not in recency] + [a for a in recency if a in held]

    def choose(self, lru_order: list[str], value_order: Iterator[str], pins: set[str]) -> Iterable[str]:
        """The order to evict in, remembering the expert not followed's first victim for the regret pair."""
        chose_lru = self.follow_lru()
        followed: Iterable[str] = lru_order if chose_lru else value_order
        other_order = value_order if chose_lru else iter(lru_order)
        other = next((a for a in other_order if a not in pins), None)
        self.pending = None if other is None else (other, chose_lru)
        return followed

    def requested(self, adapter: str) -> None:
        """A request for `adapter` on this engine: decay, settle its open pairs, make it most recent."""
        evidence = self.evidence
        evidence[0] *= self.keep
        evidence[1] *= self.keep
        recency = self.recency
        recency.pop(adapter, None)
        recency[adapter] = None
        pairs = self.by_adapter.pop(adapter, None)
        if pairs is None:
            return
        for pair in pairs:
            if pair.open:
                pair.open = False
                right = adapter != pair.evicted  # the spared one came first: the expert followed chose well
                evidence[0 if pair.chose_lru == right else 1] += 1.0

    def loaded(self, adapter: str) -> None:
        self.recency.setdefault(adapter, None)  # a prefetch nobody asked for yet: recent by its load

    def evicted(self, adapter: str) -> None:
        """An adapter left the engine; the first victim after `choose` opens a pair when the experts differed."""
        self.recency.pop(adapter, None)
        pending, self.pending = self.pending, None
        if pending is None or pending[0] == adapter:
            return
        pair = _Pair(adapter, *pending)
        pairs, by_adapter = self.pairs, self.by_adapter
        pairs.append(pair)
        by_adapter.setdefault(adapter, []).append(pair)
        by_adapter.setdefault(pair.spared, []).append(pair)
        while len(pairs) > self.limit:
            old = pairs.popleft()
            old.open = False
            for name in (old.evicted, old.spared):
                held = by_adapter.get(name)
                if held is not None and old in held:
                    held.remove(old)
                    if not held:
                        del by_adapter[name]

    def forget_choice(self) -> None:
        """Evictions that follow are not an expert's choice (a prefetch displacing cheaper adapters)."""
        self.pending = None
