"""The policy core shared by the daemon and `replay`: classify each request, keep the book, emit decisions.

Every decision is applied to the residency book as it is emitted — a load reserves its slot and bytes at once,
an eviction frees them — so no sequence of decisions can exceed a budget. Each decision names what the engine is
asked to do (kinds.py decides it here, once): LOAD, TOUCH and UNLOAD are engine calls; EVICT is an eviction the
engine's own LRU makes after the touches before it, so it sends nothing. The session (drive/session.py) carries
the decisions out, on simulated engines or through the daemon's actors, and reports back with `load_finished`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, ClassVar

from mypy_extensions import mypyc_attr

from lorafleet.inventory.capacity import LoadModel
from lorafleet.inventory.model import Inventory
from lorafleet.policy.demand import DemandModel
from lorafleet.policy.events import RequestEvent
from lorafleet.policy.placement import place_in, pool_members, serving_pools
from lorafleet.policy.residency import EngineResidency, ResidencyBook
from lorafleet.policy.value import Value

HIT, LATE, MISS, UNSERVED = "hit", "late", "miss", "unserved"
LOAD, TOUCH, UNLOAD, EVICT = "load", "touch", "unload", "evict"
DEMAND, PREFETCH, PLAN = "demand", "prefetch", "plan"


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class Decision(Value):
    """One thing to do on an engine: a value (policy/value.py), made once per load, eviction and touch."""

    __slots__ = ("action", "adapter", "engine", "overrun", "reason", "unused")
    fields = ("action", "engine", "adapter", "reason", "unused", "overrun")

    def __init__(
        self, action: str, engine: str, adapter: str, reason: str, unused: bool = False, overrun: bool = False
    ) -> None:
        self.action = action  # LOAD, TOUCH, UNLOAD (an eviction by unloading: SGLang), EVICT (vLLM's own LRU)
        self.engine = engine  # HOST/ENGINE
        self.adapter = adapter
        self.reason = reason  # demand, prefetch, plan (loads); the adapter it made room for (evictions, touches)
        self.unused = unused  # an eviction of a prefetch no request used (waste)
        self.overrun = overrun  # a load that leaves the engine past its budget by its own doing (`excess`)


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class Policy:
    """Base policy: load on demand, evict least recently used — what an engine does alone."""

    name: ClassVar[str] = "lru"
    honours_pins: ClassVar[bool] = False
    observes_demand: ClassVar[bool] = False
    keeps_tenants: ClassVar[bool] = False  # derived per class below: whether the core must say which tenant it forgot

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A policy keeps something per tenant when it observes the demand model or forgets a tenant itself:
        only then does its core remember tenants (per request, in every expert's session) to forget them."""
        super().__init_subclass__(**kwargs)
        cls.keeps_tenants = cls.observes_demand or cls.forget_tenant is not Policy.forget_tenant

    def bind(self, core: PolicyCore) -> None:
        self.core = core

    def start(self, now: float) -> list[Decision]:
        return []

    def route(self, event: RequestEvent) -> str | None:
        """The engine for a request the log does not place, when the policy has its own rule (else None: the
        core's placement rule)."""
        return None

    def on_arrival(self, now: float, event: RequestEvent, engine: str | None) -> None:
        """A request routed to `engine` is about to be classified (for policies that must see it first; none
        decides here)."""

    def victim_order(self, state: EngineResidency, now: float) -> Iterable[str]:
        return list(state.resident)

    def on_request(self, now: float, event: RequestEvent, engine: str | None, outcome: str) -> list[Decision]:
        return []

    def on_load_done(self, now: float, engine: str, adapter: str) -> list[Decision]:
        return []

    def on_line(self, hint: RequestEvent | None, line: RequestEvent | None, engine: str | None = None) -> None:
        """The log line of a request learned from its start hint (`hint`, as the policy took it), read now: it
        tells when the request ended (`seen`); None: the hint was closed without one. `engine`: the engine it ran
        on, as the book has it now. Nothing is decided on it; the lorafleet policy's runs of its experts take it
        (drive/leader.py)."""

    def on_evicted(self, now: float, engine: str, adapter: str) -> None:
        """An adapter left an engine (to make room). Policies may schedule work; they may not decide now."""

    def forget_tenant(self, tenant: str, adapters: set[str]) -> None:
        """The demand model forgot a tenant long inactive (`DemandModel.remember`, past MAX_TENANTS): whatever
        the policy keeps per tenant goes too (`adapters`: those the tenant asked for)."""

    def next_wakeup(self) -> float | None:
        """When the policy next wants `tick` (a scheduled prefetch), or None."""
        return None

    def tick(self, now: float) -> list[Decision]:
        return []

    def idle(self) -> None:
        """The calls for the latest request are on their way: work that no decision waits on may run now (a
        driver calls this after sending; anything the policy does next runs it first, so skipping it only moves
        the work)."""

    def on_forgotten(self, now: float, engine: str, adapters: Sequence[str]) -> None:
        """A reconcile found an engine without these adapters (restarted, or unloaded by someone else): the book
        has forgotten them. Policies that keep copies of the engines forget them there too."""

    def on_noticed(self, now: float, engine: str, adapter: str, answer: str, pinned: bool) -> None:
        """The book followed a change on an engine that no decision of this core's made (`Session.noticed`:
        another process's load or unload, a request the gateway sent elsewhere than the book placed it). Policies
        that keep copies of the engines take it there too."""

    def driven(self, engines: object | None, read_after_s: float = 0.0) -> None:
        """The session carrying this core's decisions out has started: `engines` are its simulated engines
        (drive/simulated.py), None where real engines carry them out; a log line reaches it at most `read_after_s`
        after its writing. A policy that keeps copies of the engines reads their loaders from there."""

    def resumed(self) -> None:
        """Bound to a restarted daemon's core (store/memory.py): what it learned stays; the engines' contents are
        what the new book finds, not what the policy last saw."""


TOUCH_BUDGET = 0.1  # touches allowed per adapter request an engine serves, by default


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class PolicyCore:
    # Whether lorafleet's calls for the request being served reach its engine before the request does: a request
    # known on arrival. Not so for one learned from its start hint, which the gateway sends as it forwards the
    # request, so the engine has made room for a miss by itself (`serve`'s `known`); the session says which.
    first = True

    def __init__(
        self,
        inventory: Inventory,
        policy: Policy,
        half_life: float | None = None,
        touch_budget: float = TOUCH_BUDGET,
        like: PolicyCore | None = None,
    ) -> None:
        """`touch_budget`: touches (1-token requests, real work on a GPU) each engine may be sent per adapter
        request it serves; `load` keeps every eviction within what the engine has earned (budget 0: what the
        engine does alone, but for pins). `like`: a core on the same inventory whose tables read from it (sizes,
        pools, load models: never written) this one shares — the experts' cores (seven cores on a 500-engine fleet
        of 50,000 adapters took 0.95 s to build, each its own tables; 0.2 s sharing them)."""
        self.inventory = inventory
        self.touch_budget = touch_budget
        # adapter -> the engine the gateway last sent a request for it to, as its line said (`placed`)
        self.routes: dict[str, str] = {}
        # engine -> touches it may still be sent: earned per request served (from none), one turnover banked at most
        self.touch_credit: dict[str, float] = {}
        self.book = ResidencyBook.from_inventory(inventory)
        engines = inventory.engines
        self.sizes: dict[str, int]
        self.pools: dict[str, list[str]]
        self.serving: dict[str, frozenset[str]]
        self.load_ms: dict[str, LoadModel]
        if like is not None and like.inventory is inventory:
            self.sizes, self.pools, self.serving, self.load_ms = like.sizes, like.pools, like.serving, like.load_ms
        else:
            self.sizes = {a.id: a.size_bytes for a in inventory.adapters.values()}
            self.pools = serving_pools(inventory)
            self.serving = pool_members(self.pools)  # the pools as sets, for membership
            self.load_ms = {e.key: e.load for e in engines}
        workflows = {t.name: t.workflows for t in inventory.tenants.values() if t.workflows}
        if half_life is None:
            # Popularity should outlive a few turnovers of the fleet's cache, no more: 8x its adapter slots.
            capacity = sum(e.slot_cap for e in engines)
            half_life = max(100.0, 8.0 * capacity)
        self.demand = DemandModel(half_life=half_life, workflows=workflows)
        self.loading_reason: dict[tuple[str, str], str] = {}  # (engine, adapter) in flight -> why it was loaded
        self.claimed: set[tuple[str, str]] = set()  # prefetches in flight a request already waits on (used)
        self.used_prefetch = False  # whether the request `on_request` last classified used a prefetch
        # (engine, adapter) never to load: its files vanished from the engine's host (vLLM would die of it)
        self.unavailable: set[tuple[str, str]] = set()
        self.policy = policy
        policy.bind(self)

    def rebuilt(self, inventory: Inventory, like: PolicyCore | None = None) -> PolicyCore:
        """This core on a new inventory: engines that stayed with the same budget keep their book; the demand
        model and the policy (bound to the new core) carry over; `like` as in the constructor."""
        new = PolicyCore(inventory, self.policy, touch_budget=self.touch_budget, like=like)
        new.demand = self.demand
        new.touch_credit = {k: v for k, v in self.touch_credit.items() if k in new.book.engines}
        for key, state in self.book.engines.items():
            if key in new.book.engines and new.book.engines[key].budget == state.budget:
                new.book.engines[key] = state
        new.loading_reason = {k: v for k, v in self.loading_reason.items() if k[0] in new.book.engines}
        new.claimed = {k for k in self.claimed if k[0] in new.book.engines}
        new.unavailable = {k for k in self.unavailable if k[0] in new.book.engines}
        new.keep_routes(self.routes)
        return new

    def keep_routes(self, routes: Mapping[str, object]) -> None:
        """Take learned routes (another core's, a thawed memory's) where the engine still serves the adapter."""
        serving = self.serving
        self.routes = {a: e for a, e in routes.items() if isinstance(e, str) and e in serving.get(a, ())}

    # --- driver interface ---------------------------------------------------------------------------------
    def start(self, now: float) -> list[Decision]:
        return self.policy.start(now)

    def route(self, event: RequestEvent) -> str | None:
        """The engine that serves a request: the one the log names, when it can serve the adapter; otherwise
        the one `place` picks."""
        adapter = event.adapter
        if adapter is None:
            return None
        engine = self.named_engine(event)
        if engine is not None:
            return engine
        chosen = self.policy.route(event)
        return chosen if chosen is not None else self.place(adapter)

    def placed(self, event: RequestEvent) -> str | None:
        """The engine a request the gateway routed before lorafleet could went to, as far as lorafleet can tell
        (a start hint, mirrored as the request is forwarded, names none): the one the log names, else the one the
        gateway sent the adapter's last request to, as that request's line said (`routes`), else the placement
        rule's choice on the book. A gateway that hashes adapters to engines (deploy/nginx-lorafleet.conf's
        `hash` line) sends each adapter to one engine, so after its first line the guess is right; by the
        placement rule it was wrong for 28-44% of hinted requests on two engines (docs/benchmarks.md), each a
        load made where the request never went. The policy's own routing (`route`) is for requests it places
        itself."""
        adapter = event.adapter
        if adapter is None:
            return None
        return self.named_engine(event) or self.routes.get(adapter) or self.place(adapter)

    def named_engine(self, event: RequestEvent) -> str | None:
        """The engine the log names for an adapter request, when it can serve the adapter."""
        engine = event.engine
        return engine if engine is not None and engine in self.serving.get(event.adapter or "", ()) else None

    def place(self, adapter: str) -> str | None:
        """The engine the placement rule picks among those that can serve the adapter."""
        return place_in(adapter, self.pools.get(adapter, ()), self.book)

    def on_request(self, now: float, event: RequestEvent, engine: str | None) -> tuple[str, list[Decision]]:
        """A request served and learned at once (lorafleet knows of it on arrival): classify it (hit, late, miss)
        and return the decisions it leads to; `used_prefetch` says whether it was the first request to use a
        prefetched adapter. Whether lorafleet's calls for it could steer its engine is `first`."""
        adapter = event.adapter
        assert adapter is not None
        if self.policy.keeps_tenants:
            self._remember(event.tenant, adapter)
        if self.policy.observes_demand:
            self.demand.observe(event.tenant, adapter, now)
        outcome, decisions = self.serve(now, event, engine, known=self.first)
        decisions.extend(self.policy.on_request(now, event, engine, outcome))
        return outcome, decisions

    def serve(
        self, now: float, event: RequestEvent, engine: str | None, known: bool = True
    ) -> tuple[str, list[Decision]]:
        """The engine's part of a request, at its arrival: its outcome, the engine's own recency, and the load a
        miss makes (the engine loads it itself). `known`: lorafleet knows of it on arrival (a start hint, or a log
        without durations); a request it learns of only from the line written at its end was served before any
        call could be made for it, so on an engine that evicts by its own LRU (vLLM) a miss displaced what that
        LRU chose, with no touch to steer it."""
        adapter = event.adapter
        assert adapter is not None
        self.policy.on_arrival(now, event, engine)
        self.used_prefetch = False
        if engine is None:
            return UNSERVED, []
        state = self.book.engines[engine]
        credit = self.touch_credit.get(engine, 0.0)
        cap = credit_cap(state)
        if credit < cap:
            self.touch_credit[engine] = min(cap, credit + self.touch_budget)
        decisions: list[Decision] = []
        if adapter in state.resident:
            outcome = HIT
            self.used_prefetch = state.touch(adapter)
        elif adapter in state.in_flight:
            outcome = LATE
            state.note_use(adapter)  # most recent by its request, not by when its load completes
            if self.loading_ahead(engine, adapter):
                self.used_prefetch = True
                self.claimed.add((engine, adapter))  # claimed: it will not count as an unused prefetch
        else:
            outcome = MISS
            alone = not known and not state.profile.unload_frees
            order = lambda: self.policy.victim_order(state, now)  # noqa: E731
            decisions = self.load(now, engine, adapter, DEMAND, order, complete=True, alone=alone, taken=not known)
            if decisions:
                state.note_use(adapter)
        return outcome, decisions

    def learn(self, now: float, event: RequestEvent, engine: str | None, outcome: str) -> list[Decision]:
        """lorafleet's part of a request served before it knew of it, at the moment it learns of it (from its log
        line): the demand model and the policy take it, with where it was served and how."""
        adapter = event.adapter
        assert adapter is not None
        if self.policy.keeps_tenants:
            self._remember(event.tenant, adapter)
        if self.policy.observes_demand:
            self.demand.observe(event.tenant, adapter, now, min(now, event.time))
        return self.policy.on_request(now, event, engine, outcome)

    def _remember(self, tenant: str | None, adapter: str) -> None:
        """Tenants are remembered up to MAX_TENANTS (policy/demand.py); the one forgotten is the policy's to
        forget too."""
        forgotten = self.demand.remember(tenant, adapter)
        if forgotten is not None:
            self.policy.forget_tenant(*forgotten)

    def load_finished(self, now: float, engine: str, adapter: str, ok: bool = True) -> list[Decision]:
        state = self.book.engines[engine]
        key = (engine, adapter)
        ahead = self.loading_ahead(engine, adapter)
        self.loading_reason.pop(key, None)
        self.claimed.discard(key)
        if not ok:
            state.fail_load(adapter)
            return []
        state.finish_load(adapter, prefetched=ahead)
        return self.policy.on_load_done(now, engine, adapter)

    def loading_ahead(self, engine: str, adapter: str) -> bool:
        """Whether the load of `adapter` in flight on `engine` is ahead of demand (a prefetch, a plan's) and no
        request has waited on it yet: done, it is a prefetch no request used."""
        key = (engine, adapter)
        return self.loading_reason.get(key, DEMAND) != DEMAND and key not in self.claimed

    def next_wakeup(self) -> float | None:
        return self.policy.next_wakeup()

    def tick(self, now: float) -> list[Decision]:
        """Let time pass: decisions scheduled for `now` or earlier (drivers call it at `next_wakeup()`)."""
        return self.policy.tick(now)

    # --- helpers for policies -----------------------------------------------------------------------------
    def load(
        self,
        now: float,
        engine: str,
        adapter: str,
        reason: str,
        victim_order: Callable[[], Iterable[str]],
        pin: bool = False,
        complete: bool = False,
        alone: bool = False,
        taken: bool = False,
    ) -> list[Decision]:
        """Make room (evicting in the order `victim_order()` gives, asked only when room is needed) and start
        a load; [] when no room can be made. `complete`: the order ranks every resident (a demand load's), rather
        than naming only those the policy lets go (a prefetch displaces only what is worth less).

        Touches are budgeted: when the policy's victims would take more touches than the engine's credit, the
        victims are the policy's preference among what the credit can reach (evicting the n-th least recently
        used takes n - 1 touches); else a demand load takes what the engine would evict alone, and a prefetch is
        not made. Pins are kept at any cost. `alone`: the engine has already made room by itself (a demand load
        lorafleet learns of after the fact): its least recently used go, and no touch is sent. `taken`: the engine
        took the request before any call of lorafleet's (learned from its line or its start hint), so it holds the
        adapter whether or not room can be made: with every other adapter in use it runs past its budget, as
        the engines do (drive/standin.py), until a later load makes room — the book holds what the engine holds
        rather than a load it did not keep (a copy of the fleet that took such misses as bypassed hit 146 of 400
        requests where the engines hit 381)."""
        state = self.book.engines[engine]
        if state.holds(adapter) or (engine, adapter) in self.unavailable:
            return []
        size = self.sizes[adapter]
        kept: list[str] | None = []
        if state.has_room(size):
            victims: list[str] | None = []
        elif state.profile.unload_frees:
            victims = state.victims_for(size, victim_order(), overrun=taken)
        else:
            credit = self.touch_credit.get(engine, 0.0)
            kept = None  # the touches the victims take, once known
            if alone or (complete and credit < 1.0):  # the engine's own choice (no need to rank)
                victims = state.victims_for(size, state.resident, overrun=taken)
            else:
                # The policy's order is read only as far as the victims need (a value order computes each score
                # as it is read); the rest only when the credit cannot pay for them.
                order, again = itertools.tee(victim_order())
                victims = state.victims_for(size, order)
                if victims is not None:
                    kept = state.keep_for(victims)
                    if len(kept) > credit:
                        kept = None
                        affordable = within_credit(state, again, credit)
                        if complete:  # a demand load must make room: else what the engine would evict alone
                            chain = _first_seen(itertools.chain(affordable, state.resident))
                            victims = state.victims_for(size, chain)
                        else:  # a prefetch goes only where the credit pays for it
                            victims = state.victims_for(size, affordable)
            if victims is not None and not alone:
                if kept is None:
                    kept = state.keep_for(victims)
                if not complete and len(kept) > credit:
                    victims, kept = None, []
                else:
                    self.touch_credit[engine] = credit - len(kept)
        if victims is None:
            return []
        decisions = []
        # What each engine kind lets a controller do (kinds.py): SGLang unloads the victims (memory freed); vLLM
        # only evicts its own least recently used, so the adapters older than the victims are touched first, and
        # the eviction itself is the engine's: no call.
        if kept:
            state.keep_all(kept)
            decisions += [Decision(TOUCH, engine, a, adapter) for a in kept]
        eviction = UNLOAD if state.profile.unload_frees else EVICT
        for victim in victims:
            unused = state.evict(victim)
            decisions.append(Decision(eviction, engine, victim, adapter, unused))
            self.policy.on_evicted(now, engine, victim)
        overrun = not state.has_room(size)  # the engine's own doing: a request it took, or the excess it has
        state.start_load(adapter, size, overrun=overrun)
        if pin and self.policy.honours_pins:
            state.pins.add(adapter)
        self.loading_reason[(engine, adapter)] = reason
        decisions.append(Decision(LOAD, engine, adapter, reason, False, overrun))
        return decisions


def within_credit(state: EngineResidency, order: Iterable[str], credit: float) -> Iterator[str]:
    """The adapters of `order`, in its order, that a steer the credit can pay may evict: evicting the n-th least
    recently used takes n - 1 touches."""
    return _among(order, set(itertools.islice(state.resident, max(0, int(credit)) + 1)))


def credit_cap(state: EngineResidency) -> float:
    """The most touch credit an engine banks: one turnover of its slots' worth."""
    return float(state.budget.slot_cap)


def _among(order: Iterable[str], reach: set[str]) -> Iterator[str]:
    """The items of `order` that are in `reach`, in its order; it stops reading once all of them came."""
    left = len(reach)
    for item in order:
        if item in reach:
            yield item
            left -= 1
            if not left:
                return


def _first_seen(items: Iterable[str]) -> Iterator[str]:
    """Each item once, at its first place."""
    seen: set[str] = set()
    for item in items:
        if item not in seen:
            seen.add(item)
            yield item
