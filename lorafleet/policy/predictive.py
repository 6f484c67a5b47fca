"""The `lorafleet` policy: plan-based preload, predictive prefetch and demand-aware eviction."""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from mypy_extensions import mypyc_attr

from lorafleet.policy.baselines import capacity
from lorafleet.policy.core import PLAN, PREFETCH, Decision, Policy, PolicyCore, credit_cap, within_credit
from lorafleet.policy.demand import LEADERS, AgedCounts
from lorafleet.policy.events import RequestEvent
from lorafleet.policy.experts import EvictionExperts
from lorafleet.policy.placement import Placement, can_pin, rank_engines
from lorafleet.policy.residency import EngineResidency

BLENDED, SHORT, QUICK = "blended", "short", "quick"  # popularity memories an eviction order can use
_UNSIZED: dict[str, float] = {}  # never written: the shares and costs of an engine with no byte budget


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class ScheduledPrefetch:
    """A prefetch the policy wants at `due` (policy time): ordered by due time, then by when it was scheduled.

    Its constructor and order are written out: a dataclass's generated ones stay interpreted where the rest is
    compiled, and the policy makes two or three a request and compares them about twenty times
    (docs/benchmarks.md)."""

    __slots__ = ("adapter", "attempt", "completed", "due", "engine", "generation", "key", "seq")

    def __init__(
        self,
        due: float,
        seq: int,
        key: tuple[str, str | None],
        generation: int,
        engine: str,
        adapter: str,
        attempt: int = 0,
        completed: int = 0,
    ) -> None:
        self.due = due
        self.seq = seq
        self.key = key  # ("tenant", name) or ("adapter", id): whose prediction
        self.generation = generation  # stale once the key's generation moved on (a newer request)
        self.engine = engine
        self.adapter = adapter
        self.attempt = attempt  # retries while the engine's loader is busy
        self.completed = completed  # the engine's loads completed when it first had to wait

    def __lt__(self, other: ScheduledPrefetch) -> bool:
        return self.due < other.due or (self.due == other.due and self.seq < other.seq)

    def __repr__(self) -> str:
        return (
            f"ScheduledPrefetch(due={self.due!r}, seq={self.seq!r}, engine={self.engine!r}, adapter={self.adapter!r})"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        fields = (self.key, self.generation, self.engine, self.adapter, self.attempt, self.completed)
        return ScheduledPrefetch, (self.due, self.seq, *fields)  # pickled by its constructor


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class LorafleetPolicy(Policy):
    """Plan-based preload, predictive prefetch and demand-aware eviction.

    - Preload: each tenant's pinned adapters on one engine that can serve them (pinned, never evicted), then
      the first steps of their workflows.
    - Prefetch: after each request, the adapters most likely to follow it for that tenant (transition model,
      workflows as priors, sharpened by the move that led to it: DemandModel.successors) are loaded onto the
      serving engine, displacing only adapters worth no more. The load is timed: it starts a few load times
      (with margin) before the tenant's usual earliest next request (a low quantile of its observed gaps after
      this adapter), so a prefetched adapter holds a slot only briefly. A predicted adapter evicted before its
      tenant's next request (on vLLM the engine's own LRU picks the victim unless touched, and the touch budget
      steers few evictions) is brought back the same way, timed from the prediction; once per prediction where
      another prediction's prefetch displaced it.
    - Timers: an adapter asked for like clockwork (`DemandModel.rhythm`; the calls a timer makes each time it
      fires, closer than the horizon's time, are one run) is protected near its next time and, evicted, brought
      back a lead before it — for the share of its requests nothing else brings in time. Where a guess acted on
      after its tenant's previous move named it a load's time or more before it came (`covered`: a poller walking
      a loop in order), that guess brings it back; protected and returned as well, it held a slot early and
      displaced others (a loop over more adapters than the fleet holds: a return a slot-holder for every probe).
    - Eviction: lowest value first. Value is the chance the adapter is requested within the horizon (the
      next `horizon` requests, by default as many as the fleet has adapter slots): from its traffic-aged share
      of requests (LRFU-style popularity), combined with each due prediction of it, weighted by how likely
      that tenant is to send a request within the horizon. A prediction lasts until the tenant's next request.
      Each engine follows popularity from its short memory alone instead, or from a quick memory, or plain
      recency, while regret pairs say that has been clearly better lately (experts.py). On an engine with a
      byte budget the order is by value per share of the budget an adapter takes (of its slots, or of its bytes
      when that is more): a byte budget is a knapsack, and a large adapter must be worth its room.
    - Touches: on vLLM an eviction (or a prefetch's displacement) departs from the engine's own least recently
      used only by touching everything older, and touches are budgeted; a departure is paid only where it gains,
      per touch, at least what touches have been worth lately times how empty the engine's credit is
      (`_worth_touches`), so the budget goes to the evictions where the order matters most.
    - Trust: each tenant's predictions are weighed by how often they came true (moving average), and each guess
      (by rank, after the adapter it follows) is used only while guesses of that rank after that adapter come
      true clearly more often than the tenant's usual mix gives the same adapter (its edge), and only when its
      odds are `min_lift` times the mix's, so tenants without a pattern, or whose pattern drifted, stop causing
      prefetches and protecting adapters. The edge is kept per adapter followed because a tenant's moves differ
      in how well they can be told: after an agent's planner the next tool is a guess, after a tool the planner
      is near certain, and one record for both silenced the sure guess with the poor one's misses.
    - Repeats: another call of the adapter a tenant just asked for (a step with several calls) is not a move:
      no transition is counted, and the guesses stay open until a different adapter comes.
    - Timeliness: learned from a log line, written at its request's end, a prediction is made a request's duration
      and a poll late, and where a tenant's requests overlap or follow back to back its next request has often
      come already (its engine loaded the adapter itself: a prefetch then loads nothing, or a copy nobody uses,
      and on vLLM costs a 1-token request all the same). Each tenant's share of requests that came before the
      prediction made for them is kept (moving average); a guess is acted on — prefetched, protected, brought
      back — only while its probability times the chance of being in time clears `min_probability`. Replayed (and
      in shadow mode), a log without durations or a start hint gives each request at its arrival: never too late.
      A live daemon decides at its own clock, so a request that came while it was still reading the one before
      (its poll, its batch) counts as too late too: no prefetch could have served it either. After a repeat the
      guesses are timed, and judged, from the repeat's line, as its scheduled prefetches are.
    """

    name = "lorafleet"
    honours_pins = True
    observes_demand = True
    initial_trust = 0.3  # a tenant's predictions must prove themselves ...
    initial_trust_declared = 0.6  # ... unless the inventory declares its workflows
    gap_quantile = 0.0  # the shortest gap seen: a timed prefetch should almost never be late
    lead_factor = 3.0
    lead_margin_s = 0.05
    retries = 4
    displace_margin = 1.0
    min_lift = 2.5
    min_edge = 0.1

    min_probability = 0.2
    evidence_memory = 8.0  # how many turnovers of an engine's slots the experts' evidence is remembered
    quick_memory = 0.25  # the quick popularity memory's half-life, against the demand model's short one
    max_in_flight = 2
    _displacing = False  # a prefetch is making room: what it displaces comes back once per prediction
    hot_ttl_s = 300.0
    trust_rate = 0.1
    touch_pace = 0.02  # how fast the worth of a touch follows the steers offered lately (`_worth_touches`)

    def __init__(
        self,
        plan: Sequence[Placement] = (),
        min_evidence: float | None = None,
        min_lift: float | None = None,
        min_edge: float | None = None,
    ) -> None:
        """`min_evidence`: moves of a tenant from an adapter before a guess from it is acted on (None: the demand
        model's own bar); `min_lift`, `min_edge`: the odds a guess must have over the tenant's mix, and how much
        more often than the mix its rank must have come true (None: as shipped). The eager expert of the lorafleet
        policy sets each bar at its least: one move, no lift, an edge of zero (drive/leader.py)."""
        self.min_evidence = min_evidence
        if min_lift is not None:
            self.min_lift = min_lift
        if min_edge is not None:
            self.min_edge = min_edge
        self.plan = tuple(plan)  # placements to load at start (lorafleet plan), before pins and workflow heads
        self.trust: dict[str | None, float] = {}  # tenant -> share of its predictions that came true
        # tenant -> share of its requests that had arrived before the prediction made for them (moving average),
        # and when its latest prediction was made
        self.too_late: dict[str | None, float] = {}
        self.predicted_at: dict[str | None, float] = {}
        # (tenant, adapter) -> per rank of the guesses made after that adapter, how much more often the guess came
        # true than the tenant's usual mix would give it
        self.edge: dict[tuple[str | None, str], list[float]] = {}
        # adapter -> tenant -> (probability, made at, after adapter, expires)
        self.hot: dict[str, dict[str | None, tuple[float, float, str, float]]] = {}
        # tenant -> (guesses, their baselines, the adapter they follow)
        self.predicted: dict[str | None, tuple[list[str], list[float], str]] = {}
        # ("tenant", name) or ("adapter", id) -> requests seen, to drop scheduled prefetches that went stale
        self.generation: dict[tuple[str, str | None], int] = {}
        self.scheduled: list[ScheduledPrefetch] = []  # a heap, soonest first
        self.periodic: set[str] = set()  # adapters requested at regular intervals
        self._load_s: dict[tuple[str, str], float] = {}  # cold load seconds per (engine, adapter)
        self.completed: dict[str, int] = {}  # loads completed per engine: how fast its loader turns over
        self.seq = 0
        # (tenant, adapter) -> when the prediction was made that was brought back after a prefetch displaced it
        # (forgotten as the prediction closes)
        self.returned: dict[tuple[str | None, str], float] = {}
        # tenant -> (the guesses acted on after its latest move, when made); adapter -> how often its requests came
        # late enough after such a guess of it for a prefetch made then to have loaded (moving average): `covered`
        self.acted: dict[str | None, tuple[list[str], float]] = {}
        self.covered: dict[str, float] = {}
        # engine -> what steering an eviction by touches has been worth per touch lately (moving average over the
        # steers offered): the bar a steer must clear, lowered as the engine's touch credit fills
        self.touch_worth: dict[str, float] = {}

    def bind(self, core: PolicyCore) -> None:
        super().bind(core)
        if self.min_evidence is not None:
            core.demand.min_evidence = self.min_evidence
        self.horizon = float(sum(e.slot_cap for e in core.inventory.engines) or 1)
        core.demand.run_horizon = self.horizon  # a timer's calls within the horizon are one run (`rhythm`)
        # Popularity that follows a fast-moving hot set: its own memory, a fraction of the demand model's short one.
        # Bound again (a reload, a restart's memory): what it learned stays, for the engines that stayed.
        if not hasattr(self, "quick"):
            self.quick = AgedCounts(math.log(2) / core.demand.rate * self.quick_memory)
        # Per engine, which eviction order to follow (value by one of three popularity memories, or recency):
        # experts judged by regret (experts.py).
        learned: dict[str, EvictionExperts] = getattr(self, "experts", {})
        self.experts = {
            key: learned.get(key) or EvictionExperts(capacity(state), self.evidence_memory)
            for key, state in core.book.engines.items()
        }
        self.touch_worth = {key: w for key, w in self.touch_worth.items() if key in core.book.engines}

    # scoring ---------------------------------------------------------------------------------------------
    def score(self, adapter: str, now: float) -> float:
        """Chance of a request for the adapter within the horizon (the next `horizon` requests, or as many
        seconds as those take at the current request rate)."""
        return self._boosted(adapter, now, self.core.demand.share(adapter))

    def _boosted(self, adapter: str, now: float, share: float) -> float:
        """The score from a known popularity share, raised by live predictions (never lowered)."""
        demand = self.core.demand
        horizon = self.horizon
        miss = math.exp(-share * horizon)
        periodic = adapter in self.periodic
        hot = self.hot.get(adapter)
        if not (periodic or hot):
            return 1.0 - miss
        window = horizon * demand.arrival_gap
        if periodic:
            miss *= 1.0 - self.needed(adapter) * demand.adapter_next_within(adapter, now, window)
        if hot:
            for tenant, (probability, made_at, after, expires) in hot.items():
                if now > expires:
                    continue
                soon = demand.next_within(tenant, after, now - made_at, window)
                if soon is None:
                    soon = 1.0 - math.exp(-demand.tenant_share(tenant) * horizon)
                miss *= 1.0 - probability * soon
        return 1.0 - miss

    def _cheapest(
        self, state: EngineResidency, now: float, keep: str | None = None, memory: str = BLENDED
    ) -> Iterator[tuple[float, str]]:
        """Residents by ascending score, computed lazily, with popularity from the `memory` asked for.

        Predictions only ever raise a score above its popularity part, so walking residents by popularity and
        holding back each one until nothing unseen can score lower yields the exact order while computing full
        scores for only the first few. Ties go least recently used first. On an engine with a byte budget the
        order is by score per share of the budget.
        """
        demand = self.core.demand
        # Each resident's share, capped at 1 (written out rather than `min`: this runs for every resident at
        # every eviction), as (share, position, adapter): the heap's entries where no byte budget binds. The dicts
        # are read through their own type (compiled, a bound `get` held in a variable is a generic call).
        heap: list[tuple[float, int, str]] = []
        i = -1
        if memory == BLENDED:
            a, b = demand.share_weights()
            short, long = demand.popularity, demand.long_popularity.counts
            for x in state.resident:
                i += 1
                if x != keep:
                    v = a * short.get(x, 0.0) + b * long.get(x, 0.0)
                    heap.append((v if v < 1.0 else 1.0, i, x))
        else:
            if memory == SHORT:
                a, counts = demand.short_scale, demand.popularity
            else:
                a, counts = self.quick.rate / self.quick.weight, self.quick.counts
            for x in state.resident:
                i += 1
                if x != keep:
                    v = a * counts.get(x, 0.0)
                    heap.append((v if v < 1.0 else 1.0, i, x))
        horizon = self.horizon
        # Each resident's lower bound, the popularity part of its score, is compared with the full scores
        # computed so far. Without a byte budget the heap is keyed by the share itself (the bound rises with it:
        # computed only for the few compared); with one, by the bound per share of the budget (`cost`) — what a
        # byte budget holds is a knapsack, and a large adapter must be worth as much more as it takes room
        # (GreedyDual-Size, Cao and Irani, 1997).
        bytes_bind = bool(state.budget.budget_bytes)
        shares = costs = _UNSIZED  # read only where a byte budget binds
        if bytes_bind:
            shares = {x: s for s, _, x in heap}
            costs = {x: self.cost(state, x) for _, _, x in heap}
            heap = [((1.0 - math.exp(-s * horizon)) / costs[x], i, x) for s, i, x in heap]
        heapq.heapify(heap)  # usually only the first one or two are needed: no full sort
        pending: list[tuple[float, int, str]] = []
        while heap or pending:
            while heap and (
                not pending or (heap[0][0] if bytes_bind else 1.0 - math.exp(-heap[0][0] * horizon)) <= pending[0][0]
            ):
                key, i, x = heapq.heappop(heap)
                score = self._boosted(x, now, shares[x]) / costs[x] if bytes_bind else self._boosted(x, now, key)
                heapq.heappush(pending, (score, i, x))
            score, _, adapter = heapq.heappop(pending)
            yield score, adapter

    def cost(self, state: EngineResidency, adapter: str) -> float:
        """The share of an engine's budget an adapter takes (`Budget.share`)."""
        return state.budget.share(self.core.sizes[adapter])

    def victim_order(self, state: EngineResidency, now: float) -> Iterable[str]:
        blended = (adapter for _, adapter in self._cheapest(state, now))
        short = (adapter for _, adapter in self._cheapest(state, now, memory=SHORT))
        quick = (adapter for _, adapter in self._cheapest(state, now, memory=QUICK))
        order = self.experts[state.key].choose(state.resident, blended, short, quick, state.pins)
        if not _steered_by_touches(state):
            return order
        order, judged = itertools.tee(order)
        if self._follows(state, now, judged):
            return order
        self.experts[state.key].forget_choice()  # the engine's own victim goes: not what the experts chose
        return list(state.resident)

    def _follows(self, state: EngineResidency, now: float, order: Iterable[str]) -> bool:
        """Whether the engine should evict as `order` says rather than its own least recently used: where the
        steer the touch credit pays for (the order's first choice, else its first within the credit's reach, as
        `PolicyCore.load` pays it) is worth its touches, or where it takes none."""
        own = state.own_victim()
        order, again = itertools.tee(order)
        chosen = next((a for a in order if state.evictable(a)), None)
        if chosen is None or own is None or chosen == own:
            return True
        credit = self.core.touch_credit.get(state.key, 0.0)
        if credit < 1.0:
            return False  # not a touch to spend
        if len(state.keep_for([chosen])) > credit:
            chosen = next((a for a in within_credit(state, again, credit) if state.evictable(a)), None)
            if chosen is None or chosen == own:
                return True  # what the core does then takes no touch
        return self._worth_touches(state, now, chosen, own, credit)

    def _worth_touches(self, state: EngineResidency, now: float, chosen: str, own: str, credit: float) -> bool:
        """Whether evicting `chosen` rather than `own`, the engine's own victim, is worth the touches it takes.

        On vLLM an eviction is steered only by touching everything older than the victim, and touches are
        budgeted (`PolicyCore.load`): spent on the first steer the credit reaches, they went to whatever eviction
        came next, however little it gained, and the value orders' edge over the engine's LRU grew about linearly
        with the budget (few-slots, seed 0: 40.1% at 0.1 touches a request, 51.5% unbounded; the engines alone
        39.9%). So a steer must gain, per touch, the chance of a request within the horizon its victim has less
        than the engine's own: at least the worth of a touch lately (a moving average of the steers offered),
        times how empty the engine's credit is. A full credit takes any steer the policy's order asks for, so the
        budget is spent all the same, on the steers that gain most first (docs/benchmarks.md)."""
        # `own` is older than `chosen` and not in use: touched for the steer, never for the engine's own eviction
        touches = len(state.keep_for([chosen])) - len(state.keep_for([own]))
        gain = max(0.0, self.score(own, now) - self.score(chosen, now)) / touches
        worth = self.touch_worth.get(state.key, gain)
        worth += self.touch_pace * (gain - worth)
        self.touch_worth[state.key] = worth
        return gain >= (1.0 - credit / credit_cap(state)) * worth

    # preload ---------------------------------------------------------------------------------------------
    def start(self, now: float) -> list[Decision]:
        return initial_loads(self.core, self.plan, now)

    # prediction ------------------------------------------------------------------------------------------
    def _predict(
        self, tenant: str | None, adapter: str, now: float = 0.0, arrived: float = 0.0
    ) -> list[tuple[str, float]]:
        """Score the tenant's standing predictions against this request, then make new ones.

        A repeat (another call of the adapter the tenant just asked for: a step with several calls) is neither a
        success nor a failure of the guesses made after that adapter: they stay open until a different adapter
        comes, and are only made again (timed from this latest call)."""
        hot = self.hot
        demand = self.core.demand
        repeat = demand.repeated(tenant)
        previous = None if repeat else self.predicted.pop(tenant, None)
        trust = self.trust.get(tenant)
        if trust is None:
            trust = self.initial_trust_declared if self._declares(tenant) else self.initial_trust
        if previous is not None:
            guessed, baselines, context = previous
            # Learned from a line written at its end, a request may have come before the prediction made for it
            # (the previous line read after it arrived): no prefetch could have served it.
            late = 1.0 if arrived < self.predicted_at.get(tenant, arrived) else 0.0
            too_late = self.too_late.get(tenant, 0.0)
            self.too_late[tenant] = too_late + self.trust_rate * (late - too_late)
            edges = self.edge.get((tenant, context))
            if edges is None:
                edges = self.edge[(tenant, context)] = self._first_edges(tenant)
            came_true = 1.0 if adapter in guessed else 0.0
            trust += self.trust_rate * (came_true - trust)
            # Each guess against what the tenant's plain mix gives that same adapter, rank by rank: summed over
            # the guesses, a tenant with few adapters has a baseline of nearly all its traffic, and a real
            # pattern would never show an edge.
            for rank, (predicted, baseline) in enumerate(zip(guessed, baselines, strict=True)):
                hit = 1.0 if adapter == predicted else 0.0
                edges[rank] += self.trust_rate * (hit - baseline - edges[rank])
                entry = hot.get(predicted)
                if entry is not None:
                    entry.pop(tenant, None)
                    self.returned.pop((tenant, predicted), None)
                    if not entry:
                        del hot[predicted]
        self.trust[tenant] = trust
        edges = self.edge.get((tenant, adapter)) or self._first_edges(tenant)
        guesses = [(c, p) for c, p in demand.successors(tenant, adapter) if c != adapter]
        if not guesses:
            return []
        # Every guess is scored next time, acted on or not, so a tenant can earn trust back. Its baseline is how
        # often that adapter would be the next one anyway, from the tenant's usual mix: its share of the traffic
        # that is not this adapter (repeats are not moves, so the next adapter is a different one).
        rest = 1.0 - demand.tenant_mix(tenant, adapter)
        mixes = [
            min(1.0, m / max(rest, m)) if m > 0 else 0.0 for m in (demand.tenant_mix(tenant, c) for c, _ in guesses)
        ]
        self.predicted[tenant] = ([c for c, _ in guesses], mixes, adapter)
        self.predicted_at[tenant] = now
        # Evidence per guess, not per row: the guess itself must have followed this adapter about min_evidence
        # times (p of the moves seen). A certain successor is acted on after as many moves as before; a guess
        # that came a third of the time needs three times the evidence, so a few moves of a tenant without a
        # pattern (requests drawn from its mix) do not show a lift by chance.
        seen = demand.min_evidence / demand.transition_seen[(tenant, adapter)]
        # Lift in odds (p/(1-p) at least min_lift times the mix's): for a rare adapter it is p >= min_lift * mix,
        # and a tenant's main adapter (a planner at 40% of its traffic) can still pass when it surely comes next.
        timely = 1.0 - self.too_late.get(tenant, 0.0)  # the chance its next request is still to come (Timeliness)
        return [
            (c, p * trust)
            for rank, ((c, p), mix) in enumerate(zip(guesses, mixes, strict=True))
            if edges[rank] >= self.min_edge  # this guess has been beating the tenant's plain popularity
            and p * trust * timely >= self.min_probability  # likely, and likely in time
            and p * (1.0 - mix) > self.min_lift * mix * (1.0 - p)  # strictly: certain from the mix alone is no lift
            and p >= seen
        ]

    def _declares(self, tenant: str | None) -> bool:
        """Whether the inventory declares the tenant's workflows (its predictions start trusted)."""
        declared = self.core.inventory.tenants.get(tenant or "")
        return declared is not None and bool(declared.workflows)

    def _first_edges(self, tenant: str | None) -> list[float]:
        """The edge record of guesses after an adapter not yet scored: at the bar, twice it for a declared tenant."""
        return [(2 if self._declares(tenant) else 1) * self.min_edge] * LEADERS

    def forget_tenant(self, tenant: str, adapters: set[str]) -> None:
        """Its trust, open guesses (and those acted on), how often they came too late, edges and prefetches wanted
        for it (pending ones go stale with its generation): its guesses are among the adapters it asked for, what
        followed what in its own requests."""
        self.trust.pop(tenant, None)
        self.predicted.pop(tenant, None)
        self.too_late.pop(tenant, None)
        self.predicted_at.pop(tenant, None)
        self.acted.pop(tenant, None)
        self.generation.pop(("tenant", tenant), None)
        for adapter in adapters:
            self.edge.pop((tenant, adapter), None)
            self.returned.pop((tenant, adapter), None)
            hot = self.hot.get(adapter)
            if hot is not None and hot.pop(tenant, None) is not None and not hot:
                del self.hot[adapter]

    def on_request(self, now: float, event: RequestEvent, engine: str | None, outcome: str) -> list[Decision]:
        adapter = event.adapter
        assert adapter is not None
        tenant = event.tenant
        self.quick.add(adapter)
        tenant_key = ("tenant", tenant)
        generation = self.generation[tenant_key] = self.generation.get(tenant_key, 0) + 1
        moved = not self.core.demand.repeated(tenant)
        if moved and engine is not None:
            self._cover(tenant, adapter, engine, min(now, event.time))
        predictions = self._predict(tenant, adapter, now, event.time)
        if predictions and (moved or tenant not in self.acted):
            self.acted[tenant] = ([c for c, _ in predictions], now)
        if engine is None:
            return []
        self.experts[engine].requested(adapter)
        core = self.core
        decisions: list[Decision] = []
        if predictions:
            gap = core.demand.gap_quantile(tenant, adapter, self.gap_quantile)
            for candidate, probability in predictions:
                target = self._target(event, engine, candidate)
                if target is None:
                    continue
                self.hot.setdefault(candidate, {})[tenant] = (probability, now, adapter, now + self.hot_ttl_s)
                # The gap runs from the request's arrival, which a log line shows only at its end: a prefetch timed
                # from the moment it is learned would come a request's duration late.
                arrived = min(now, event.time)
                due = now if gap is None else arrived + gap - self._lead(target, candidate)
                timed = gap is not None
                decisions += self._prefetch_at(now, due, tenant_key, generation, target, candidate, adapter, timed)
        # Requested like clockwork (a timer's runs of calls read as one: `DemandModel.rhythm`): protected near its
        # next time (score), brought back before it if evicted.
        if core.demand.rhythm(adapter) is None:
            self.periodic.discard(adapter)
        else:
            self.periodic.add(adapter)
            adapter_key = ("adapter", adapter)
            self.generation[adapter_key] = self.generation.get(adapter_key, 0) + 1  # stale: pending returns
        return decisions

    def _cover(self, tenant: str | None, adapter: str, engine: str, arrived: float) -> None:
        """Whether a guess acted on after the tenant's previous move named this adapter early enough for a prefetch
        made then to have loaded before it came: such an adapter needs no other way back (`needed`)."""
        acted = self.acted.pop(tenant, None)
        hit = acted is not None and adapter in acted[0] and arrived >= acted[1] + self._load_seconds(engine, adapter)
        covered = self.covered.get(adapter, 0.0)
        self.covered[adapter] = covered + self.trust_rate * ((1.0 if hit else 0.0) - covered)

    def needed(self, adapter: str) -> float:
        """The chance a request for the adapter is not foretold in time by its tenant's move before it."""
        return 1.0 - self.covered.get(adapter, 0.0)

    def on_load_done(self, now: float, engine: str, adapter: str) -> list[Decision]:
        self.experts[engine].loaded(adapter)
        self.completed[engine] = self.completed.get(engine, 0) + 1
        return []

    def on_evicted(self, now: float, engine: str, adapter: str) -> None:
        self.experts[engine].evicted(adapter)
        hot = self.hot.get(adapter)
        if hot:
            self._bring_back(now, engine, adapter, hot)
        if adapter not in self.periodic or self.needed(adapter) < self.min_probability:
            return
        rhythm = self.core.demand.rhythm(adapter)
        if rhythm is None:
            return
        period, started = rhythm
        due = max(now, started + period - self._lead(engine, adapter))
        key = ("adapter", adapter)
        self._schedule(due, key, self.generation.get(key, 0), engine, adapter)

    def _bring_back(
        self, now: float, engine: str, adapter: str, hot: dict[str | None, tuple[float, float, str, float]]
    ) -> None:
        """A predicted adapter evicted before its tenant's next request is scheduled back, timed as the prediction
        was (from when it was made, by the tenant's shortest gap after the adapter it follows; none without three
        such gaps seen). On vLLM the victim is the engine's least recently used unless touched, and the touch
        budget steers few evictions: a next step resident when predicted was often gone when it came (the
        workflow families' predicted steps, an agent's planner between tool calls). What another prediction's
        prefetch displaced comes back once per prediction: two predictions for one slot would otherwise take it in
        turns, each load evicting the other. Not while another engine of the pool still holds it (a review found
        a second copy made so)."""
        core = self.core
        holder = core.place(adapter)  # the placement rule's pick: an engine holding it, where one does
        if holder is not None and core.book.engines[holder].holds(adapter):
            return  # still on another engine of its pool, where the gateway can send it: no second copy
        demand = core.demand
        returned = self.returned
        for tenant, (_, made_at, after, expires) in hot.items():
            if now > expires:
                continue
            if self._displacing:
                if returned.get((tenant, adapter)) == made_at:
                    continue
                returned[(tenant, adapter)] = made_at
            gap = demand.gap_quantile(tenant, after, self.gap_quantile)
            if gap is None:
                continue
            key = ("tenant", tenant)
            due = max(now, made_at + gap - self._lead(engine, adapter))
            self._schedule(due, key, self.generation.get(key, 0), engine, adapter)

    def _schedule(self, due: float, key: tuple[str, str | None], generation: int, engine: str, adapter: str) -> None:
        """A prefetch wanted at `due`, stale once `key`'s generation moves past `generation`."""
        self.seq += 1
        heapq.heappush(self.scheduled, ScheduledPrefetch(due, self.seq, key, generation, engine, adapter))

    def _target(self, event: RequestEvent, engine: str, candidate: str) -> str | None:
        """Where a prefetch goes: where the gateway sent the candidate's last request, as its line said (a
        gateway that hashes adapters sends it there again); else the engine the gateway sent this request to,
        when the log names it (the tenant's next request may go there too); otherwise where the candidate
        already is or the routing rule would put it, so engines of a pool do not hold needless copies."""
        core = self.core
        route = core.routes.get(candidate)
        if route is not None:
            return route
        if event.engine is not None and engine in core.serving.get(candidate, ()):
            return engine
        return core.place(candidate)

    def _load_seconds(self, engine: str, adapter: str) -> float:
        key = (engine, adapter)
        load_s = self._load_s.get(key)
        if load_s is None:
            core = self.core
            load_s = self._load_s[key] = core.load_ms[engine].cold_ms(core.sizes[adapter]) / 1000.0
        return load_s

    def _lead(self, engine: str, adapter: str) -> float:
        """How long before it is needed a load should start: its load time, with margin, behind the queue."""
        load_s = self._load_seconds(engine, adapter)
        return load_s * (self.lead_factor + len(self.core.book.engines[engine].in_flight)) + self.lead_margin_s

    def _prefetch_at(
        self,
        now: float,
        due: float,
        key: tuple[str, str | None],
        generation: int,
        target: str,
        candidate: str,
        keep: str,
        timed: bool = False,
    ) -> list[Decision]:
        """Prefetch now or schedule it for `due`. `timed`: `due` comes from the tenant's observed gaps, so a due
        already past means its next request is expected within a load's lead time."""
        if due <= now:
            if timed and len(self.core.book.engines[target].in_flight) >= self.max_in_flight:
                return []  # behind a busy loader it would come after the request it is for, and only take a slot
            return self._prefetch(now, target, candidate, keep)
        if key[0] == "tenant" and self.core.book.engines[target].holds(candidate):
            return []  # already there, and the prediction now protects it: nothing to schedule
        self._schedule(due, key, generation, target, candidate)
        return []

    def _prefetch(self, now: float, target: str, candidate: str, keep: str | None) -> list[Decision]:
        core = self.core
        state = core.book.engines[target]
        if state.holds(candidate):
            return []
        if state.has_room(core.sizes[candidate]):
            return core.load(now, target, candidate, PREFETCH, tuple)
        self.experts[target].forget_choice()  # what a prefetch displaces is not an expert's choice
        # Displace only what is worth no more (times the margin). A resident worth exactly as much goes too: the
        # chance of a request within the horizon saturates at 1, and between two adapters both certain to be asked
        # for, the one predicted for this tenant's next request is the sooner (LRU first among equals).
        bar = self.score(candidate, now) * self.displace_margin
        if state.budget.budget_bytes:  # the residents come by value per share of the budget: so is the bar
            bar /= self.cost(state, candidate)
        cheaper: Iterable[str] = _worth_at_most(self._cheapest(state, now, keep), bar)
        if _steered_by_touches(state):
            # What it displaces is steered by touches only where a demand load's victim would be (`_follows`);
            # else the engine's own victim, where that is worth no more than the bar.
            cheaper, judged = itertools.tee(cheaper)
            if not self._follows(state, now, judged):
                own = state.own_victim()
                if own is None or own == keep or self.score(own, now) > bar:
                    return []
                cheaper = (own,)
        self._displacing = True
        try:
            return core.load(now, target, candidate, PREFETCH, lambda: cheaper)
        finally:
            self._displacing = False

    # scheduled prefetches --------------------------------------------------------------------------------
    def next_wakeup(self) -> float | None:
        return self.scheduled[0].due if self.scheduled else None

    def tick(self, now: float) -> list[Decision]:
        decisions: list[Decision] = []
        scheduled = self.scheduled
        engines = self.core.book.engines
        while scheduled and scheduled[0].due <= now:
            work = heapq.heappop(scheduled)
            if self.generation.get(work.key) != work.generation or work.engine not in engines:
                continue  # a newer request replaced this prediction, or the engine left the fleet
            if len(engines[work.engine].in_flight) >= self.max_in_flight:
                done = self.completed.get(work.engine, 0)
                if work.attempt < self.retries:
                    self.seq += 1
                    mark = work.completed if work.attempt else done
                    wait = self._load_seconds(work.engine, work.adapter) + self.lead_margin_s  # a load's time
                    key, generation, engine, adapter = work.key, work.generation, work.engine, work.adapter
                    attempt = work.attempt + 1
                    retry = ScheduledPrefetch(now + wait, self.seq, key, generation, engine, adapter, attempt, mark)
                    heapq.heappush(scheduled, retry)
                    continue
                if done - work.completed >= self.max_in_flight:
                    # The loader turned its whole queue over while this waited and is full again: saturated.
                    # A prefetch now would only delay the demand loads behind it.
                    continue
                # Still the same loads in flight: a slow engine, not a flood. The prediction keeps its value.
            decisions += self._prefetch(now, work.engine, work.adapter, None)
        return decisions


def _steered_by_touches(state: EngineResidency) -> bool:
    """Whether an eviction there is steered by touches, one slot at a time: an engine that evicts by itself (vLLM),
    with no byte budget (a byte budget's victims are chosen by value per share, several at a time)."""
    return not state.profile.unload_frees and not state.budget.budget_bytes


def _worth_at_most(ranked: Iterable[tuple[float, str]], bar: float) -> Iterator[str]:
    """The adapters of a (score, adapter) ranking, cheapest first, up to the first one worth more than `bar`."""
    for score, adapter in ranked:
        if score > bar:
            return
        yield adapter


def initial_loads(core: PolicyCore, plan: Sequence[Placement], now: float) -> list[Decision]:
    """What the fleet loads at start, whichever expert it follows: the admin's plan, each tenant's pinned adapters
    on one engine that can serve them (pinned: never evicted), then the first steps of declared workflows."""
    decisions: list[Decision] = []
    pinned = [a for t in core.inventory.tenants.values() for a in t.pinned]
    heads = [chain[0] for t in core.inventory.tenants.values() for chain in t.workflows if chain]
    engines = core.book.engines
    for p in plan:
        state = engines.get(p.engine)
        if state is None or p.engine not in core.serving.get(p.adapter, ()) or state.holds(p.adapter):
            continue
        if state.has_room(core.sizes[p.adapter]):
            pin = p.pinned and can_pin(state, p.adapter)
            decisions += core.load(now, p.engine, p.adapter, PLAN, tuple, pin=pin)
    for adapter in dict.fromkeys(pinned):
        # One resident copy per pool: requests without an engine are routed to where it is resident.
        for engine in rank_engines(adapter, core.pools.get(adapter, ()), engines):
            state = engines[engine]
            if can_pin(state, adapter) and state.has_room(core.sizes[adapter]):
                decisions += core.load(now, engine, adapter, PLAN, tuple, pin=True)
                break
    for adapter in dict.fromkeys(heads):
        target = core.place(adapter)
        if target is not None and engines[target].has_room(core.sizes[adapter]):
            decisions += core.load(now, target, adapter, PLAN, tuple)
    return decisions
