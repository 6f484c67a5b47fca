"""How lorafleet picks an engine's eviction order among experts: judged by regret, never by a fitted constant.

Two choices are made per engine, each between a default expert and a challenger:
- recency (LRU, the challenger) or value (the default: popularity raised by live predictions);
- for value, the popularity memory: the blend of a short and a 32x longer one (the default), or the short one
  alone (the challenger), which follows a drifting hot set sooner.

Each choice is judged in the manner of LeCaR (Vietri et al., 2018), but settled pairwise: whenever the two
experts would have evicted different adapters, the pair (evicted, spared) stays open until one of the two is
asked for on that engine. If the evicted one comes first, the expert followed chose wrong and the other earns a
point; if the spared one comes first, the expert followed chose well and earns it. Both experts are judged
whichever is followed, so following one never hides the other's merit (a shadow LRU compared with actual
outcomes could not see value's merit while LRU was followed). Points decay by request over the last `memory`
turnovers of the engine's slots; pairs left open expire after as many evictions. The challenger is followed only
while its lead is more than one standard deviation of the settled count, so a few lucky pairs do not flip it.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Collection, Iterable, Iterator


class _Pair:
    __slots__ = ("by_challenger", "evicted", "open", "spared")

    def __init__(self, evicted: str, spared: str, by_challenger: bool) -> None:
        self.evicted = evicted
        self.spared = spared
        self.by_challenger = by_challenger
        self.open = True


class Regret:
    """A default expert and a challenger on one engine: the open regret pairs and their decayed points."""

    __slots__ = ("by_adapter", "evidence", "keep", "limit", "pairs", "pending")

    def __init__(self, slots: int, memory: float) -> None:
        self.keep = 1.0 - 1.0 / (memory * slots)  # per request
        self.limit = memory * slots  # open pairs
        self.evidence = [0.0, 0.0]  # [challenger's points, default's points]
        self.pairs: deque[_Pair] = deque()
        self.by_adapter: dict[str, list[_Pair]] = {}
        self.pending: tuple[str, bool] | None = None  # (the other expert's first victim, challenger followed)

    def follow_challenger(self) -> bool:
        challenger, default = self.evidence
        return challenger - default > math.sqrt(challenger + default)

    def choose(self, challenger: Iterable[str], default: Iterable[str], pins: set[str]) -> Iterator[str]:
        """The order to evict in, remembering the other expert's first victim for the next regret pair."""
        by_challenger = self.follow_challenger()
        followed, other_order = (challenger, default) if by_challenger else (default, challenger)
        other = next((a for a in other_order if a not in pins), None)
        self.pending = None if other is None else (other, by_challenger)
        return iter(followed)

    def forget_choice(self) -> None:
        """The evictions that follow are not this pair of experts' choice."""
        self.pending = None

    def requested(self, adapter: str) -> None:
        """A request for `adapter` on this engine: decay, then settle the open pairs it is in."""
        evidence = self.evidence
        evidence[0] *= self.keep
        evidence[1] *= self.keep
        pairs = self.by_adapter.pop(adapter, None)
        if pairs is None:
            return
        for pair in pairs:
            if pair.open:
                pair.open = False
                right = adapter != pair.evicted  # the spared one came first: the expert followed chose well
                evidence[0 if pair.by_challenger == right else 1] += 1.0

    def evicted(self, adapter: str) -> None:
        """The first victim after `choose` opens a pair when the two experts differed."""
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


class EvictionExperts:
    """One engine's experts: request recency (LRU's order), recency vs value, and value's popularity memory."""

    __slots__ = ("memory", "recency", "value")

    def __init__(self, slots: int, memory: float) -> None:
        # By last request (a prefetch by its load), kept apart from the book's order, which touches reorder.
        self.recency: dict[str, None] = {}
        self.value = Regret(slots, memory)  # challenger: recency (LRU); default: value
        self.memory = Regret(slots, memory)  # challenger: short popularity alone; default: the blend

    def by_recency(self, resident: Collection[str]) -> list[str]:
        """The residents, least recently requested first; those never seen arrive (restored, adopted) first."""
        recency = self.recency
        return [a for a in resident if a not in recency] + [a for a in recency if a in resident]

    def choose(
        self, resident: Collection[str], blended: Iterable[str], short: Iterable[str], pins: set[str]
    ) -> Iterator[str]:
        """The eviction order: recency or value, and for value, which popularity memory."""
        value_order = self.memory.choose(short, blended, pins)
        by_recency = self.value.follow_challenger()
        order = self.value.choose(self.by_recency(resident), value_order, pins)
        if by_recency:
            self.memory.forget_choice()  # value's victims are not evicted: nothing to judge its memories by
        return order

    def requested(self, adapter: str) -> None:
        self.value.requested(adapter)
        self.memory.requested(adapter)
        recency = self.recency
        recency.pop(adapter, None)
        recency[adapter] = None

    def loaded(self, adapter: str) -> None:
        self.recency.setdefault(adapter, None)  # a prefetch nobody asked for yet: recent by its load

    def evicted(self, adapter: str) -> None:
        self.recency.pop(adapter, None)
        self.value.evicted(adapter)
        self.memory.evicted(adapter)

    def forget_choice(self) -> None:
        """Evictions that follow are not an expert's choice (a prefetch displacing cheaper adapters)."""
        self.value.forget_choice()
        self.memory.forget_choice()
