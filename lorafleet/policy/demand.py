"""Demand: popularity that ages with traffic, and a per-tenant model of which adapter follows which.

Popularity is counted on a request clock rather than wall time: each adapter's count halves every
`half_life` requests (LRFU-style), so the same setting suits a fleet doing 10 requests a minute or 10,000 a
second, and a drifting hot set is forgotten after a few half-lives; a 32x longer memory is blended in.
Counts are kept with growing weights (an observation at clock c weighs 2^{c/h}), so observing is O(1); they
are rescaled before they could overflow.
Workflows from the inventory enter as prior transitions that fade as real observations accumulate.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections import OrderedDict, deque
from collections.abc import Iterable, Mapping
from typing import Any

from mypy_extensions import mypyc_attr

LEADERS = 3  # successors kept ranked per (tenant, adapter): as many as a prediction looks at
_RESCALE_WEIGHT = 1e80  # rescale stored counts long before a float would overflow
_FORGOTTEN = 2.0**-30  # a second-order context last seen 30 half-lives ago is dropped at the next rescale
# Tenants remembered, each with the adapters it asked for; past this many the least recently active one is
# forgotten, by the demand model and the policy alike: a log whose tenant field is a user id (a new name per
# request) must not grow what the daemon holds, and writes with every commit, without bound.
MAX_TENANTS = 10_000


def _weight(item: tuple[str, float]) -> float:
    return item[1]


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class AgedCounts:
    """Counts that halve every `half_life` observations, kept with growing weights so adding is O(1)."""

    def __init__(self, half_life: float) -> None:
        self.rate = math.log(2) / half_life
        self.step = math.exp(self.rate)  # the weight grows by this factor per observation
        self.weight = 1.0
        self.counts: dict[str, float] = {}

    def add(self, key: str) -> None:
        self.weight *= self.step
        if self.weight > _RESCALE_WEIGHT:
            for k in self.counts:
                self.counts[k] /= self.weight
            self.weight = 1.0
        self.counts[key] = self.counts.get(key, 0.0) + self.weight


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class GapHistory:
    """The last few gaps between two kinds of event, kept in arrival order and sorted, for quantiles."""

    __slots__ = ("recent", "sorted")

    def __init__(self, size: int = 16) -> None:
        self.recent: deque[float] = deque(maxlen=size)
        self.sorted: list[float] = []

    def add(self, gap: float) -> None:
        if len(self.recent) == self.recent.maxlen:
            del self.sorted[bisect.bisect_left(self.sorted, self.recent[0])]
        self.recent.append(gap)
        bisect.insort(self.sorted, gap)

    def __len__(self) -> int:
        return len(self.sorted)

    def quantile(self, q: float) -> float:
        ordered = self.sorted
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    def within(self, elapsed: float, window: float) -> float:
        """Chance the next event comes within `window` s, given none came in the `elapsed` s so far."""
        ordered = self.sorted
        done = bisect.bisect_right(ordered, elapsed)
        waiting = len(ordered) - done
        if waiting == 0:
            return 0.25  # later than ever seen: the source may have gone quiet
        return (bisect.bisect_right(ordered, elapsed + window) - done) / waiting


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class DemandModel:
    def __init__(
        self,
        half_life: float = 200.0,
        workflows: Mapping[str, Iterable[Iterable[str]]] | None = None,
        prior_weight: float = 2.0,
        min_evidence: float = 5.0,
        context_prior: float = 15.0,
    ) -> None:
        self.rate = math.log(2) / half_life
        self.clock = 0  # requests observed
        self.step = math.exp(self.rate)
        self.weight = 1.0  # the weight of an observation now: grows by `step` per request
        self.min_evidence = min_evidence
        self.context_prior = context_prior  # moves of evidence the first order weighs against a second-order context
        self.popularity: dict[str, float] = {}
        # A second memory, 32x longer: popularity blends both equally, so a drifting hot set is picked up
        # quickly while stable favourites are not forgotten after a burst of something else. (Weighing the two
        # by how well each predicted the next request favoured the short one even where hit ratios said not.)
        self.long_popularity = AgedCounts(half_life * 32)
        self.w_short = 0.5
        self.short_scale = self.rate  # rate / weight: turns a stored count into a share
        self.tenant_activity: dict[str | None, float] = {}
        self.tenant_adapter: dict[tuple[str | None, str], float] = {}
        self.transitions: dict[tuple[str | None, str], dict[str, float]] = {}
        self.transition_totals: dict[tuple[str | None, str], float] = {}
        self.transition_seen: dict[tuple[str | None, str], float] = {}  # undecayed evidence per key
        self.leaders: dict[tuple[str | None, str], list[str]] = {}  # per key its LEADERS top counts, descending
        self.last: dict[str | None, str] = {}
        # The move before the latest, per tenant: what came after a pair (before -> last) is the second-order
        # context — a tool loop's next tool depends on the last tool, not on the planner that came between.
        self.before: dict[str | None, str] = {}
        self.transitions2: dict[tuple[str | None, str, str], dict[str, float]] = {}
        self.transition2_totals: dict[tuple[str | None, str, str], float] = {}
        self.transition2_seen: dict[tuple[str | None, str, str], float] = {}
        self.last_time: dict[str | None, float] = {}
        # tenant -> how many requests in a row, before the latest, asked for its current adapter: a step of a
        # workflow or agent loop often makes several calls, and a repeat is not a move to a next step
        self.repeats: dict[str | None, int] = {}
        self.gaps: dict[tuple[str | None, str], GapHistory] = {}  # seconds from (tenant, adapter) to its next
        self.adapter_gaps: dict[str, GapHistory] = {}  # seconds between requests for the same adapter
        self.adapter_last: dict[str, float] = {}
        # A timer that makes several calls each time it fires (a batch job's run): calls closer than the time
        # `run_horizon` requests take at the current rate are one run, and an adapter's rhythm is read between its
        # runs' starts (seconds from each run's start to the next one's; the latest run's start). 0: every
        # request a run of its own. The predictor sets its horizon, the window its scores look ahead: an adapter
        # asked for again within it is scored by that, so the rhythm that wants a return is the one beyond it.
        self.run_horizon = 0.0
        self.run_gaps: dict[str, GapHistory] = {}
        self.run_start: dict[str, float] = {}
        self.arrival_gap = 0.0  # moving average of seconds between requests, fleet-wide
        self.last_arrival: float | None = None
        # tenant -> the adapters it asked for, least recently active first (MAX_TENANTS); declared tenants (the
        # inventory's workflows, priors from the first request) are never forgotten and not counted
        self.max_tenants = MAX_TENANTS
        self.tenants: OrderedDict[str, set[str]] = OrderedDict()
        self.declared = frozenset(workflows or ())
        for tenant, chains in (workflows or {}).items():
            for chain in chains:
                steps = list(chain)
                for prev, nxt in itertools.pairwise(steps):
                    # A declared workflow is evidence enough to predict from the first request.
                    self._add_transition((tenant, prev), nxt, prior_weight, evidence=min_evidence)
                if len(steps) > 1 and steps[-1] != steps[0]:
                    # ... and one that ends is run again: its head is the tenant's likely next request (what the
                    # tenant really does next soon outweighs the prior, and the trust gates silence it if wrong).
                    self._add_transition((tenant, steps[-1]), steps[0], prior_weight, evidence=min_evidence)

    def _tick(self) -> float:
        self.clock += 1
        self.weight *= self.step
        if self.weight > _RESCALE_WEIGHT:
            self._rescale()
        self.short_scale = self.rate / self.weight
        return self.weight

    def _rescale(self) -> None:
        factor = 1.0 / self.weight
        self.weight = 1.0
        tables: tuple[dict[Any, float], ...] = (
            self.popularity,
            self.tenant_activity,
            self.tenant_adapter,
            self.transition_totals,
            self.transition2_totals,
            *self.transitions.values(),
            *self.transitions2.values(),
        )
        for table in tables:
            for key in table:
                table[key] *= factor
        # Second-order contexts are many more than pairs (up to one per move): those long unseen are dropped, so the
        # table (and the memory written with every checkpoint) holds the recent ones only.
        for context in [c for c, total in self.transition2_totals.items() if total < _FORGOTTEN]:
            del self.transitions2[context], self.transition2_totals[context], self.transition2_seen[context]

    def _add_transition(self, key: tuple[str | None, str], nxt: str, weight: float, evidence: float = 1.0) -> None:
        self.transition_seen[key] = self.transition_seen.get(key, 0.0) + evidence
        row = self.transitions.get(key)
        if row is None:
            row = self.transitions[key] = {}
            self.leaders[key] = []
        count = row[nxt] = row.get(nxt, 0.0) + weight
        self.transition_totals[key] = self.transition_totals.get(key, 0.0) + weight
        # Only this count grew (the others keep their order, a rescale keeps everyone's): the leaders stay
        # exact with one comparison, so predicting never sorts a row.
        leaders = self.leaders[key]
        if nxt not in leaders:
            if len(leaders) < LEADERS:
                leaders.append(nxt)
            elif count > row[leaders[-1]]:
                leaders[-1] = nxt
            else:
                return
        leaders.sort(key=row.__getitem__, reverse=True)

    def remember(self, tenant: str | None, adapter: str) -> tuple[str, set[str]] | None:
        """A request of `tenant` for `adapter`: the tenant is the most recently active now. Past `max_tenants`,
        the least recently active one is forgotten here and returned with the adapters it asked for, so the
        policy forgets it too (`Policy.forget_tenant`)."""
        if tenant is None or tenant in self.declared:
            return None
        tenants = self.tenants
        seen = tenants.get(tenant)
        if seen is None:
            seen = tenants[tenant] = set()
        else:
            tenants.move_to_end(tenant)
        seen.add(adapter)
        if len(tenants) <= self.max_tenants:
            return None
        gone, adapters = tenants.popitem(last=False)
        self.forget(gone, adapters)
        return gone, adapters

    def forget(self, tenant: str, adapters: Iterable[str]) -> None:
        """Everything learned of one tenant, gone: as if it had never sent a request."""
        adapters = list(adapters)
        for table in (self.tenant_activity, self.last, self.before, self.last_time, self.repeats):
            table.pop(tenant, None)
        for adapter in adapters:
            key = (tenant, adapter)
            for keyed in (self.tenant_adapter, self.transitions, self.transition_totals, self.transition_seen,
                          self.leaders, self.gaps):  # fmt: skip
                keyed.pop(key, None)
            for after in adapters:
                context = (tenant, adapter, after)
                for keyed2 in (self.transitions2, self.transition2_totals, self.transition2_seen):
                    keyed2.pop(context, None)

    def observe(self, tenant: str | None, adapter: str, now: float = 0.0, arrived: float | None = None) -> None:
        """A request learned at `now`; `arrived`: when it came, where that was earlier (learned from the line
        written at its end). An adapter's gaps run between arrivals: between lines they carry each request's
        duration, and a timer's period was lost in them (3 of 100 periodic adapters found, periodic-aligned with
        durations)."""
        self.long_popularity.add(adapter)
        w = self._tick()
        if self.last_arrival is not None:
            gap = max(0.0, now - self.last_arrival)
            self.arrival_gap = gap if self.clock <= 2 else self.arrival_gap + 0.01 * (gap - self.arrival_gap)
        self.last_arrival = now
        at = now if arrived is None else arrived
        previous = self.adapter_last.get(adapter)
        if previous is not None:
            history = self.adapter_gaps.get(adapter)
            if history is None:
                history = self.adapter_gaps[adapter] = GapHistory()
            since = max(0.0, at - previous)  # overlapping requests, learned out of arrival order: no gap
            history.add(since)
            at = max(at, previous)
            if self.run_horizon > 0.0 and since > self.run_horizon * self.arrival_gap:  # a new run
                runs = self.run_gaps.get(adapter)
                if runs is None:
                    runs = self.run_gaps[adapter] = GapHistory()
                runs.add(at - self.run_start[adapter])
                self.run_start[adapter] = at
        else:
            self.run_start[adapter] = at
        self.adapter_last[adapter] = at
        self.popularity[adapter] = self.popularity.get(adapter, 0.0) + w
        self.tenant_activity[tenant] = self.tenant_activity.get(tenant, 0.0) + w
        key = (tenant, adapter)
        self.tenant_adapter[key] = self.tenant_adapter.get(key, 0.0) + w
        if tenant is not None:
            prev = self.last.get(tenant)
            if prev == adapter:
                # Another call of the same step: no transition (A -> A would dilute every real successor of A and
                # predict nothing), and the gap to the next step runs from the step's latest call.
                self.repeats[tenant] = self.repeats.get(tenant, 0) + 1
            elif prev is not None:
                self.repeats[tenant] = 0
                self._add_transition((tenant, prev), adapter, w)
                before = self.before.get(tenant)
                if before is not None:
                    context = (tenant, before, prev)
                    row2 = self.transitions2.get(context)
                    if row2 is None:
                        row2 = self.transitions2[context] = {}
                    row2[adapter] = row2.get(adapter, 0.0) + w
                    self.transition2_totals[context] = self.transition2_totals.get(context, 0.0) + w
                    self.transition2_seen[context] = self.transition2_seen.get(context, 0.0) + 1.0
                self.before[tenant] = prev
                key = (tenant, prev)
                gaps = self.gaps.get(key)
                if gaps is None:
                    gaps = self.gaps[key] = GapHistory()
                gaps.add(now - self.last_time[tenant])
            self.last[tenant] = adapter
            self.last_time[tenant] = now

    def share_weights(self) -> tuple[float, float]:
        """(a, b) such that an adapter's expected share of requests is min(1, a·short + b·long) of its stored
        counts: the short and long memories blended (a steady share s settles at a count of about s / rate)."""
        w = self.w_short
        long = self.long_popularity
        return w * self.short_scale, (1.0 - w) * long.rate / long.weight

    def share(self, adapter: str) -> float:
        a, b = self.share_weights()
        return min(1.0, a * self.popularity.get(adapter, 0.0) + b * self.long_popularity.counts.get(adapter, 0.0))

    def repeated(self, tenant: str | None) -> bool:
        """Whether the tenant's latest request was another call of the adapter it asked for before (a step's
        further call, not a move to a next step)."""
        return tenant is not None and self.repeats.get(tenant, 0) > 0

    def tenant_share(self, tenant: str | None) -> float:
        return min(1.0, self.tenant_activity.get(tenant, 0.0) / self.weight * self.rate)

    def gap_quantile(self, tenant: str | None, adapter: str, q: float = 0.1) -> float | None:
        """How soon after asking for `adapter` this tenant usually sends its next request (a low quantile)."""
        gaps = self.gaps.get((tenant, adapter))
        return gaps.quantile(q) if gaps is not None and len(gaps) >= 3 else None

    def next_within(self, tenant: str | None, adapter: str, elapsed: float, window: float) -> float | None:
        """Chance the tenant's next request (after `adapter`, `elapsed` s ago) comes within `window` s,
        from its observed gaps after that adapter; None without enough history."""
        gaps = self.gaps.get((tenant, adapter))
        return gaps.within(elapsed, window) if gaps is not None and len(gaps) >= 3 else None

    def rhythm(self, adapter: str, regularity: float = 0.5) -> tuple[float, float] | None:
        """The adapter's period and when its latest run started, when it is requested regularly (timers, cron
        jobs, polling clients); None otherwise. A run's calls a fraction of a second apart, between periods of
        minutes, made every timer that fires more than one call look irregular: the rhythm is read between runs'
        starts (`run_horizon`; with none set, between requests). Regular: the 10th–90th percentile spread of the
        recent gaps is within `regularity` of their median; the period is the shortest of them."""
        if self.run_horizon > 0.0:
            gaps, last = self.run_gaps.get(adapter), self.run_start.get(adapter, 0.0)
        else:
            gaps, last = self.adapter_gaps.get(adapter), self.adapter_last.get(adapter, 0.0)
        if gaps is None:
            return None
        ordered = gaps.sorted
        n = len(ordered)
        if n < 4:
            return None
        median = ordered[n // 2]
        if median <= 0 or ordered[int(0.9 * n)] - ordered[int(0.1 * n)] > regularity * median:
            return None
        return ordered[0], last

    def adapter_next_within(self, adapter: str, now: float, window: float) -> float:
        gaps = self.adapter_gaps.get(adapter)
        if gaps is None or len(gaps) < 4:
            return 0.0
        return gaps.within(now - self.adapter_last[adapter], window)

    def tenant_mix(self, tenant: str | None, adapter: str) -> float:
        """How much of the tenant's recent traffic went to the adapter, whatever came before."""
        activity = self.tenant_activity.get(tenant, 0.0)
        return self.tenant_adapter.get((tenant, adapter), 0.0) / activity if activity > 0 else 0.0

    def next_after(self, tenant: str | None, adapter: str, limit: int = 2) -> list[tuple[str, float]]:
        """The adapters most likely to follow `adapter` for this tenant, with their probabilities.

        Nothing is predicted until the tenant's history (or the workflow prior) holds enough evidence.
        """
        key = (tenant, adapter)
        row = self.transitions.get(key)
        if not row:
            return []
        if self.transition_seen[key] < self.min_evidence:
            return []
        total = self.transition_totals[key]
        if limit <= LEADERS:
            return [(a, row[a] / total) for a in self.leaders[key][:limit]]
        ranked = sorted(row.items(), key=_weight, reverse=True)[:limit]
        return [(a, w / total) for a, w in ranked]

    def successors(self, tenant: str | None, adapter: str, limit: int = LEADERS) -> list[tuple[str, float]]:
        """`next_after` for the tenant's latest request, sharpened by the move that led to it: the second-order
        estimate (what followed before -> adapter) blended with the first-order one, weighted by their evidence
        (the first order counts as `context_prior` moves), so an unseen or thin context predicts as before and a
        well-seen one by itself. Gated by the first order's evidence, as `next_after`."""
        first = self.next_after(tenant, adapter, limit=LEADERS)
        before = self.before.get(tenant) if self.last.get(tenant) == adapter else None
        if not first or before is None:
            return first[:limit]
        context = (tenant, before, adapter)
        row2 = self.transitions2.get(context)
        if not row2:
            return first[:limit]
        n2 = self.transition2_seen[context]
        total2 = self.transition2_totals[context]
        key = (tenant, adapter)
        row1, total1 = self.transitions[key], self.transition_totals[key]
        k = self.context_prior
        blended = {
            c: (n2 * row2.get(c, 0.0) / total2 + k * row1.get(c, 0.0) / total1) / (n2 + k)
            for c in itertools.chain(self.leaders[key], row2)
        }
        return sorted(blended.items(), key=_weight, reverse=True)[:limit]
