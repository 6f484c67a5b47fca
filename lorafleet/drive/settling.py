"""Settling the counts a live session makes from log lines: its engines replayed in arrival order, a while behind.

A line is written at its request's end, and lines come in the order requests end, so the book learns of a
request after its engine served it, and not in the order the engine took them. The session counts each request
when its line is read, by what it then knows the engine held at the request's arrival (drive/stays.py); where
requests overlap for seconds that knowledge is incomplete both ways — an adapter a request still running kept
on its engine, an eviction a request still running made — and the count drifts from what the engine did (on
the trace generators' tool loops 13 points under the engines' own hit ratio, on workflows 12 over).

`Settling` replays the engines as they serve requests by themselves (drive/standin.py, replay's model of them):
each request at its arrival, in use until its end, and each of lorafleet's calls when made — once every request
that came before has had its line read, a `horizon` behind the newest line: the longest request seen, at least
`MIN_HORIZON_S`. Each request counted from its line is then served by the stand-ins, and where they say
otherwise than the count did — its outcome, its wait (`WAIT_SETTLED_MS`), its GPU slot or its use of a
prefetch — the count is settled:
the session counts it again (`Recounted`), so the daemon's journal, summary and metrics say what replay says of
the same log. A request that came more than the horizon
before the newest line when its own line is read (longer than any before it) is taken then, behind the requests
it overlapped.

Time here is the log's: arrivals and ends are the lines' times, and a call is placed at the session's clock but
no further than a horizon past the newest line (a daemon reading an old log from its start decides at the wall
clock, hours past the lines; a live one's clock is the newest line's time plus the time since). The stand-ins
start from what the book holds, its pins included, when the first line with a duration is read, as of the least
horizon before that line, and take the book's loads then in flight as calls made when they were sent (one that
fails loads nothing): the requests that came since have their lines to come, and are settled in order; one
that came before is served for what it leaves on its engine, never settled. They follow what else changes the
engines: another process's loads and unloads, a reconcile's finding that an adapter is no longer registered, or
is held by another process's load (what the book adopts, the stand-ins hold too, while it fits).
Requests learned from start hints are counted as the engine takes them, so they are not settled, but they are
served here too as they start, in use until their line comes. Instants are epoch seconds, waits milliseconds.
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Iterable, Mapping
from typing import NamedTuple, Protocol, cast

from mypy_extensions import mypyc_attr

from lorafleet.drive.standin import StandInEngines
from lorafleet.inventory.capacity import LoadModel
from lorafleet.policy.core import HIT, LATE, LOAD, MISS, TOUCH, UNLOAD
from lorafleet.policy.events import RequestEvent
from lorafleet.policy.residency import EngineResidency

MIN_HORIZON_S = 30.0  # how far behind the newest line the stand-ins run, at least: most requests are shorter
MAX_HORIZON_S = 900.0  # and at most (a hint's join window): a longer request is taken when its line comes
# Entries the stand-ins hold to come, at most (about 250 bytes each with the request they name): past it, the
# oldest are served at once, whatever the horizon (a long horizon at a high rate would hold gigabytes)
MAX_PENDING = 100_000
# At one instant: requests ended, calls made, arrivals, then the ends of requests taken late (after their arrival)
_END, _CALL, _ARRIVE, _LATE_END = 0, 1, 2, 3
REGISTRY = "registry"  # a reconcile's finding, beside the calls' actions
ADOPT = "adopt"  # a reconcile found an adapter another process loaded, which the book took
OUTCOME_FIELD = {HIT: "hits", LATE: "late", MISS: "misses"}  # each outcome's count, in Counts and in a rollup
# A request served as it was counted is settled all the same where the stand-ins' wait differs from the count's by
# this much or more (a miss queued behind other loads: the count from a line knows only its own load's time), or
# where a hit's GPU slot or its use of a prefetch does: so the cold time, as the outcomes, is what replay says. Less
# is left as counted; a settled request takes the load time a prefetch saved it as the stand-ins say.
WAIT_SETTLED_MS = 1.0


class Counted(NamedTuple):
    """How a request counts: as the session counted it from its line, or as the stand-ins served it (what
    settling compares)."""

    outcome: str
    waited_ms: float
    gpu: bool  # a hit whose adapter held a GPU slot
    avoided_ms: float  # the load time it did not wait, thanks to a load ahead of demand
    used: bool = False  # the first request after a load ahead of demand (a prefetch, a plan's): it used it


class Settled(NamedTuple):
    """A request the stand-ins served otherwise than it was counted (another outcome, GPU slot or use of a
    prefetch, or a wait `WAIT_SETTLED_MS` apart): its count, and how they served it."""

    event: RequestEvent
    engine: str
    counted: Counted
    served: Counted


class Tallied(Protocol):
    """What a settling moves a request in: the session's `Counts`, a journal rollup (`Outcomes`)."""

    hits: int
    late: int
    misses: int
    gpu_hits: int


def recount(counts: Tallied, counted: Counted, served: Counted, paid: str, avoided: str, used: str) -> float:
    """Move one request in `counts` (the session's `Counts`, a journal rollup: each names its wait fields,
    `paid` and `avoided`, and its count of prefetches used, `used`) from how it was `counted` to how the stand-ins
    `served` it: its outcome, its wait, its GPU hit, the load time it avoided and whether it used a prefetch, each
    as they served it (a request counted on a prefetch the engine had let go, or never loaded because it already
    held the adapter, used none). Returns the change in wait, for the metrics' paid and unpaid seconds. The one
    home of a settling's arithmetic."""
    if served.outcome != counted.outcome:
        was, now = OUTCOME_FIELD[counted.outcome], OUTCOME_FIELD[served.outcome]
        setattr(counts, was, getattr(counts, was) - 1)
        setattr(counts, now, getattr(counts, now) + 1)
    more = served.waited_ms - counted.waited_ms
    setattr(counts, paid, getattr(counts, paid) + more)
    setattr(counts, avoided, getattr(counts, avoided) + served.avoided_ms - counted.avoided_ms)
    setattr(counts, used, getattr(counts, used) + served.used - counted.used)
    counts.gpu_hits += served.gpu - counted.gpu
    return more


class _Arrival(NamedTuple):
    event: RequestEvent
    engine: str
    adapter: str
    counted: Counted | None
    scale: float  # the engine's calibration as the request was counted (`Settling`'s `speed`)


class _End(NamedTuple):
    engine: str
    adapter: str


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class Change:
    """A call made to an engine, or a change another process made (REGISTRY: a reconcile's finding). Mutable in
    one respect: a load answered with an error is marked `failed`, and loads nothing when its turn comes."""

    __slots__ = ("action", "adapter", "ahead", "demand", "engine", "failed", "loaded", "pinned", "registry", "scale")

    def __init__(
        self,
        action: str,
        engine: str,
        adapter: str,
        pinned: bool = False,
        registry: frozenset[str] = frozenset(),
        demand: bool = False,
        scale: float = 1.0,
        ahead: bool = False,
    ) -> None:
        self.action, self.engine, self.adapter, self.pinned = action, engine, adapter, pinned
        self.registry = registry
        self.demand = demand  # a load for a request the engine took
        self.ahead = ahead  # a load ahead of demand (a prefetch, a plan's): its first request uses it
        self.failed = False
        self.loaded = False  # it loaded the adapter on the stand-ins (its turn came)
        self.scale = scale  # the engine's calibration when it was made (`Settling`'s `speed`)


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class Settling:
    """The stand-in engines a horizon behind the lines (module docstring)."""

    def __init__(
        self,
        engines: Mapping[str, EngineResidency],
        loads: Mapping[str, LoadModel],
        sizes: Mapping[str, int],
        start: float,
        held: Mapping[str, list[tuple[str, float]]],
        margin_s: float = 0.0,
        loading: Mapping[str, list[tuple[str, float]]] | None = None,
        speed: Mapping[str, float] | None = None,
        ahead: Mapping[str, Collection[str]] | None = None,
    ) -> None:
        """Stand-ins for `engines` from the least horizon before `start` (the first line's time) on, holding
        `held` (per engine, (adapter, when its load is done), least recently used first) with the book's pins;
        `loading`: the loads in flight, per engine (adapter, when it was sent), each made a call then (in
        `seeded`, for its answer: one that fails before its turn loads nothing, as any call's); `margin_s`: how
        late a line may be read after one written later (a follower's poll); `speed`: the session's calibration of
        each engine's load times (measured over modelled, read as it changes): each request and call is served
        with the engine's as it was when it came here, as its count was made; `ahead`: per engine, what of `held`
        and `loading` was loaded ahead of demand, no request having used it yet. The GPU slots start as the
        book's."""
        self.standins = StandInEngines(engines, loads, sizes)
        self.speed: Mapping[str, float] = speed if speed is not None else {}
        self.loads_on_request = {key for key, state in engines.items() if state.profile.loads_on_request}
        ahead = ahead if ahead is not None else {}
        for key, adapters in held.items():
            state = engines[key]
            kept = [(a, ready) for a, ready in adapters if a in sizes]
            self.standins.hold(key, kept, state.pins, state.gpu, ahead.get(key, ()))
        self.newest = start
        self.at = start - MIN_HORIZON_S  # how far the stand-ins have run (the requests since have lines to come)
        self.margin_s = margin_s
        self.horizon = MIN_HORIZON_S
        self.max_pending = MAX_PENDING
        self.timeline: list[tuple[float, int, int, _Arrival | Change | _End]] = []
        self.order = 0
        self.seeded: dict[tuple[str, str], Change] = {}  # the loads in flight at the start, by (engine, adapter)
        for key, sent in (loading or {}).items():
            for adapter, at in sent:  # no name they hold: a demand load's skip (`called`) never applies
                if adapter in sizes:
                    pinned, scale = adapter in engines[key].pins, self.speed.get(key, 1.0)
                    early = adapter in ahead.get(key, ())
                    change = Change(LOAD, key, adapter, pinned, scale=scale, ahead=early)
                    self.seeded[(key, adapter)] = change
                    self._push(at, _CALL, change)

    def __len__(self) -> int:
        return len(self.timeline)

    def served(self, event: RequestEvent, engine: str, counted: Counted | None) -> None:
        """A request read from its line, served on `engine`: `counted` how the session counted it (None: counted as
        known on arrival — a line without a duration — so served here for what it leaves, never settled)."""
        adapter = event.adapter
        assert adapter is not None
        end = event.seen if event.seen is not None else event.time
        self.newest = max(self.newest, end)
        self.horizon = min(MAX_HORIZON_S, max(self.horizon, end - event.time))
        late = event.time < self.at  # taken now: what it found is not known here (before the start, among others)
        scale = self.speed.get(engine, 1.0)
        self._push(event.time, _ARRIVE, _Arrival(event, engine, adapter, None if late else counted, scale))
        self._push(end, _LATE_END if late else _END, _End(engine, adapter))

    def began(self, event: RequestEvent, engine: str) -> None:
        """A request taken at its start hint on `engine`, as the engine takes it: counted then, never settled,
        served on the stand-ins at its arrival, in use there until `ended`."""
        assert event.adapter is not None
        self._push(event.time, _ARRIVE, _Arrival(event, engine, event.adapter, None, self.speed.get(engine, 1.0)))

    def ended(self, clock: float, engine: str, adapter: str) -> None:
        """A request `began` took has ended (its line read at the session's `clock`, or its hint closed without
        one)."""
        self._push(self._now(clock), _LATE_END, _End(engine, adapter))

    def called(
        self,
        clock: float,
        action: str,
        engine: str,
        adapter: str,
        pinned: bool = False,
        demand: bool = False,
        ahead: bool = False,
    ) -> Change:
        """A call made to an engine at the session's `clock`, or a change another process made: a load or touch
        makes the adapter most recent there (loading it when absent), an unload drops it. `demand`: a load for a
        request the engine took, which an engine that loads on request answers "already loaded" for a name it
        knows, doing nothing (drive/late.py does the same); `ahead`: a load ahead of demand, which the first
        request after it uses where it loads. Returns the change, for `failed`."""
        scale = self.speed.get(engine, 1.0)
        change = Change(action, engine, adapter, pinned, demand=demand, scale=scale, ahead=ahead)
        self._push(self._now(clock), _CALL, change)
        return change

    def failed(self, clock: float, change: Change) -> None:
        """The load `called` made was answered with an error at the session's `clock`: it loads nothing (a request
        may still have brought the adapter). Answered after its turn came (a call that hung longer than the
        horizon), what it loaded is dropped from then on."""
        change.failed = True
        if change.loaded:
            self.called(clock, UNLOAD, change.engine, change.adapter)

    def registered(self, clock: float, engine: str, registry: Iterable[str]) -> None:
        """A reconcile found only `registry` registered on `engine`: nothing else is held there from then on."""
        self._push(self._now(clock), _CALL, Change(REGISTRY, engine, "", registry=frozenset(registry)))

    def adopted(self, clock: float, engine: str, adapter: str) -> None:
        """A reconcile found `adapter` held on `engine`, loaded by another process, and the book took it: held
        there from then on, while it fits (`StandInEngines.adopt`)."""
        self._push(self._now(clock), _CALL, Change(ADOPT, engine, adapter))

    def run(self) -> list[Settled]:
        """Serve everything that came a horizon before the newest line, and the oldest past `max_pending`; returns
        the requests the stand-ins served otherwise than they were counted, in arrival order."""
        return self._run(self.newest - self.horizon - self.margin_s)

    def drain(self) -> list[Settled]:
        """Serve everything known (the daemon stops, or the inventory changes under it)."""
        return self._run(float("inf"))

    def _now(self, clock: float) -> float:
        """The log's time of something done at the session's clock (module docstring)."""
        return min(clock, self.newest + self.horizon)

    def _push(self, at: float, kind: int, what: _Arrival | Change | _End) -> None:
        self.order += 1
        heapq.heappush(self.timeline, (max(at, self.at), kind, self.order, what))

    def _run(self, until: float) -> list[Settled]:
        timeline, standins = self.timeline, self.standins
        engines = standins.engines
        settled: list[Settled] = []
        while timeline and (timeline[0][0] <= until or len(timeline) > self.max_pending):
            at, kind, _, what = heapq.heappop(timeline)
            self.at = at
            if what.engine not in engines:  # left the inventory meanwhile
                continue
            if kind == _ARRIVE:
                arrival = cast(_Arrival, what)
                gpu_hits, used, avoided = standins.gpu_hits, standins.prefetch_used, standins.cold_ms_avoided
                outcome, waited = standins.arrive(at, arrival.engine, arrival.adapter, arrival.scale)
                counted = arrival.counted
                if counted is not None:
                    gpu = standins.gpu_hits > gpu_hits
                    first = standins.prefetch_used > used
                    saved = standins.cold_ms_avoided - avoided
                    if (
                        outcome != counted.outcome
                        or gpu != counted.gpu
                        or first != counted.used
                        or abs(waited - counted.waited_ms) >= WAIT_SETTLED_MS
                    ):
                        served = Counted(outcome, waited, gpu, saved, first)
                        settled.append(Settled(arrival.event, arrival.engine, counted, served))
            elif kind != _CALL:
                standins.end(what.engine, what.adapter)
            else:
                change = cast(Change, what)
                engine, adapter = change.engine, change.adapter
                if change.action == REGISTRY:
                    standins.keep_only(engine, set(change.registry))
                elif change.action == ADOPT:
                    standins.adopt(at, engine, adapter)
                elif change.action == UNLOAD:
                    standins.unload(engine, adapter)
                elif not change.failed and not (
                    change.demand and engine in self.loads_on_request and standins.registered(engine, adapter)
                ):
                    touch = change.action == TOUCH
                    ahead = change.ahead
                    change.loaded = standins.use(at, engine, adapter, change.pinned, touch, change.scale, ahead)
        return settled


__all__ = [
    "ADOPT",
    "MAX_HORIZON_S",
    "MAX_PENDING",
    "MIN_HORIZON_S",
    "OUTCOME_FIELD",
    "REGISTRY",
    "WAIT_SETTLED_MS",
    "Change",
    "Counted",
    "Settled",
    "Settling",
    "recount",
]
