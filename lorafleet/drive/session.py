"""The session: one run of the policy core, the one kernel both drivers share.

Replay and the daemon each hand the session requests and (live) the engines' answers; the session is the one
home of what happens around the core:
- time order: the policy's wakeups and the loads completing (simulated engines, when they stand in) are merged
  in time order before each request, so a wakeup sees the engines as they are at its own time (a request learned
  from its line is taken when the driver reads it: replay's reading times are the driver's, replay/driver.py);
- a request's two times: the engine serves it at its arrival (`RequestEvent.time`), lorafleet learns of it
  when it can know of it — a live daemon learns what it reads when it reads it; `hint` takes a request from the
  gateway's start hint, its counts held until its log line; a request learned only from its log line
  (`RequestEvent.seen`) was served before lorafleet knew of it, so the engine made room for it by itself, and
  is taken at its line's time, and judged by whether its engine held its adapter at its arrival (`held_at`):
  judged as the engine stands when its line is read, it would score prefetches decided after it came, and an
  adapter the engine kept for it while it ran, and the book later evicted, a miss (live, with seconds-long
  requests, the daemon counted 32% hits where its engines hit 93%). Simulated engines (an expert's copy of the
  fleet, shadow mode) also route it where the adapter was then;
- each request's outcome (hit, late, miss) and its wait on a load: exact from a simulated completion, else from
  the load-time model calibrated by the engine's measured loads;
- the counts every view reports (`Counts`), each counted once, at the moment it happens: a load when it is
  done, a touch or an unload when the engine (or its stand-in) has done it, an eviction by the engine's own LRU
  when it is decided (no call is made for it);
- which engine call each decision is (`Call`), so no driver works that out again.
It calls nothing above itself: what happened comes back as answers (`Served`, `Waited`, `Unserved`,
`Performed`) that the driver takes with `take_answers` and folds into its own results — replay into its result
(it needs only each request's wait, kept in `waits`), the daemon into rollups, journal rows and metrics. Shadow
mode and replay are therefore one computation: the same inputs give the same counts, exactly.

Instants are epoch seconds and durations milliseconds (lorafleet/times.py). The session never reads a clock:
time is passed in, and it never runs backwards (a request older than one already seen is taken at that time).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields, replace
from typing import NamedTuple

from mypy_extensions import mypyc_attr

from lorafleet.drive.settling import Change, Counted, Settled, Settling, recount
from lorafleet.drive.simulated import Completion, Loading, SimulatedEngines
from lorafleet.drive.stays import Stays
from lorafleet.inventory.model import Inventory
from lorafleet.measures import hit_ratio
from lorafleet.policy.core import DEMAND, HIT, LATE, LOAD, MISS, PLAN, TOUCH, UNLOAD, UNSERVED, Decision, PolicyCore
from lorafleet.policy.events import RequestEvent
from lorafleet.policy.placement import SCAN_MAX, Placement
from lorafleet.policy.value import Value

KEEP, RECONCILE = "keep", "reconcile"  # the reasons of touches, and of what a reconcile did
FORGET = "forget"  # a book entry a reconcile drops (no call: the engine no longer has it)
# What the engine answered, as journaled: a load's answers, then the other calls' and what needs no call.
LOADED, RELOADED, TOUCHED, UNLOADED = "loaded", "reloaded", "touched", "unloaded"
EVICTED, FORGOTTEN = "evicted", "forgotten"
NOT_REGISTERED = "not-registered"  # a touch answered "no such adapter": the book is stale (a reconcile follows)
LOAD_ANSWERS = (LOADED, RELOADED)
BY_ENGINE_LRU = "by the engine's LRU"


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
@dataclass(slots=True)
class Counts:
    """What a run did, as every view reports it (replay's result, the daemon's summary, `stats` over the journal)."""

    requests: int = 0  # adapter requests an engine served
    hits: int = 0
    late: int = 0
    misses: int = 0
    unserved: int = 0  # adapter requests no engine can serve (base model, rank or bytes)
    gpu_hits: int = 0  # hits whose adapter also held a GPU slot
    bypassed: int = 0  # misses for which no room could be made (served by a load that is not kept)
    cold_ms_paid: float = 0.0  # time requests waited on loads and on copies into a GPU slot
    cold_ms_avoided: float = 0.0  # load time requests did not wait, thanks to a prefetch
    loads: int = 0  # loads done
    prefetch_loads: int = 0  # of them, ahead of demand (prefetch or plan)
    prefetch_used: int = 0  # prefetched adapters a request then used (hit, or waited on while loading)
    wasted_prefetches: int = 0  # prefetched adapters evicted before any request used them
    evictions: int = 0
    touches: int = 0  # 1-token requests keeping an engine's own LRU on the policy's choice (vLLM)
    unloads: int = 0  # unload calls done (SGLang evictions; adapters whose files vanished)
    failed: int = 0  # engine calls that failed or were refused

    @property
    def hit_ratio(self) -> float:
        return hit_ratio(self.hits, self.requests)


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class Call(Value):
    """One engine call for a live driver to make: LOAD, TOUCH or UNLOAD, with what its journal row says (the
    answers tell of an EVICT and a FORGET too: journaled, never sent). A value (policy/value.py)."""

    __slots__ = ("action", "adapter", "engine", "pinned", "reason", "unused")
    fields = ("action", "engine", "adapter", "reason", "pinned", "unused")

    def __init__(
        self, action: str, engine: str, adapter: str, reason: str, pinned: bool = False, unused: bool = False
    ) -> None:
        self.action = action
        self.engine = engine
        self.adapter = adapter
        self.reason = reason  # demand, prefetch, plan (loads); keep (touches); an unload's: its load's reason
        self.pinned = pinned
        self.unused = unused  # an unload of a prefetch no request used


class Reconciled(NamedTuple):
    calls: list[Call]
    restarted: bool  # the engine's registry was empty while lorafleet held adapters there
    forgotten: list[str]  # held in the book, no longer registered


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class Served(Value):
    """A request an engine served, classified; `used`: it was the first to use a prefetched adapter. A value
    (policy/value.py): the session answers one per request."""

    __slots__ = ("at", "avoided_ms", "engine", "event", "gpu", "outcome", "used")
    fields = ("at", "event", "engine", "outcome", "gpu", "used", "avoided_ms")

    def __init__(
        self, at: float, event: RequestEvent, engine: str, outcome: str, gpu: bool, used: bool, avoided_ms: float
    ) -> None:
        self.at = at
        self.event = event
        self.engine = engine
        self.outcome = outcome
        self.gpu = gpu
        self.used = used
        self.avoided_ms = avoided_ms


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class Waited(Value):
    """A request's wait on its load (late, missed) or on the copy into a GPU slot (a hit outside them), and for a
    prefetch the load time it did not wait. A value (policy/value.py)."""

    __slots__ = ("avoided_ms", "request", "waited_ms")
    fields = ("request", "waited_ms", "avoided_ms")

    def __init__(self, request: Served, waited_ms: float, avoided_ms: float) -> None:
        self.request = request
        self.waited_ms = waited_ms
        self.avoided_ms = avoided_ms


class Recounted(NamedTuple):
    """A request counted from its log line that the engines, replayed in arrival order once every request that
    came before it was known (drive/settling.py), served otherwise: it was counted as `counted` says and counts as
    they `served` it now — its outcome (the same, where only its wait, GPU slot or use of a prefetch differed), the
    wait (a hit: none in a GPU slot, else the copy into one), and the prefetch it used and the load time that
    avoided, as they served it (`settling.recount`)."""

    at: float
    event: RequestEvent
    engine: str
    counted: Counted
    served: Counted


class Unserved(NamedTuple):
    """An adapter request no engine can serve."""

    at: float
    event: RequestEvent


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class Performed(Value):
    """An action on an engine (no call is sent for an eviction by the engine's own LRU, or a book entry a
    reconcile forgot): done, or, live, answered (failed or refused), as its journal row says it. A value
    (policy/value.py)."""

    __slots__ = ("answer", "at", "call", "error", "ms", "ok")
    fields = ("at", "call", "answer", "ok", "ms", "error")

    def __init__(self, at: float, call: Call, answer: str, ok: bool, ms: float | None, error: str | None) -> None:
        self.at = at
        self.call = call
        self.answer = answer
        self.ok = ok
        self.ms = ms
        self.error = error


Answer = Served | Waited | Unserved | Performed | Recounted


_NO_CALLS: list[Call] = []


# A settled request's fields in `Counts` (`recount`'s paid, avoided and used)
_SETTLED_FIELDS = ("cold_ms_paid", "cold_ms_avoided", "prefetch_used")
_Tally = tuple[int, int, int, float, int, float, int]
_NO_TALLY: _Tally = (0, 0, 0, 0.0, 0, 0.0, 0)


def _tally(counts: Counts) -> _Tally:
    return (
        counts.hits,
        counts.late,
        counts.misses,
        counts.cold_ms_paid,
        counts.gpu_hits,
        counts.cold_ms_avoided,
        counts.prefetch_used,
    )


def _counted(before: _Tally, counts: Counts) -> Counted | None:
    """How a request was just counted, from the counts before and after (None: not as served)."""
    hits, late, misses, paid, gpu, avoided, used = before
    if counts.hits > hits:
        outcome = HIT
    elif counts.late > late:
        outcome = LATE
    elif counts.misses > misses:
        outcome = MISS
    else:
        return None
    return Counted(
        outcome,
        counts.cold_ms_paid - paid,
        counts.gpu_hits > gpu,
        counts.cold_ms_avoided - avoided,
        counts.prefetch_used > used,
    )


_COUNTED = tuple(f.name for f in fields(Counts))


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
@dataclass(slots=True)
class Held:
    """A request served at its start hint: its counts and answers, until its log line releases them."""

    counts: Counts
    answers: list[Answer]
    released: bool = False
    tenant: str | None = None  # the log line's, where it names another than the hint did: answers are filed so
    engine: str | None = None  # where it was served: its adapter is running there until its line comes
    adapter: str | None = None
    ended: bool = False  # its line came, or its hint was closed without one: it runs no more
    hint: RequestEvent | None = None  # the hint's request, as the policy took it (`Policy.on_line`)
    rerouted: str | None = None  # the engine its line names, where that is not the one the book took it on
    settling: Settling | None = None  # the stand-ins that took its start (`Session.hint`): they take its end


def _filed_under(served: Served, tenant: str) -> Served:
    event = replace(served.event, tenant=tenant)
    return Served(served.at, event, served.engine, served.outcome, served.gpu, served.used, served.avoided_ms)


def _retagged(answer: Answer, tenant: str) -> Answer:
    if isinstance(answer, Served):
        return _filed_under(answer, tenant)
    if isinstance(answer, Waited):
        return Waited(_filed_under(answer.request, tenant), answer.waited_ms, answer.avoided_ms)
    if isinstance(answer, Unserved):
        return answer._replace(event=replace(answer.event, tenant=tenant))
    return answer  # an action: no tenant


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class Session:
    def __init__(
        self,
        core: PolicyCore,
        simulate: bool = False,
        counts: Counts | None = None,
        plan: Sequence[Placement] = (),
        answers: bool = True,
        waits: list[float] | None = None,
        read_after_s: float = 0.0,
        settle: bool = True,
    ) -> None:
        """`simulate`: simulated engines at the inventory's budgets carry the decisions out (replay, shadow mode);
        otherwise they come back as calls for the driver to make. `answers`: keep what happened for
        `take_answers`; `waits`: a list to append every served request's wait to (a hit in a GPU slot waits 0).
        `read_after_s`: how long after its writing a log line reaches the session, at most (a follower's poll).
        `settle`: on live engines, each request counted from a log line is settled once every request that came
        before it is known (`Settling`), and counted again where the engines served it otherwise (`Recounted`);
        off where no one reads the session's counts (the experts' runs)."""
        self.core = core
        self.answers: list[Answer] | None = [] if answers else None
        self.waits = waits
        self.sim: SimulatedEngines | None = None
        if simulate:
            budgets = {key: state.budget for key, state in core.book.engines.items()}
            self.sim = SimulatedEngines(core.load_ms, budgets, core.sizes)
        self.read_after_s = read_after_s
        core.policy.driven(self.sim, read_after_s)
        self.counts = counts if counts is not None else Counts()
        self.plan = tuple(plan)  # placements a reconcile warms again where the engine lacks them
        self.clock = float("-inf")  # the newest instant seen: time never runs backwards
        self.first = float("inf")  # the first instant (replay's span)
        # simulated: requests waiting on a load, (arrived, the request, used a prefetch, its hint's counts) per
        # (engine, adapter)
        self.waiters: dict[tuple[str, str], list[tuple[float, Served | None, bool, Held | None]]] = {}
        self.load_started: dict[tuple[str, str], float] = {}  # live: when each load in flight began
        self.speed: dict[str, float] = {}  # live, per engine: measured / modelled load time (calibration)
        self.confirmed: dict[str, set[str]] = {}  # live, per engine: its registry at the last reconcile
        self.disowned: dict[str, set[str]] = {}  # live, per engine: unloads and touches it answered "no such adapter"
        self.loaded_since: dict[str, set[str]] = {}  # live, per engine: loads answered since the last reconcile
        self.started = False
        self.decided: list[Decision] | None = None  # when a list: every decision made is appended (leader.py)
        self.last_engine: str | None = None  # where the last request was served
        self.stays = Stays()  # when each adapter was held on each engine, as the book knows it (`held_at`)
        # live, from lines with durations: the engines replayed in arrival order a while behind, settling each count
        # made from a line (drive/settling.py); made at the first such line; never where `settle` is off
        self.settle = settle and self.sim is None
        self.settling: Settling | None = None
        self.settle_loads: dict[tuple[str, str], Change] = {}  # loads in flight, as the stand-ins take them
        self.recounted = 0  # requests whose outcome settling changed (their waits too: not counted here)

    # --- the driver interface -----------------------------------------------------------------------------
    def start(self, now: float) -> list[Call]:
        """The policy's start (plan preload, pins) at `now`, once: both drivers call it at the first adapter
        request (the daemon on the wall clock when its logs are idle)."""
        if self.started:
            return _NO_CALLS
        self.started = True
        now = self._at(now)
        return self._carry_out(now, self.core.start(now))

    def take_answers(self) -> list[Answer]:
        """What happened since the last call, in time order."""
        answers = self.answers
        if not answers:
            return []
        self.answers = []
        return answers

    def request(
        self, event: RequestEvent, engine: str | None = None, held: Held | None = None, first: bool = True
    ) -> list[Call]:
        """One adapter request at its time (or the newest seen, if older): what is due first, then its outcome,
        its wait and the decisions it leads to. Returns the engine calls to make (none when simulated). `engine`:
        where it was served (the leader's copy of the fleet serves a line where the live engines did).
        `held`: the request was served at its start hint (`hint`); only its counts are released now, on the
        engine it ran on (`engine`, else the one its line names: `_rerouted` where the book took it elsewhere). A line
        written at its request's end is taken no earlier than then (`seen`): nothing lorafleet did for it, or
        for what it taught, could have been done before. `first` False: lorafleet learned of it as its engine took
        it (an expert's copy serving what the live session learned from a start hint)."""
        now = self._at(event.seen if event.seen is not None and held is None else event.time)
        calls = self.advance(now) if self._due(now) else _NO_CALLS
        if held is not None:
            ran = self._ran_on(event, engine)
            if ran is not None and held.engine is not None and ran != held.engine and not held.ended:
                self._rerouted(now, held, event, ran)
            self._release(held, event)
            if held.settling is not None and held.settling is self.settling:  # the stand-ins that took its start
                assert held.engine is not None and held.adapter is not None
                held.settling.ended(now, held.engine, held.adapter)
            if not held.ended:
                held.ended = True
                self.ended(held.engine, held.adapter)
            self.core.policy.on_line(held.hint, event, held.rerouted or held.engine)
            return calls
        more = self._arrive(now, event, engine, None, first)
        return calls + more if calls else more

    def idle(self) -> None:
        """The calls of the latest request or hint are sent: the policy's deferred work runs now (`Policy.idle`)."""
        self.core.policy.idle()

    def hint(self, event: RequestEvent) -> tuple[list[Call], Held]:
        """A request starting now, from the gateway's start hint: its arrival — routed, served, learned, its
        decisions made — with its counts held until its log line, the record of truth, comes
        (`request(line, held=...)`). A hint whose line never comes is never counted."""
        now = self._at(event.time)
        calls = self.advance(now) if self._due(now) else _NO_CALLS
        held = Held(Counts(), [], hint=event)
        more = self._arrive(now, event, None, held)
        if self.settling is not None and held.engine is not None:
            self.settling.began(event, held.engine)
            held.settling = self.settling
        return (calls + more if calls else more), held

    def _arrive(
        self, now: float, event: RequestEvent, engine: str | None, held: Held | None, first: bool = True
    ) -> list[Call]:
        core = self.core
        core.first = first and held is None  # a start hint comes as the engine takes the request, not before
        given = engine is not None
        if engine is None:  # a start hint comes as the gateway forwards the request: it went where the gateway sent it
            engine = core.route(event) if held is None else core.placed(event)
        if event.seen is not None and held is None:  # a line: where it ran, if told
            self._ran_on(event, engine if given else None)
        self.last_engine = engine
        then: bool | None = None  # learned from its line: whether the engine held it at its arrival
        if event.seen is None or held is not None:  # known on arrival: a hint, or a log without durations
            outcome, decisions = core.on_request(now, event, engine)
        else:  # a log line, written at its end: served before lorafleet could know of it, learned now
            if engine is not None and event.adapter is not None:
                self.stays.reach(now - event.time)
                if self.settle and self.settling is None:
                    self._settling(event.seen)  # from what the book holds before this line
                if self.sim is not None and not given and core.named_engine(event) is None:  # the rule's: then
                    engine = self.last_engine = self._routed_then(engine, event.adapter, event.time)
                then = self.held_at(engine, event.adapter, event.time)
            outcome, decisions = core.serve(now, event, engine, known=False)
            decisions += core.learn(now, event, engine, outcome)
            if then is not None:  # the engine held it from its arrival (a miss: once loaded) while it ran
                adapter = event.adapter
                assert engine is not None and adapter is not None
                loaded = event.time if then else event.time + max(1e-6, self.cold_ms(engine, adapter) / 1000.0)
                self.stays.add(engine, adapter, loaded, now)
        counts, settling = self.counts, self.settling if then is not None else None
        before = _tally(counts) if settling is not None else _NO_TALLY  # how it is counted, to be settled
        if outcome == UNSERVED or engine is None:
            counts, answers = self._sink(held)
            counts.unserved += 1
            if answers is not None:
                answers.append(Unserved(now, event))
        elif then is not None and then != (outcome == HIT):
            self._served_then(now, event, engine, then)
        elif then is False and outcome == LATE and self._started_after(engine, event):
            # learned from its line while the book's load of it runs: a load sent after the request came, which
            # it could not have waited on (it came to an engine without its adapter)
            self._served_then(now, event, engine, False)
        else:
            self._classify(now, event, engine, outcome, held)
            if held is not None:  # a start hint: its request runs on the engine until its line comes
                adapter = event.adapter
                assert adapter is not None
                held.engine, held.adapter = engine, adapter
                self.runs(engine, adapter)
        calls = self._carry_out(now, decisions) if decisions else _NO_CALLS
        if settling is not None:
            counted = _counted(before, counts)
            if counted is not None:
                assert engine is not None
                settling.served(event, engine, counted)
                self._settle(settling.run())
        elif held is None and event.seen is None and self.settling is not None and engine is not None:
            self.settling.served(event, engine, None)  # a line without a duration: what it leaves on its engine
        return calls

    def _started_after(self, engine: str, event: RequestEvent) -> bool:
        """Whether the book's load of the request's adapter in flight there began after the request came."""
        assert event.adapter is not None
        return self.load_started.get((engine, event.adapter), self.clock) > event.time

    def _settling(self, start: float) -> None:
        """The engines replayed behind the lines from `start` (the first line's time), from what the book holds
        now (pins included), its loads in flight taken as calls made when they were sent, their answers to come."""
        core, stays, started = self.core, self.stays, self.load_started
        held: dict[str, list[tuple[str, float]]] = {}
        loading: dict[str, list[tuple[str, float]]] = {}
        ahead: dict[str, set[str]] = {}  # loaded, or loading, ahead of demand, and no request used it yet
        for key, state in core.book.engines.items():  # held by `start` at the latest (the clock may be far past it)
            held[key] = [(a, min(start, stays.since(key, a))) for a in state.resident]
            loading[key] = [(a, min(start, started.get((key, a), start))) for a in state.in_flight]
            ahead[key] = set(state.prefetched) | {a for a in state.in_flight if core.loading_ahead(key, a)}
        book, speed, poll = core.book.engines, self.speed, self.read_after_s
        settling = Settling(book, core.load_ms, core.sizes, start, held, poll, loading, speed, ahead)
        self.settling = settling
        self.settle_loads.update(settling.seeded)  # their answers reach the stand-ins as the loads sent since do

    def _settle(self, settled: list[Settled]) -> None:
        """Requests the engines served otherwise than they were counted (`Settling`): counted again, as they were
        served, with an answer that says what changed (the journal's correction: nothing is counted twice)."""
        if not settled:
            return
        counts, answers = self.counts, self.answers
        for s in settled:
            recount(counts, s.counted, s.served, *_SETTLED_FIELDS)
            if answers is not None:
                answers.append(Recounted(self.clock, s.event, s.engine, s.counted, s.served))
        self.recounted += sum(s.served.outcome != s.counted.outcome for s in settled)

    def settle_all(self) -> None:
        """Every request counted from a line is settled now, with what is known (the daemon stops)."""
        if self.settling is not None:
            self._settle(self.settling.drain())

    def held_at(self, engine: str, adapter: str, at: float) -> bool:
        """Whether `engine` held `adapter` at instant `at` (drive/stays.py): on simulated engines what they did,
        on live ones what the book knew of them (its loads answered, the engine's own loads lines revealed, its
        evictions, what reconciles found); where the session has no record of it there (matched or restored,
        never loaded here), as it stands now."""
        stays = self.stays
        if stays.known(engine, adapter):
            return stays.held(engine, adapter, at)
        return adapter in self.core.book.engines[engine].resident

    def _routed_then(self, engine: str, adapter: str, at: float) -> str:
        """Where the placement rule sent a request learned from its line, on simulated engines: the first engine
        of the adapter's pool that held it at the request's arrival, as it stood then (the gateway routed it
        then), where the rule's choice now did not; else the choice now."""
        if self.held_at(engine, adapter, at):
            return engine
        pool = self.core.pools.get(adapter, ())
        if len(pool) > SCAN_MAX:  # only where it is, or has been, held
            index = self.core.book.indexed()
            near = set(index.resident.get(adapter, ())) | set(self.stays.engines(adapter))
            pool = [e for e in pool if e in near]
        return next((e for e in pool if e != engine and self.held_at(e, adapter, at)), engine)

    def _served_then(self, now: float, event: RequestEvent, engine: str, hit: bool, used: bool | None = None) -> None:
        """A request learned from its line whose engine held its adapter at its arrival but not now, or now but
        not then: it was served at its arrival, so it counts as the engine served it then — a hit, or a miss that
        waited a cold load. Judged now, a prefetch decided after the request came (on its predecessor's line)
        would count as a hit it could not have been, and an adapter evicted while the request ran as a miss: an
        expert's copy would be scored on what it could not have done (leader.py), the daemon's counts misreport.
        What the book does with it (the engine's own recency, a load that puts it back) is the core's as ever.
        `used`: whether it was the first to use a prefetch (default: as the core just classified it)."""
        counts = self.counts
        adapter = event.adapter
        assert adapter is not None
        if used is None:
            used = self.core.used_prefetch
        counts.requests += 1
        counts.prefetch_used += used
        answers = self.answers
        if hit:
            counts.hits += 1
            if answers is not None:
                answers.append(Served(now, event, engine, HIT, False, used, 0.0))
            if self.waits is not None:
                self.waits.append(0.0)
            return
        counts.misses += 1
        served = Served(now, event, engine, MISS, False, used, 0.0) if answers is not None else None
        if served is not None:
            answers.append(served)  # type: ignore[union-attr]
        cold = self.cold_ms(engine, adapter)
        self._waited(served, cold, cold, used, None)

    def _ran_on(self, event: RequestEvent, engine: str | None) -> str | None:
        """Where a request learned from its line ran: `engine`, as the driver says, else the engine its line
        names (None: untold). Kept as where the gateway sends its adapter (`PolicyCore.routes`: the engine a hint
        is taken on, `placed`, and the predictor's prefetch target)."""
        ran = engine if engine is not None else self.core.named_engine(event)
        if ran is not None and event.adapter is not None:
            self.core.routes[event.adapter] = ran
        return ran

    def _rerouted(self, now: float, held: Held, line: RequestEvent, engine: str) -> None:
        """A hinted request's line names another engine than the book took it on: a start hint names none (nginx
        mirrors a request before it picks the upstream), so the book placed it by the placement rule, while the
        gateway routed it its own way. The line is the record of truth. The request ran on `engine`, which holds
        its adapter now as its most recent (what that engine did by itself to serve it, taken as another
        process's load is, `noticed`, on every copy of the fleet the policy keeps too), and it counts as served
        there: a hit where that engine held the adapter at the request's arrival, else a miss that waited a cold
        load. On the engine the book took it on it no longer runs; what lorafleet did there for it (a load
        sent) was done, and stays in the book."""
        adapter, hint, booked = held.adapter, held.hint, held.engine
        assert adapter is not None and hint is not None and booked is not None
        hit = self.held_at(engine, adapter, hint.time)
        held.ended = True
        self.ended(booked, adapter, finished=False)
        waiting = self.waiters.get((booked, adapter))
        if waiting:  # a simulated load it was taken to wait on: its wait is no longer this request's
            waiting[:] = [w for w in waiting if w[3] is not held]
        held.counts, held.answers, held.rerouted = Counts(), [], engine
        self.noticed(engine, adapter, LOADED, False)
        tenant = line.tenant if line.tenant is not None else hint.tenant
        self._served_then(now, replace(line, tenant=tenant), engine, hit, used=False)

    def runs(self, engine: str, adapter: str) -> None:
        """A request known on arrival runs on `engine` until `ended` is called for it (a start hint until its log
        line; replay with hints, until the line's time): the engine touches its adapter at every step meanwhile,
        so it is no victim (`EngineResidency.running`)."""
        self.core.book.engines[engine].run(adapter)

    def ended(self, engine: str | None, adapter: str | None, finished: bool = True) -> None:
        """A request `runs` announced has ended: the engine, which touched its adapter at every step of its
        batches (docs/engines.md), holds that adapter as its most recent, in use no more by it. `finished` False:
        its line never came (the hint is closed), so it leaves the running ones and nothing more."""
        state = self.core.book.engines.get(engine) if engine is not None else None
        if state is None or adapter is None:
            return
        state.ran(adapter)
        if finished and adapter in state.resident:
            state.reorder(adapter)

    def unjoined(self, held: Held) -> None:
        """A hint whose log line never came is closed: its request no longer counts as running."""
        if not held.ended:
            held.ended = True
            self.ended(held.engine, held.adapter, finished=False)
            self.core.policy.on_line(held.hint, None, held.engine)
        if held.settling is not None and held.settling is self.settling:
            assert held.engine is not None and held.adapter is not None
            held.settling.ended(self.clock, held.engine, held.adapter)

    def _sink(self, held: Held | None) -> tuple[Counts, list[Answer] | None]:
        """Where a request's counts and answers go: the session's, or its hint's until its log line comes."""
        if held is None or held.released:
            return self.counts, self.answers
        return held.counts, held.answers if self.answers is not None else None

    def _release(self, held: Held, line: RequestEvent) -> None:
        """A hinted request's log line came: what its arrival counted is counted now (a wait still to come, on a
        simulated load, goes straight to the session's counts). The line is the record of truth: where it names
        a tenant the hint did not (a request-id join; a gateway that sends no tenant header), the request is
        filed under the line's."""
        held.released = True
        if line.tenant is not None and held.answers:
            first = held.answers[0]
            if isinstance(first, Served | Unserved) and first.event.tenant != line.tenant:
                held.tenant = line.tenant
                held.answers = [_retagged(answer, line.tenant) for answer in held.answers]
        counts = self.counts
        for name in _COUNTED:
            setattr(counts, name, getattr(counts, name) + getattr(held.counts, name))
        if self.answers is not None:
            self.answers += held.answers

    def advance(self, until: float) -> list[Call]:
        """Run the policy's wakeups and the simulated loads' completions in time order up to `until` (at one
        instant: completions first)."""
        core, sim = self.core, self.sim
        inf = float("inf")
        calls: list[Call] = []
        while True:
            wakeup = core.next_wakeup()
            wake = wakeup if wakeup is not None else inf
            done = sim.next_done() if sim is not None else inf
            first = min(done, wake)
            if first > until or first == inf:
                return calls
            if done == first:
                calls += self._completed(sim.pop_done())  # type: ignore[union-attr]
            else:
                self._at(wake)
                calls += self._carry_out(wake, core.tick(wake))

    def finish(self) -> None:
        """The end of a recorded log: the loads in flight complete; later wakeups would serve no request."""
        sim = self.sim
        while sim is not None and sim.completions:
            self._completed(sim.pop_done())

    def answered(
        self,
        now: float,
        call: Call,
        answer: str,
        ok: bool,
        ms: float,
        error: str | None = None,
    ) -> list[Call]:
        """A live engine's answer to a call: counted and journaled; a load's completion (or failure) goes to the
        core, whose follow-up decisions are returned as calls."""
        now = self._at(now)
        counts = self.counts
        if answer == NOT_REGISTERED:  # the engine lost it: evidence for the next reconcile (asked for at once)
            self.disowned.setdefault(call.engine, set()).add(call.adapter)
            if call.action == UNLOAD:  # gone already, as asked
                answer, error = UNLOADED, "the engine no longer had it"
        self._performed(now, call, answer, ok, ms, error)
        if call.action == LOAD:
            sent = self.settle_loads.pop((call.engine, call.adapter), None)
            if sent is not None and not ok and self.settling is not None:  # it loaded nothing
                self.settling.failed(now, sent)
        if not ok:
            counts.failed += 1
        elif call.action == TOUCH:
            counts.touches += 1
        elif call.action == UNLOAD:
            counts.unloads += 1
            self._evicted(call.unused)
        if call.action != LOAD:
            return _NO_CALLS
        key = (call.engine, call.adapter)
        self.load_started.pop(key, None)
        if ok:
            self._loaded(call.reason)
            self.loaded_since.setdefault(call.engine, set()).add(call.adapter)
            modelled = self.model_ms(call.engine, call.adapter)
            if modelled > 0 and answer == LOADED:
                ratio = ms / modelled
                old = self.speed.get(call.engine)
                self.speed[call.engine] = ratio if old is None else 0.8 * old + 0.2 * ratio
        state = self.core.book.engines.get(call.engine)
        if state is None or call.adapter not in state.in_flight:
            return _NO_CALLS  # forgotten meanwhile (reconcile, reload)
        if ok:
            self.stays.began(call.engine, call.adapter, now)
        return self._carry_out(now, self.core.load_finished(now, call.engine, call.adapter, ok))

    def reconciled(
        self,
        now: float,
        engine: str,
        registry: Iterable[str],
        vanished: Sequence[str],
        running: Sequence[str],
        back: Sequence[str] = (),
    ) -> Reconciled:
        """Correct the book from an engine's registry: what it no longer has is forgotten. A restart is an engine
        that emptied its registry, or lost every adapter it had at the last reconcile that lorafleet has held
        there since without loading it again, or was told "no such adapter" of (loads meanwhile refill it) — never
        lorafleet's own unloads, which leave the book at once, nor vanished files. Adapters whose files vanished were
        unregistered and are never loaded there again until their files are `back`; what the engine certainly
        holds is adopted while it fits; pinned and planned adapters it lacks are loaded again."""
        now = self._at(now)
        core = self.core
        state = core.book.engines.get(engine)
        if state is None:
            return Reconciled([], False, [])
        registry = set(registry)
        if self.settling is not None:
            self.settling.registered(now, engine, registry)
        disowned = self.disowned.pop(engine, set()) - registry
        held = (set(state.resident) | disowned) - self.loaded_since.pop(engine, set()) - set(vanished)
        survivors = self.confirmed.get(engine, set()) & held  # what it had then and should still have
        self.confirmed[engine] = set(registry)
        core.unavailable.update((engine, a) for a in vanished)
        core.unavailable.difference_update((engine, a) for a in back)
        gone = [a for a in state.resident if a not in registry]
        wanted = {a: True for a in gone if a in state.pins and a not in vanished}  # pins come back
        for adapter in gone:
            state.unpin(adapter)
            state.evict(adapter)
            self.stays.ended(engine, adapter, now)
            why = "files gone: unregistered" if adapter in vanished else "no longer registered"
            self._performed(now, Call(FORGET, engine, adapter, RECONCILE), FORGOTTEN, True, None, why)
        if gone:
            core.policy.on_forgotten(now, engine, gone)
        for adapter in vanished:
            self.counts.unloads += 1
            self._performed(now, Call(UNLOAD, engine, adapter, RECONCILE), UNLOADED, True, None, "files gone")
        # What the engine certainly holds, lorafleet did not load: SGLang's registered adapters (in host memory),
        # vLLM's running ones (in a GPU slot, so cached). Adopted while they fit, so the budget counts them.
        held = registry if not state.profile.load_fills_gpu else set(running)
        for adapter in sorted(held):
            size = core.sizes.get(adapter)
            if size is not None and not state.holds(adapter) and state.has_room(size):
                state.admit(adapter, size)
                self.stays.began(engine, adapter, now)
                if self.settling is not None:
                    self.settling.adopted(now, engine, adapter)
        for p in self.plan:
            if p.engine == engine and p.adapter not in vanished:
                wanted[p.adapter] = wanted.get(p.adapter, False) or p.pinned
        decisions: list[Decision] = []
        for adapter, pin in wanted.items():
            if not state.holds(adapter):
                order = lambda: core.policy.victim_order(state, now)  # noqa: E731
                decisions += core.load(now, engine, adapter, PLAN, order, pin=pin, complete=True)
        dropped_by_engine = [a for a in gone if a not in vanished]
        dropped = bool(dropped_by_engine or disowned)
        restarted = dropped and (not registry or (bool(survivors) and not survivors & registry))
        return Reconciled(self._carry_out(now, decisions), restarted, gone)

    def lost(self, engine: str) -> list[str]:
        """The adapters whose files vanished from this engine's host (not loaded there until they are back)."""
        return sorted(a for e, a in self.core.unavailable if e == engine)

    def noticed(self, engine: str, adapter: str, answer: str, pinned: bool) -> None:
        """Something other than this session's calls changed what an engine holds — another process (`warm`,
        `unload`), or the engine itself serving a request the book had placed elsewhere (`_rerouted`): the book
        follows what the engine now holds, and so does every copy of the fleet the policy keeps
        (`Policy.on_noticed`). A load is resident and most recent, displacing the least recently used as the
        engine itself does; an unload forgets the adapter, its pin included."""
        state = self.core.book.engines.get(engine)
        size = self.core.sizes.get(adapter)
        if self.settling is not None and state is not None and (answer == UNLOADED or answer in LOAD_ANSWERS):
            self.settling.called(self.clock, UNLOAD if answer == UNLOADED else LOAD, engine, adapter, pinned)
        if state is None or size is None or adapter in state.in_flight:
            return
        at, sim = self.clock, self.sim
        if answer == UNLOADED:
            if adapter in state.resident:
                state.unpin(adapter)
                state.evict(adapter)
                self.stays.ended(engine, adapter, at)
                if sim is not None:
                    sim.dropped(engine, adapter)
        elif answer not in LOAD_ANSWERS:
            return
        elif adapter not in state.resident:
            lru = [a for a in state.resident if a not in state.pins]
            victims = [] if state.has_room(size) else state.victims_for(size, lru)
            if victims is None:
                return
            state.admit(adapter, size, victims)
            for victim in victims:
                self.stays.ended(engine, victim, at)
                if sim is not None:
                    sim.dropped(engine, victim)
            self.stays.began(engine, adapter, at)
            if sim is not None:
                sim.held[engine][adapter] = size
        else:
            state.touch(adapter)
        if pinned:
            state.pin(adapter)
        self.core.policy.on_noticed(at, engine, adapter, answer, pinned)

    def match(self, now: float, engine: str, source: PolicyCore, engines: SimulatedEngines | None) -> list[str]:
        """This copy of the fleet's engine takes the contents, loads in flight and touch credit of `source`'s, as
        they stand (a new leader's copy matched to the live engine, leader.py). `engines`: the simulated engines
        carrying `source`'s decisions out, whose loader this copy's takes exactly (its load in progress, when
        that completes, its queue); None for real engines, whose loads start anew here in the order they were
        made, those a request waits on first. Its own loads in flight are dropped: a request waiting on one that
        `source` is not loading is charged as served by a load of its own (as `bypassed` is). Returns what it
        dropped. `now` is taken as this copy's clock where that is later (a log's lines come by the requests'
        ends, so the request that changed the lead may have arrived before others already served)."""
        now = self._at(now)
        core = self.core
        state = core.book.engines[engine]
        other = source.book.engines[engine]
        reasons = {a: source.loading_reason.get((engine, a), DEMAND) for a in other.in_flight}
        own: dict[str, float] = {}  # its loads in flight, each a cold load's ms (priced while the book has its size)
        for adapter in list(state.in_flight):
            own[adapter] = self.cold_ms(engine, adapter)
            state.fail_load(adapter)
            key = (engine, adapter)
            core.loading_reason.pop(key, None)
            core.claimed.discard(key)
        dropped, adopted = state.match(other)
        for adapter in dropped:
            self.stays.ended(engine, adapter, now)
        for adapter in adopted:
            self.stays.began(engine, adapter, now)
        for adapter, cold in own.items():
            if adapter not in state.in_flight:  # not taken again (not loading there, or no room here)
                for arrived, served, used, held in self.waiters.pop((engine, adapter), ()):
                    self._waited(served, (now - arrived) * 1000.0 + cold, cold, used, held)
        flying = list(state.in_flight)
        for adapter in flying:
            key = (engine, adapter)
            core.loading_reason[key] = reasons.get(adapter, DEMAND)
            if key in source.claimed:
                core.claimed.add(key)
        core.touch_credit[engine] = source.touch_credit.get(engine, 0.0)
        for adapter in dropped:
            core.policy.on_evicted(now, engine, adapter)
        if self.sim is not None:
            holding = {a: state.sizes[a] for a in state.resident} | dict(state.in_flight)
            if engines is not None:  # simulated too: its loader exactly as it stands (what this copy loads)
                theirs = engines.loading(engine)
                current = theirs.current if theirs.current in state.in_flight else None
                queue = tuple(a for a in theirs.queue if a in state.in_flight)
                demands = sum(a in state.in_flight for a in theirs.queue[: theirs.demands])
                loading = Loading(current, theirs.done_at, queue, demands)
            else:  # real engines: the loads in the order they were started, those requests wait on first
                waited = [a for a in flying if reasons.get(a, DEMAND) == DEMAND or a in state.used_at]
                rest = [a for a in flying if a not in waited]
                loading = Loading(None, float("inf"), (*waited, *rest), len(waited))
            self.sim.take(now, engine, holding, loading)
        return dropped

    def lost_on(self, now: float, engine: str, adapter: str) -> None:
        """The engine lost a resident by no decision of this session's (the live engine it copies did)."""
        self.core.book.engines[engine].evict(adapter)
        self.stays.ended(engine, adapter, now)
        if self.sim is not None:
            self.sim.dropped(engine, adapter)

    def replace_inventory(self, inventory: Inventory, like: PolicyCore | None = None) -> None:
        """A new inventory: engines that stayed with the same budget keep their book; the demand model, the
        policy (bound to the new core) and the counts carry over. `like`: a core on the new inventory whose
        tables read from it the new core shares (PolicyCore)."""
        kept = dict(self.core.book.engines)
        self.settle_all()  # settled on the engines they came to; the next line replays the new ones anew
        self.settling = None
        self.settle_loads.clear()
        new = self.core.rebuilt(inventory, like)
        self.core = new
        if self.sim is not None:
            budgets = {key: state.budget for key, state in new.book.engines.items()}
            self.sim.replace_engines(new.load_ms, budgets, new.sizes)
        engines = new.book.engines
        self.stays.forget(key for key, state in kept.items() if engines.get(key) is not state)  # gone, or empty

    def holdings(self) -> list[tuple[str, int, int]]:
        """(engine, adapters resident, their bytes) for every engine, as the book has them."""
        return [(key, len(s.resident), s.used_bytes) for key, s in self.core.book.engines.items()]

    # --- helpers ------------------------------------------------------------------------------------------
    def _size(self, engine: str, adapter: str) -> int:
        """An adapter's bytes (one a reload dropped while an engine held or loaded it keeps the book's size)."""
        size = self.core.sizes.get(adapter)
        if size is None:
            state = self.core.book.engines[engine]
            size = state.in_flight.get(adapter, state.sizes.get(adapter, 0))
        return size

    def model_ms(self, engine: str, adapter: str) -> float:
        """A cold load's time by the load-time model."""
        return self.core.load_ms[engine].cold_ms(self._size(engine, adapter))

    def cold_ms(self, engine: str, adapter: str) -> float:
        """A cold load's time: the load-time model, scaled by what this engine's loads measured (when known)."""
        return self.model_ms(engine, adapter) * self.speed.get(engine, 1.0)

    def copy_ms(self, engine: str, adapter: str) -> float:
        """What a hit outside the GPU slots waits: the host-to-device copy, scaled as `cold_ms` is."""
        return self.core.load_ms[engine].copy_ms(self._size(engine, adapter)) * self.speed.get(engine, 1.0)

    def span_ms(self) -> float:
        """From the first instant to the last request or simulated load, whichever ends later (at least 1 ms)."""
        last = self.clock if self.sim is None else max(self.clock, self.sim.last_done)
        return max(1.0, (last - self.first) * 1000.0) if self.first != float("inf") else 1.0

    def _at(self, now: float) -> float:
        if now > self.clock:
            self.clock = now
        if now < self.first:
            self.first = now
        return self.clock

    def _due(self, now: float) -> bool:
        wakeup = self.core.next_wakeup()
        return (wakeup is not None and wakeup <= now) or (self.sim is not None and self.sim.next_done() <= now)

    def _classify(self, now: float, event: RequestEvent, engine: str, outcome: str, held: Held | None) -> None:
        counts, answers = self._sink(held)
        waits = self.waits
        adapter = event.adapter
        assert adapter is not None
        state = self.core.book.engines[engine]
        used = self.core.used_prefetch
        counts.requests += 1
        counts.prefetch_used += used
        if outcome == HIT:
            counts.hits += 1
            gpu = state.use_gpu(adapter)
            counts.gpu_hits += gpu
            if not gpu:  # resident in host memory only: the request waits the copy into a GPU slot
                hit = Served(now, event, engine, HIT, False, used, 0.0) if answers is not None else None
                if hit is not None:
                    answers.append(hit)  # type: ignore[union-attr]
                self._waited(hit, self.copy_ms(engine, adapter), self.cold_ms(engine, adapter), used, held)
                return
            avoided = self.cold_ms(engine, adapter) if used else 0.0
            counts.cold_ms_avoided += avoided
            if answers is not None:
                answers.append(Served(now, event, engine, HIT, gpu, used, avoided))
            if waits is not None:
                waits.append(0.0)
            return
        if outcome == LATE:
            counts.late += 1
            if self.sim is not None:
                self.sim.promote(engine, adapter)
        else:
            counts.misses += 1
        served = Served(now, event, engine, outcome, False, used, 0.0) if answers is not None else None
        if served is not None:
            answers.append(served)  # type: ignore[union-attr]
        if adapter not in state.in_flight:
            if outcome != LATE:  # no room could be made: served by a load the engine does not keep
                counts.bypassed += 1
            cold = self.cold_ms(engine, adapter)
            self._waited(served, cold, cold, used, held)
        elif self.sim is not None:  # the simulated load's completion says exactly how long it waited
            self.waiters.setdefault((engine, adapter), []).append((now, served, used, held))
        else:
            cold = self.cold_ms(engine, adapter)
            started = self.load_started.get((engine, adapter), now) if outcome == LATE else now
            self._waited(served, max(0.0, min(cold, cold - (now - started) * 1000.0)), cold, used, held)

    def _waited(self, served: Served | None, waited: float, cold: float, used: bool, held: Held | None) -> None:
        counts, answers = self._sink(held)
        avoided = max(0.0, cold - waited) if used else 0.0
        if served is not None and held is not None and held.tenant is not None:
            served = _filed_under(served, held.tenant)
        counts.cold_ms_paid += waited
        counts.cold_ms_avoided += avoided
        if served is not None and answers is not None:
            answers.append(Waited(served, waited, avoided))
        if self.waits is not None:
            self.waits.append(waited)

    def _performed(self, at: float, call: Call, answer: str, ok: bool, ms: float | None, error: str | None) -> None:
        if self.answers is not None:
            self.answers.append(Performed(at, call, answer, ok, ms, error))

    def _completed(self, done: Completion) -> list[Call]:
        """A simulated load is done: its waiters' waits are known, and the core hears of it."""
        at, engine, adapter, replaced = done.done_at, done.engine, done.adapter, done.replaced
        self._at(at)
        key = (engine, adapter)
        core = self.core
        if engine not in core.book.engines or replaced:
            return _NO_CALLS  # the engine left the inventory, or started anew under a new budget, while this loaded
        waiting = self.waiters.pop(key, None)
        if waiting:
            cold = self.cold_ms(engine, adapter)
            for arrived, served, used, held in waiting:
                self._waited(served, (at - arrived) * 1000.0, cold, used, held)
        reason = core.loading_reason.get(key, DEMAND)
        self._loaded(reason)
        if self.answers is not None:
            self._performed(at, Call(LOAD, engine, adapter, reason), LOADED, True, self.model_ms(engine, adapter), None)
        self.stays.began(engine, adapter, at)
        calls = self._carry_out(at, core.load_finished(at, engine, adapter))
        assert self.sim is not None
        self.sim.start_next(at, engine)
        return calls

    def _loaded(self, reason: str) -> None:
        self.counts.loads += 1
        if reason != DEMAND:
            self.counts.prefetch_loads += 1

    def _evicted(self, unused: bool) -> None:
        self.counts.evictions += 1
        self.counts.wasted_prefetches += unused

    def _carry_out(self, now: float, decisions: list[Decision]) -> list[Call]:
        """Decisions just made: what needs no call is done now (an eviction by vLLM's own LRU; on simulated
        engines, every touch and unload, and the loads queued); the rest become calls for the driver."""
        if not decisions:
            return _NO_CALLS
        if self.decided is not None:
            self.decided += decisions
        sim, counts, settling = self.sim, self.counts, self.settling
        journal = self.answers is not None
        book = self.core.book.engines
        calls: list[Call] = []
        for d in decisions:
            action = d.action
            if action == TOUCH:
                if sim is None:
                    calls.append(Call(TOUCH, d.engine, d.adapter, KEEP))
                    if settling is not None:
                        settling.called(now, TOUCH, d.engine, d.adapter)
                    continue
                counts.touches += 1
                if journal:
                    self._performed(now, Call(TOUCH, d.engine, d.adapter, KEEP), TOUCHED, True, None, None)
            elif action == LOAD:
                if sim is None:
                    self.load_started[(d.engine, d.adapter)] = now
                    pinned = d.adapter in book[d.engine].pins
                    calls.append(Call(LOAD, d.engine, d.adapter, d.reason, pinned))
                    if settling is not None:
                        demand = d.reason == DEMAND
                        sent = settling.called(now, LOAD, d.engine, d.adapter, pinned, demand, not demand)
                        self.settle_loads[(d.engine, d.adapter)] = sent
                    continue
                sim.queue(now, d.engine, d.adapter, d.reason == DEMAND, d.overrun)
            else:  # an eviction, which takes the reason of the load it makes room for
                reason = self.core.loading_reason.get((d.engine, d.reason), DEMAND)
                self.stays.ended(d.engine, d.adapter, now)
                if action == UNLOAD and sim is None:
                    calls.append(Call(UNLOAD, d.engine, d.adapter, reason, False, d.unused))
                    if settling is not None:
                        settling.called(now, UNLOAD, d.engine, d.adapter)
                    continue
                if sim is not None:
                    sim.held[d.engine].pop(d.adapter, None)
                if action == UNLOAD:
                    counts.unloads += 1
                self._evicted(d.unused)
                if journal:
                    call = Call(action, d.engine, d.adapter, reason, False, d.unused)
                    answer, note = (UNLOADED, None) if action == UNLOAD else (EVICTED, BY_ENGINE_LRU)
                    self._performed(now, call, answer, True, None, note)
        return calls


__all__ = [
    "BY_ENGINE_LRU",
    "EVICTED",
    "FORGOTTEN",
    "KEEP",
    "LOADED",
    "LOAD_ANSWERS",
    "NOT_REGISTERED",
    "RECONCILE",
    "RELOADED",
    "TOUCHED",
    "UNLOADED",
    "Answer",
    "Call",
    "Counts",
    "Held",
    "Performed",
    "Reconciled",
    "Recounted",
    "Served",
    "Session",
    "Unserved",
    "Waited",
]
