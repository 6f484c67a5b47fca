"""Replay: the session (drive/session.py) driven by a recorded log against simulated engines.

The clock is the log's own: no sleeping, no wall clock. A request is a hit when its adapter is resident on the
serving engine when it arrives, late when a load of it is in flight (it waits the remainder), and a miss
otherwise (it waits for a cold load). Cold ms of a request is the time it waited on an adapter load, or for a hit
outside the GPU slots the copy into one (the stand-in engines of `log` visibility too: drive/standin.py).
The daemon's shadow mode runs the same session over the same requests, so its counts equal replay's exactly
(on a log without durations; with them, replay takes requests in arrival order, the daemon as it reads them).

Requests are taken in arrival order (a line's end minus its duration, where the log gives one), and each is
learned when lorafleet could know of it (`VISIBILITY`): `log` — when its line is written plus a follower's poll
(`FOLLOW_POLL_S`), what a daemon that tails logs gets; `hints` — on arrival, what the gateway's start hints give.
A log without durations gives each request one time, so the two are the same there.

Learned from its line, a request was served before lorafleet knew of it, and the book then believes what it
learned in the order it learned it, while the engine holds what its own LRU kept. So with durations, replay runs
the session as the daemon does (it returns calls; each line is taken when a follower reads it) against engines
that act by themselves as each kind does (drive/standin.py), in either visibility: the stand-ins say which
requests hit, came late or missed and how long each waited, which hits held a GPU slot, and which loads ahead of
demand a request used (with the load time that saved) or were let go unused — a prefetch the book sends for an
adapter whose request is still running finds it loaded, loads nothing and saves nothing (on the second
generator's tool loops 1,334 prefetches, 982 of them of an adapter the engine held: 34 used where the book
counted 461); what lorafleet did and believed (loads, prefetches sent, touches, evictions) is the session's, as
the daemon's journal has it. With `log` the
session learns where each request was served, beside the line rather than in it: the engine the placement rule
chose on the live book is no part of the log, so the experts' copies of the fleet (drive/leader.py) route the
line their own way. With `hints` it learns of each request from its start hint as the engine takes it
(`Session.hint`: it routes it, and a miss has made room by the engine's own LRU before any call of lorafleet's
arrives), and its line, read a poll after its end, releases its counts and ends its run. The engines alone do
not depend on when lorafleet learns of a request: one model of them, whatever the visibility. The policies
that see the future (`OFFLINE_POLICIES`) still run on the simulated engines, each request known on arrival and
running until its end.
"""

from __future__ import annotations

import dataclasses
import glob
import heapq
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from mypy_extensions import mypyc_attr

from lorafleet.collector import settle, unsettle
from lorafleet.drive.late import LateFleet
from lorafleet.drive.policies import BELADY, OFFLINE_POLICIES, ONLINE_POLICIES, ORACLE_VARIANTS, make_policy
from lorafleet.drive.session import Counts, Session
from lorafleet.drive.standin import StandInEngines
from lorafleet.inventory.gateway import log_patterns
from lorafleet.inventory.model import Inventory
from lorafleet.logs.reader import read_events
from lorafleet.measures import nearest_rank
from lorafleet.policy.core import HIT, LATE, MISS, TOUCH_BUDGET, PolicyCore
from lorafleet.policy.events import ADAPTER, RequestEvent
from lorafleet.policy.placement import Placement
from lorafleet.times import FOLLOW_POLL_S

LOG, HINTS = "log", "hints"
VISIBILITY = (LOG, HINTS)  # when lorafleet learns of a request: from its log line, or from its start hint
SETTLE_EVERY = 4096  # requests between the run's state being set aside from collections (and progress shown)


def _settle(index: int, progress: Callable[[int], None] | None) -> None:
    """Every SETTLE_EVERY requests: what the run has built so far is long-lived (collector.py); progress shown."""
    settle()
    if progress is not None:
        progress(index)


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
@dataclass(slots=True)
class PolicyResult(Counts):
    """One policy's replay: the session's counts, every request's wait, and what the simulated engines did."""

    policy: str = ""
    visibility: str = LOG
    cold_ms: list[float] = field(default_factory=list, repr=False)  # every served request's wait
    budget_violations: int = 0
    loader_busy_ms: float = 0.0
    loader_span_ms: float = 0.0
    engines: int = 0
    wall_s: float = 0.0
    headroom: float | None = None  # share of the lru-to-oracle gap captured (set by `replay` when both ran)

    @property
    def cold_ms_total(self) -> float:
        return self.cold_ms_paid

    def cold_ms_percentile(self, q: float) -> float:
        """Nearest-rank percentile over every served adapter request (a hit in a GPU slot counts as 0 ms)."""
        return nearest_rank(sorted(self.cold_ms), q)

    @property
    def loader_utilization(self) -> float:
        span = self.loader_span_ms * self.engines
        return self.loader_busy_ms / span if span > 0 else 0.0

    @property
    def requests_per_s(self) -> float:
        return self.requests / self.wall_s if self.wall_s > 0 else 0.0


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class Simulation:
    def __init__(
        self,
        inventory: Inventory,
        policy: str,
        events: Sequence[RequestEvent],
        variant: int = 0,
        plan: Sequence[Placement] = (),
        touch_budget: float = TOUCH_BUDGET,
        visibility: str = LOG,
        settle: bool = False,
    ) -> None:
        """`events` in arrival order (`in_arrival_order`). `settle`: with durations, the session settles its own
        counts as the daemon does (drive/settling.py; replay's are the stand-ins', so only a measure of the
        daemon's wants it: benchmarks/live_counts.py)."""
        # Where each request ends, for a policy that sees the future on a log with durations: it runs until then,
        # its adapter in use on the engine (`Session.runs`).
        self.ends: list[float | None] | None = None
        if policy in OFFLINE_POLICIES:
            # Each request known on arrival, by a policy that sees the future (so its evictions are its own, not
            # what vLLM's LRU did before a log line could tell of the request).
            if any(e.seen is not None for e in events):
                self.ends = [e.seen for e in events]
            events = [dataclasses.replace(e, seen=None) if e.seen is not None else e for e in events]
        self.events = events
        self.result = PolicyResult(policy=policy, visibility=visibility, engines=len(inventory.engines))
        core = PolicyCore(inventory, make_policy(policy, events, variant, plan), touch_budget=touch_budget)
        self.standins: StandInEngines | None = None
        # Served by engines acting by themselves, lorafleet learning of each request from its line (after the
        # engine served it) or from its start hint (as the engine takes it: `hints`)
        self.late = any(e.seen is not None for e in events)
        self.hints = visibility == HINTS
        if self.late:
            # LateFleet's, once run
            self.session = Session(core, answers=False, read_after_s=FOLLOW_POLL_S, settle=settle)
        else:
            self.session = Session(core, simulate=True, counts=self.result, answers=False, waits=self.result.cold_ms)

    def run(self, progress: Callable[[int], None] | None = None) -> PolicyResult:
        try:
            if self.late:
                return self._run_learning_late(progress)
            return self._run(progress)
        finally:
            unsettle()  # what the run set aside is the collector's again

    def _run(self, progress: Callable[[int], None] | None) -> PolicyResult:
        started = time.perf_counter()
        result, session = self.result, self.session
        request = session.request
        ends = self.ends
        running: list[tuple[float, int, str, str]] = []  # (end, index, engine, adapter) of requests still running
        for index, event in enumerate(self.events):
            if index % SETTLE_EVERY == 0:
                _settle(index, progress)
            if event.kind == ADAPTER:
                while running and running[0][0] <= event.time:
                    end, _, engine, adapter = heapq.heappop(running)
                    session.advance(end)
                    session.ended(engine, adapter)
                if not session.started:
                    session.start(event.time)
                request(event)
                until = ends[index] if ends is not None else None
                served = session.last_engine
                if until is not None and served is not None and event.adapter is not None:
                    session.runs(served, event.adapter)
                    heapq.heappush(running, (until, index, served, event.adapter))
        session.finish()  # what is loading completes; later wakeups serve no request
        sim = session.sim
        assert sim is not None
        result.loader_busy_ms = sim.busy_ms
        result.budget_violations = sim.violations
        # Loads queued near the end finish after the last request: the span runs until the last one is done, so
        # a serial loader is never busy for more than 100% of it.
        result.loader_span_ms = session.span_ms()
        result.wall_s = time.perf_counter() - started
        return result

    def _run_learning_late(self, progress: Callable[[int], None] | None = None) -> PolicyResult:
        """Each request served by its engine's stand-in at its arrival, its line taken by the session when a
        follower reads it, the session's calls carried out on the stand-ins when made and answered when done
        (drive/late.py)."""
        started = time.perf_counter()
        result = self.result
        cold_ms = result.cold_ms

        def served(event: RequestEvent, engine: str | None, outcome: str, waited: float) -> None:
            if engine is None:
                result.unserved += 1
                return
            result.requests += 1
            result.hits += outcome == HIT
            result.late += outcome == LATE
            result.misses += outcome == MISS
            result.cold_ms_paid += waited
            cold_ms.append(waited)

        fleet = LateFleet(self.session, served, hints=self.hints)
        for index, event in enumerate(self.events):
            if event.kind == ADAPTER:
                fleet.add(event)
            if index % SETTLE_EVERY == SETTLE_EVERY - 1:  # run as far as every later arrival
                fleet.run(event.time, before=True)
                _settle(index, progress)
        fleet.run()
        self.session.settle_all()  # the daemon's counts as at its stop
        self.standins = standins = fleet.standins
        counts = fleet.session.counts
        for name in _SESSIONS_OWN:
            setattr(result, name, getattr(counts, name))
        for name in _STANDINS_OWN_LATE:
            setattr(result, name, getattr(standins, name))
        result.loader_busy_ms = standins.busy_ms
        result.loader_span_ms = (
            max(1.0, (max(fleet.last, standins.last_done) - fleet.first) * 1000.0) if fleet.added else 1.0
        )
        result.wall_s = time.perf_counter() - started
        return result


# What the stand-ins count (what the engines did with each request, and with each load ahead of demand: whether a
# request used it, the load time that saved, whether it was let go unused); every other count is the session's:
# what lorafleet did and believed, as the daemon's journal has it.
_STANDINS_OWN_LATE = ("gpu_hits", "prefetch_used", "cold_ms_avoided", "wasted_prefetches")
_STANDINS_OWN = frozenset(
    {"requests", "hits", "late", "misses", "unserved", "cold_ms_paid", "bypassed", *_STANDINS_OWN_LATE}
)
_SESSIONS_OWN = tuple(f.name for f in dataclasses.fields(Counts) if f.name not in _STANDINS_OWN)


def in_arrival_order(events: Sequence[RequestEvent]) -> Sequence[RequestEvent]:
    """The requests as their engines saw them: by arrival (a log is in order of the requests' ends)."""
    if all(e.seen is None for e in events):
        return events
    return sorted(events, key=lambda e: e.time)


def replay(
    inventory: Inventory,
    events: Sequence[RequestEvent],
    policies: Sequence[str],
    progress: Callable[[str, int], None] | None = None,
    plan: Sequence[Placement] = (),
    touch_budget: float = TOUCH_BUDGET,
    visibility: Sequence[str] = (LOG,),
) -> list[PolicyResult]:
    """Run each policy over the same events from empty engines (lorafleet from `plan`, when given), once per
    visibility (policy by policy, each in the order given); the oracle last, so it can count the others'
    schedules among its own. Each result's headroom is set once lru and the oracle are known."""
    events = in_arrival_order(events)
    out: list[PolicyResult] = []
    for mode in visibility:
        results: dict[str, PolicyResult] = {}
        for name in sorted(policies, key=lambda n: n == "oracle"):
            callback = (lambda i, n=name: progress(n, i)) if progress is not None else None
            known = list(results.values())
            results[name] = simulate(
                inventory, name, events, callback, plan, known=known, touch_budget=touch_budget, visibility=mode
            )
        lru, oracle = results.get("lru"), results.get("oracle")
        if lru is not None and oracle is not None:
            for r in results.values():
                r.headroom = headroom_captured(r, lru, oracle)
        out += [results[name] for name in policies]
    if len(visibility) > 1:  # policy by policy: each one's figures under every visibility side by side
        out.sort(key=lambda r: list(policies).index(r.policy))
    return out


def simulate(
    inventory: Inventory,
    policy: str,
    events: Sequence[RequestEvent],
    progress: Callable[[int], None] | None = None,
    plan: Sequence[Placement] = (),
    known: Sequence[PolicyResult] = (),
    touch_budget: float = TOUCH_BUDGET,
    visibility: str = LOG,
) -> PolicyResult:
    """One policy over the events (taken in arrival order), learning each when `visibility` says. The oracle is
    the best schedule it knows (most hits, then least waiting): its own offline schedules, and every online
    policy's — each of those is a schedule the same engines carry out, so a controller that knows the future can
    do at least as well. So the oracle bounds every policy by construction; `known` passes results already
    computed on the same events (and plan, touch budget and visibility), to reuse them. Every policy, the
    oracle's schedules included, keeps to the same `touch_budget`."""
    events = in_arrival_order(events)

    def run(name: str, variant: int = 0, plan: Sequence[Placement] = plan) -> Simulation:
        return Simulation(inventory, name, events, variant, plan, touch_budget, visibility)

    if policy != "oracle":
        return run(policy).run(progress)
    have = {r.policy for r in known}
    runs = [
        run(policy, v, ()).run(progress)
        for v, schedule in enumerate(ORACLE_VARIANTS)
        if not (schedule is BELADY and "belady" in have)  # Belady's MIN alone: run already
    ]
    runs += list(known)
    runs += [run(p).run() for p in ONLINE_POLICIES if p not in have]
    best = max(runs, key=lambda r: (r.hits, -r.cold_ms_total))
    return dataclasses.replace(best, policy="oracle", wall_s=sum(r.wall_s for r in runs))


def lru_hit_ratio(inventory: Inventory, since: float, until: float) -> float | None:
    """What the engines alone (`lru`) give the requests in [since, until) of the inventory's gateway logs; None
    when the logs name none or hold none then."""
    if not inventory.gateway_logs:
        return None
    paths = [p for pattern in log_patterns(inventory) for p in sorted(glob.glob(pattern))]
    if not paths:
        return None
    events, _ = read_events(paths, inventory)
    events = [e for e in events if since <= e.time < until]
    if not any(e.kind == ADAPTER for e in events):
        return None
    return simulate(inventory, "lru", events).hit_ratio


def headroom_captured(result: PolicyResult, lru: PolicyResult, oracle: PolicyResult) -> float | None:
    """(policy − lru) / (oracle − lru) in hit ratio; None when the oracle has no headroom over lru."""
    gap = oracle.hit_ratio - lru.hit_ratio
    if gap <= 1e-12:
        return None
    return (result.hit_ratio - lru.hit_ratio) / gap


__all__ = [
    "HINTS",
    "LOG",
    "VISIBILITY",
    "PolicyResult",
    "Simulation",
    "headroom_captured",
    "in_arrival_order",
    "lru_hit_ratio",
    "replay",
    "simulate",
]
