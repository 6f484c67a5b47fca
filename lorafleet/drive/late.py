"""A policy learning from log lines, against engines that act by themselves: what the engines then do.

A request's line is written at its end, so a daemon that tails logs learns of it after its engine served it: the
engine took it at its arrival, loaded a missing adapter itself and evicted its own least recently used, the
adapter in use until the request ended (drive/standin.py). `LateFleet` runs one policy's session as the daemon
runs it (it returns calls) against stand-in engines, on one timeline: each request served by its stand-in at
its arrival, routed where the log names or else by the gateway's own rule on what the engines hold
(`StandInEngines.route`), its line taken by the session when a follower reads it (with the engine it ran on, as
nginx's `$upstream_addr` gives it), the session's calls carried out on the stand-ins when made and answered when
done, the session's wakeups each at its own time. With start hints the session takes each request at its
arrival where the placement rule sends it (a hint names no engine) and makes its calls there; its line says
where the gateway sent it (`Session._rerouted`).

Requests are added as they become known and the timeline is run up to an instant: replay adds a whole log and
runs it to the end (replay/driver.py); the lorafleet policy runs one per expert a little behind the lines it
reads, so each expert is scored by what the engines would have done had it alone been followed
(drive/leader.py). Instants are epoch seconds.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from typing import cast

from mypy_extensions import mypyc_attr

from lorafleet.drive.session import LOADED, RELOADED, TOUCHED, UNLOADED, Call, Held, Session
from lorafleet.drive.standin import StandInEngines
from lorafleet.policy.core import DEMAND, LOAD, TOUCH, UNSERVED
from lorafleet.policy.events import RequestEvent

_DONE, _END, _ARRIVE, _READ = 0, 1, 2, 3  # at one instant: loads done, requests ended, arrivals, lines read
_OWN = 1 << 62  # the order of the timeline's own entries (loads done, ends): after any request's

# what the engine did with a request at its arrival: (the request, the engine or None, outcome, wait in ms)
Served = Callable[[RequestEvent, str | None, str, float], None]


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class LateFleet:
    """One policy's session learning from log lines, against stand-in engines (module docstring)."""

    def __init__(self, session: Session, served: Served | None = None, hints: bool = False) -> None:
        """`session`: a live one (no simulated engines), which returns its calls, each line read its
        `read_after_s` after its writing (a follower's poll); `served`: told what the engine did with each request
        at its arrival (else each request and its outcome are kept in `outcomes`). `hints`: the session also
        learns of each request at its arrival, from the gateway's start hint (`Session.hint`), as the engine
        takes it; its line, read later, only releases its counts."""
        self.read_after_s = session.read_after_s
        self.hints = hints
        self.held: dict[int, Held] = {}  # with hints: each request's hint, by its order, until its line is read
        # with hints, a request added before its end was known (`line`): where it was served, by its order
        self.waiting: dict[int, tuple[str | None, str]] = {}
        self.lines: dict[int, RequestEvent | None] = {}  # ... and its line, when that came before its arrival ran
        core = session.core
        self.session = session
        self.outcomes: list[tuple[RequestEvent, str]] = []
        self.standins = StandInEngines(core.book.engines, core.load_ms, core.sizes)
        self.served = served if served is not None else self._kept
        self.timeline: list[tuple[float, int, int, RequestEvent | tuple[Call, str] | tuple[str, str]]] = []
        self.added = 0
        self.own = _OWN
        self.on: dict[int, str] = {}  # where each request served and not yet read was served, by its order
        self.first = float("inf")
        self.last = float("-inf")  # the latest instant run
        self.until = float("-inf")  # the latest `run` asked for: every fleet given the same requests and runs
        # serves the same ones, by then

    def add(self, event: RequestEvent) -> int:
        """An adapter request: served at its arrival (no earlier than the timeline has run), read at its line.
        With hints, one whose end is not known yet (no `seen`) runs on its engine until `line` gives its line.
        Returns its order."""
        order = self.added
        heapq.heappush(self.timeline, (max(event.time, self.until), _ARRIVE, order, event))
        self.added += 1
        return order

    def line(self, order: int, event: RequestEvent | None) -> None:
        """With hints: the line of the request `add` took as `order` without its end, read now — it ends on its
        engine at the line's time and the session reads it a poll later, each no earlier than the timeline has
        run; None: its hint was closed without a line (it ends now, and the session lets it go)."""
        if order not in self.waiting:  # its arrival has not run yet
            self.lines[order] = event
            return
        engine, adapter = self.waiting.pop(order)
        end = self.last if event is None or event.seen is None else max(self.last, event.seen)
        if engine is not None:
            self.own += 1
            heapq.heappush(self.timeline, (end, _END, self.own, (engine, adapter)))
        if event is None:
            self.on.pop(order, None)  # no line will read it
            self.session.unjoined(self.held.pop(order))
        else:
            heapq.heappush(self.timeline, (max(self.last, end + self.read_after_s), _READ, order, event))

    def run(self, until: float = float("inf"), before: bool = False) -> None:
        """Everything on the timeline up to `until` (`before`: short of it), in time order."""
        timeline, session, standins = self.timeline, self.session, self.standins
        core = session.core
        self.until = max(self.until, until)
        while timeline and (timeline[0][0] < until if before else timeline[0][0] <= until):
            at = max(timeline[0][0], self.last)  # what came to the timeline after the run passed its time: now
            wakeup = core.next_wakeup()
            if wakeup is not None and wakeup < at:  # each at its own time (never before the run's); its calls may
                # put a load's end before `at` on the timeline, to be run first
                self._carry_out(session.advance(wakeup), max(wakeup, self.last))
                continue
            _, kind, order, what = heapq.heappop(timeline)
            self.first = min(self.first, at)
            self.last = at
            self._carry_out(session.advance(at), at)
            if kind == _END:  # a request ended on its engine
                standins.end(*cast(tuple[str, str], what))
                continue
            if kind == _DONE:
                done, answer = cast(tuple[Call, str], what)
                self._carry_out(
                    session.answered(at, done, answer, True, session.model_ms(done.engine, done.adapter)), at
                )
                continue
            event = cast(RequestEvent, what)
            adapter = event.adapter
            assert adapter is not None
            if kind == _READ:
                held = self.held.pop(order) if self.hints else None
                self._carry_out(session.request(event, engine=self.on.pop(order, None), held=held), at)
                continue
            if not session.started:
                self._carry_out(session.start(at), at)
            calls: list[Call] = []
            engine = self._routed(at, event, adapter)
            if self.hints:  # the gateway forwards the request and mirrors its start to lorafleet at once: the
                # engine takes it before any call lorafleet makes for it arrives; the book takes it where the
                # placement rule sends it (a hint names no engine), its line where the gateway did
                calls, self.held[order] = session.hint(replace(event, seen=None) if event.seen is not None else event)
            ends = event.seen is not None or not self.hints  # else it runs until `line` says
            if engine is None:
                self.served(event, None, UNSERVED, 0.0)
            else:
                outcome, waited = standins.arrive(at, engine, adapter)
                if ends:
                    self.own += 1
                    heapq.heappush(timeline, (max(at, event.seen or at), _END, self.own, (engine, adapter)))
                self.on[order] = engine  # the book learns where it was served (beside the line, or in it)
                self.served(event, engine, outcome, waited)
            if calls:
                self._carry_out(calls, at)
            if not ends:
                self.waiting[order] = (engine, adapter)
                if order in self.lines:
                    self.line(order, self.lines.pop(order))
                continue
            seen = event.seen if event.seen is not None else at
            heapq.heappush(timeline, (seen + self.read_after_s, _READ, order, event))

    def _routed(self, now: float, event: RequestEvent, adapter: str) -> str | None:
        """Where the gateway sent a request, before lorafleet knew of it: where the log says, else by the
        gateway's own rule on what the engines hold (`StandInEngines.route`)."""
        core = self.session.core
        named = core.named_engine(event)
        return named if named is not None else self.standins.route(adapter, core.pools.get(adapter, ()), now)

    def _kept(self, event: RequestEvent, engine: str | None, outcome: str, waited: float) -> None:
        self.outcomes.append((event, outcome))

    def _carry_out(self, calls: list[Call], now: float) -> None:
        session, standins = self.session, self.standins
        pending = deque(calls)  # in the order made: the touches before the load they make room for
        while pending:
            call = pending.popleft()
            engine, adapter = call.engine, call.adapter
            if call.action == LOAD:
                # A demand load's call for a name the engine knows is answered "already loaded" (the request
                # brought it in); for one it does not — the gateway sent the request elsewhere — it loads.
                by_request = (
                    call.reason == DEMAND
                    and session.core.book.engines[engine].profile.loads_on_request
                    and standins.registered(engine, adapter)
                )
                ahead = call.reason != DEMAND  # a prefetch, a plan's: the first request after it uses it
                loads = False if by_request else standins.use(now, engine, adapter, call.pinned, ahead=ahead)
                ready = standins.ready_at(engine, adapter)
                answer = LOADED if loads else RELOADED
                if ready is not None and ready > now:  # answered once the engine has it
                    self.own += 1
                    heapq.heappush(self.timeline, (ready, _DONE, self.own, (call, answer)))
                    continue
                pending += session.answered(now, call, answer, True, session.model_ms(engine, adapter))
            elif call.action == TOUCH:
                standins.use(now, engine, adapter, request=True)  # a 1-token request naming it
                pending += session.answered(now, call, TOUCHED, True, 0.0)
            else:
                standins.unload(engine, adapter)
                pending += session.answered(now, call, UNLOADED, True, 0.0)


__all__ = ["LateFleet"]
