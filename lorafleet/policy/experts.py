"""How lorafleet picks an engine's eviction order among experts: judged by regret, never by a fitted constant.

Three choices are made per engine, each between a default expert and a challenger:
- `memory`, the steady side: popularity from the blend of a short and a 32x longer memory (the default), or
  from the short one alone (the challenger), which follows a drifting hot set sooner;
- `pace`, the fast side: popularity from a quick memory, a quarter of the short one (the default), or plain
  request recency, LRU (the challenger);
- `tempo`: the steady side (the default) or the fast side (the challenger), for a hot set that moves faster
  than the steady memories can follow.

Each choice is judged in the manner of LeCaR (Vietri et al., 2018), but settled pairwise: whenever the two
experts would have evicted different adapters, the pair (one's victim, the other's) stays open until one of the
two is asked for on that engine. The expert whose victim comes first chose wrong and the other earns a point.
Requests do not depend on what is resident, so both experts are judged whichever is followed, and following
one never hides the other's merit (a shadow LRU compared with actual outcomes could not see value's merit while
LRU was followed). `tempo` and `memory` open a pair with the victim actually evicted after their choice; `pace`
opens it at the choice itself, since its choice is made real only while `tempo` follows the fast side, and it
must be judged meanwhile to be ready when that happens. Points decay by request over the last `memory`
turnovers of the engine's slots; pairs left open expire after as many more. The challenger is followed only
while its lead is more than one standard deviation of the settled count, so a few lucky pairs do not flip it.
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import Collection, Iterable, Iterator

from mypy_extensions import mypyc_attr


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class _Pair:
    __slots__ = ("by_challenger", "evicted", "open", "spared")

    def __init__(self, evicted: str, spared: str, by_challenger: bool) -> None:
        self.evicted = evicted
        self.spared = spared
        self.by_challenger = by_challenger
        self.open = True


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class Regret:
    """A default expert and a challenger on one engine: the open regret pairs and their decayed points."""

    __slots__ = ("at_choice", "by_adapter", "evidence", "keep", "limit", "pairs", "pending")

    def __init__(self, slots: int, memory: float, at_choice: bool = False) -> None:
        self.at_choice = at_choice  # open each pair when choosing, not on the eviction that follows
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
        """The order to evict in, remembering the other expert's first victim for the next regret pair (or, with
        `at_choice`, opening the pair of the two first victims now)."""
        by_challenger = self.follow_challenger()
        followed, other_order = (challenger, default) if by_challenger else (default, challenger)
        other = next((a for a in other_order if a not in pins), None)
        if not self.at_choice:
            self.pending = None if other is None else (other, by_challenger)
            return iter(followed)
        self.pending = None
        followed = iter(followed)
        first = next((a for a in followed if a not in pins), None)
        if first is None:
            return followed
        held = self.by_adapter.get(first, ())
        if other not in (None, first) and not any(p.open and other in (p.evicted, p.spared) for p in held):
            self._open(_Pair(first, other, by_challenger))  # not evicted yet, perhaps never: judged all the same
        return itertools.chain((first,), followed)

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
        if pending is not None and pending[0] != adapter:
            self._open(_Pair(adapter, *pending))

    def _open(self, pair: _Pair) -> None:
        pairs, by_adapter = self.pairs, self.by_adapter
        pairs.append(pair)
        by_adapter.setdefault(pair.evicted, []).append(pair)
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


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class EvictionExperts:
    """One engine's experts: request recency (LRU's order), and the three choices among value orders."""

    __slots__ = ("memory", "pace", "recency", "tempo")

    def __init__(self, slots: int, memory: float) -> None:
        # By last request (a prefetch by its load), kept apart from the book's order, which touches reorder.
        self.recency: dict[str, None] = {}
        self.tempo = Regret(slots, memory)  # challenger: the fast side; default: the steady side
        self.memory = Regret(slots, memory)  # challenger: short popularity alone; default: the blend
        self.pace = Regret(slots, memory, at_choice=True)  # challenger: recency (LRU); default: quick popularity

    def by_recency(self, resident: Collection[str]) -> list[str]:
        """The residents, least recently requested first; those never seen arrive (restored, adopted) first."""
        recency = self.recency
        return [a for a in resident if a not in recency] + [a for a in recency if a in resident]

    def choose(
        self,
        resident: Collection[str],
        blended: Iterable[str],
        short: Iterable[str],
        quick: Iterable[str],
        pins: set[str],
    ) -> Iterator[str]:
        """The eviction order: the steady or the fast side, and on each, which of its two experts."""
        fast = self.pace.choose(self.by_recency(resident), quick, pins)
        steady = self.memory.choose(short, blended, pins)
        fast_followed = self.tempo.follow_challenger()
        order = self.tempo.choose(fast, steady, pins)
        if fast_followed:
            self.memory.forget_choice()  # the steady side's victims are not evicted: nothing to judge it by
        return order

    def requested(self, adapter: str) -> None:
        self.tempo.requested(adapter)
        self.memory.requested(adapter)
        self.pace.requested(adapter)
        recency = self.recency
        recency.pop(adapter, None)
        recency[adapter] = None

    def loaded(self, adapter: str) -> None:
        self.recency.setdefault(adapter, None)  # a prefetch nobody asked for yet: recent by its load

    def evicted(self, adapter: str) -> None:
        self.recency.pop(adapter, None)
        self.tempo.evicted(adapter)
        self.memory.evicted(adapter)

    def forget_choice(self) -> None:
        """Evictions that follow are not an expert's choice (a prefetch displacing cheaper adapters)."""
        self.tempo.forget_choice()
        self.memory.forget_choice()
