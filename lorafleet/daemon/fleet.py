"""The daemon's decision side: the policy core over the inventory, and what each decision and result means for
the rollups, the journal, the metrics and (in shadow mode) the simulated engines. No I/O happens here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from prometheus_client import Counter

from lorafleet.daemon.actors import LOAD, Done
from lorafleet.daemon.metrics import DaemonMetrics
from lorafleet.daemon.tally import Pending, Summary, minute_of
from lorafleet.inventory.model import Inventory
from lorafleet.logs.reader import LineParser, NameResolver, source_for
from lorafleet.policy.core import DEMAND, EVICT, HIT, LATE, PLAN, UNSERVED, Decision, Policy, PolicyCore
from lorafleet.policy.core import LOAD as LOAD_DECISION
from lorafleet.policy.core import TOUCH as TOUCH_DECISION
from lorafleet.policy.engine_model import SimulatedEngines
from lorafleet.policy.events import RequestEvent
from lorafleet.policy.placement import PlannedResidency
from lorafleet.policy.policies import make_policy
from lorafleet.store.db import format_utc
from lorafleet.store.journal import ActionRow, RollupKey

log = logging.getLogger("lorafleet.daemon")
KEEP, RECONCILE_REASON = "keep", "reconcile"


class Fleet:
    def __init__(
        self,
        inventory: Inventory,
        policy: str,
        shadow: bool,
        plan: PlannedResidency | None,
        log_patterns: Sequence[str],
        metrics: DaemonMetrics,
        summary: Summary,
        pending: Pending,
        clock: Callable[[], str],
    ) -> None:
        if policy == "oracle":
            raise ValueError("the oracle needs the future: replay only")
        self.shadow = shadow
        self.plan = plan
        self.metrics = metrics
        self.summary = summary
        self.pending = pending
        self.source = "daemon-shadow" if shadow else "daemon"
        self.clock = clock  # the store's: UTC ISO-8601 now
        self.stamp = clock()  # the time journal rows carry: live, refreshed per batch by the loop (ms would cost)
        self._stamp_second = -1
        self.outcome_counters: dict[tuple[str, str], Counter] = {}  # labelled children, looked up once
        self.load_started: dict[tuple[str, str], float] = {}  # (engine, adapter) -> policy time the load began
        self.unused_unloads: dict[tuple[str, str], bool] = {}  # unloads in flight: do they evict unused prefetches
        self.speed: dict[str, float] = {}  # per engine: measured / modelled load time (calibration)
        # shadow: requests waiting on a simulated load, (rollup key, arrival, was a prefetch) per (engine, adapter)
        self.waiters: dict[tuple[str, str], list[tuple[RollupKey, float, bool]]] = {}
        self._setup(inventory, make_policy(policy, plan=plan.placements if plan else ()), log_patterns)

    def _setup(self, inventory: Inventory, policy: Policy, log_patterns: Sequence[str]) -> None:
        self.inventory = inventory
        self.core = PolicyCore(inventory, policy)
        resolver = NameResolver(inventory)
        self.parsers = [LineParser(source_for(p, inventory), inventory, resolver) for p in log_patterns]
        budgets = {key: state.budget for key, state in self.core.book.engines.items()}
        self.sim = SimulatedEngines({e.key: e.load for e in inventory.engines}, budgets, self.core.sizes)
        for engine in inventory.engines:
            budget = budgets[engine.key]
            self.metrics.budget_slots.labels(engine.key).set(-1 if budget.host_slots is None else budget.host_slots)
            self.metrics.budget_bytes.labels(engine.key).set(-1 if budget.budget_bytes is None else budget.budget_bytes)

    # --- decisions ------------------------------------------------------------------------------------------
    def start(self, now: float) -> list[Decision]:
        return self.decided(now, self.core.start(now))

    def advance(self, until: float) -> list[Decision]:
        """Scheduled prefetches (and, in shadow mode, simulated load completions) up to `until`, in time order."""
        core, sim = self.core, self.sim
        out: list[Decision] = []
        while True:
            wakeup = core.next_wakeup()
            wake = wakeup if wakeup is not None else float("inf")
            done = sim.next_done_ms() / 1000.0 if self.shadow and sim.completions else float("inf")
            if min(wake, done) > until or min(wake, done) == float("inf"):
                return out
            if done <= wake:
                c = sim.pop_done()
                at = c.done_ms / 1000.0
                reason = core.loading_reason.get((c.engine, c.adapter), DEMAND)
                self._shadow_stamp(at)
                for okey, arrived, prefetched in self.waiters.pop((c.engine, c.adapter), ()):
                    self._waited(c.engine, okey, c.done_ms - arrived * 1000.0, prefetched)
                self._journal(c.engine, c.adapter, "loaded", True, self._model_ms(c.engine, c.adapter), None, reason)
                out += self.decided(at, core.load_finished(at, c.engine, c.adapter))
                sim.start_next(c.done_ms, c.engine)
            else:
                assert wakeup is not None
                out += self.decided(wakeup, core.tick(wakeup))

    def request(self, now: float, event: RequestEvent) -> tuple[list[Decision], str]:
        """Classify one adapter request, add it to its minute's rollup, and return the decisions it leads to."""
        core = self.core
        adapter = event.adapter
        assert adapter is not None
        engine = core.route(event)
        used_before = core.counters.prefetch_used
        outcome, decisions = core.on_request(now, event, engine)
        counter = self.outcome_counters.get((engine or "", outcome))
        if counter is None:
            counter = self.outcome_counters[(engine or "", outcome)] = self.metrics.requests.labels(
                engine or "", outcome
            )
        counter.inc()
        if outcome == UNSERVED or engine is None:
            self.summary.unserved += 1
            return self.decided(now, decisions), outcome
        prefetched = core.counters.prefetch_used > used_before
        cold = self.cold_ms(engine, adapter)
        okey = (minute_of(event.time), event.tenant or "", adapter, engine)
        o = self.pending.outcome(okey)
        o.requests += 1
        s = self.summary
        s.requests += 1
        if outcome == HIT:
            o.hits += 1
            s.hits += 1
            if core.book.engines[engine].use_gpu(adapter):
                o.gpu_hits += 1
            if prefetched:
                o.prefetch_hits += 1
                o.avoided_ms += cold
                s.cold_ms_avoided += cold
                self.metrics.cold_ms_avoided.labels(engine).inc(cold)
        else:
            if outcome == LATE:
                o.late += 1
                s.late += 1
                if self.shadow:
                    self.sim.promote(engine, adapter)
            else:
                o.misses += 1
                s.misses += 1
            key = (engine, adapter)
            if self.shadow and adapter in core.book.engines[engine].in_flight:
                # The simulated load's completion says exactly how long it waited (replay's figure).
                self.waiters.setdefault(key, []).append((okey, now, prefetched))
            else:
                started = self.load_started.get(key, now) if outcome == LATE else now
                self._waited(engine, okey, max(0.0, min(cold, started * 1000.0 + cold - now * 1000.0)), prefetched)
        return self.decided(now, decisions), outcome

    def _waited(self, engine: str, key: RollupKey, waited: float, prefetched: bool) -> None:
        """A late or missed request's wait on its load: cold ms paid (and, for a prefetch, the part avoided)."""
        o = self.pending.outcome(key)
        o.cold_ms += waited
        self.summary.cold_ms_paid += waited
        self.metrics.cold_ms_paid.labels(engine).inc(waited)
        if prefetched:
            avoided = max(0.0, self.cold_ms(engine, key[2]) - waited)
            o.avoided_ms += avoided
            self.summary.cold_ms_avoided += avoided

    def _shadow_stamp(self, now: float) -> None:
        """In shadow mode an action is journaled at the policy time it would have happened (so a run over a
        recorded log files its actions beside that log's requests); live, at the wall time it was done."""
        second = int(now)
        if second != self._stamp_second:
            self._stamp_second = second
            self.stamp = format_utc(datetime.fromtimestamp(second, UTC))

    def decided(self, now: float, decisions: list[Decision]) -> list[Decision]:
        """Book-keeping for decisions just made; in shadow mode the simulated engines take them."""
        if self.shadow and decisions:
            self._shadow_stamp(now)
        s = self.summary
        for d in decisions:
            if d.action == LOAD_DECISION:
                self.load_started[(d.engine, d.adapter)] = now
                s.loads += 1
                if d.reason != DEMAND:
                    s.prefetch_loads += 1
            elif d.action == TOUCH_DECISION:
                s.touches += 1
                if self.shadow:
                    self._journal(d.engine, d.adapter, "touched", True, None, None, KEEP)
            elif d.action == EVICT:
                s.evictions += 1
                profile = self.core.book.engines[d.engine].profile
                if profile.unload_frees:
                    s.unloads += 1
                    if self.shadow:
                        self._journal(d.engine, d.adapter, "unloaded", True, None, None, self.reason_of(d), d.unused)
                    else:
                        self.unused_unloads[(d.engine, d.adapter)] = d.unused  # journaled when the call returns
                else:  # vLLM: no call; its LRU evicts this one after the touches
                    why = "by the engine's LRU"
                    self._journal(d.engine, d.adapter, "evicted", True, None, why, self.reason_of(d), d.unused)
        if self.shadow:
            self.sim.apply(now * 1000.0, decisions)
        return decisions

    def reason_of(self, d: Decision) -> str:
        """Why: a load's own reason; a touch keeps; an eviction makes room for a load with that load's reason."""
        if d.action == LOAD_DECISION:
            return d.reason
        if d.action == TOUCH_DECISION:
            return KEEP
        return self.core.loading_reason.get((d.engine, d.reason), DEMAND)

    # --- results from the engines -----------------------------------------------------------------------------
    def action_done(self, now: float, done: Done) -> list[Decision]:
        work = done.work
        assert work.adapter is not None
        result = "ok" if done.ok else ("refused" if done.action == "refused" else "failed")
        self.metrics.actions.labels(done.engine, work.action, result).inc()
        unused = work.action == "unload" and self.unused_unloads.pop((done.engine, work.adapter), False)
        self._journal(done.engine, work.adapter, done.action, done.ok, done.ms, done.error, work.reason, unused)
        if not done.ok:
            self.summary.failed += 1
            self.pending.errors.append((self.clock(), done.engine, done.error or done.action))
        if work.action != LOAD:
            return []
        if done.ok:
            self.metrics.load_seconds.labels(done.engine).observe(done.ms / 1000.0)
            modelled = self._model_ms(done.engine, work.adapter)
            if modelled > 0 and done.action == "loaded":
                ratio = done.ms / modelled
                old = self.speed.get(done.engine)
                self.speed[done.engine] = ratio if old is None else 0.8 * old + 0.2 * ratio
        state = self.core.book.engines.get(done.engine)
        if state is None or work.adapter not in state.in_flight:
            return []  # forgotten meanwhile (reconcile, reload)
        return self.decided(now, self.core.load_finished(now, done.engine, work.adapter, done.ok))

    def reconciled(self, now: float, done: Done) -> list[Decision]:
        """Correct the book from an engine's registry: what it no longer has is forgotten (an emptied registry
        is a restart), vanished files were unregistered; planned adapters it lacks are warmed again."""
        result = "ok" if done.ok else ("refused" if done.action == "refused" else "failed")
        self.metrics.actions.labels(done.engine, "reconcile", result).inc()
        if not done.ok or done.registry is None:
            self.pending.errors.append((self.clock(), done.engine, f"reconcile: {done.error}"))
            return []
        state = self.core.book.engines.get(done.engine)
        if state is None:
            return []
        registry = done.registry
        gone = [a for a in state.resident if a not in registry]
        wanted = {a: True for a in gone if a in state.pins and a not in done.vanished}  # pins come back
        if gone and not registry:
            log.warning("%s: registry empty (engine restarted?); re-warming its planned adapters", done.engine)
            self.summary.engine_restarts += 1
            self.metrics.engine_restarts.labels(done.engine).inc()
        for adapter in gone:
            state.unpin(adapter)
            state.evict(adapter)
            why = "files gone: unregistered" if adapter in done.vanished else "no longer registered"
            self._journal(done.engine, adapter, "forgotten", True, None, why, RECONCILE_REASON)
        for adapter in done.vanished:
            log.warning(
                "%s: %s's files are gone; unregistered before a request could kill the engine", done.engine, adapter
            )
            self.summary.vanished += 1
            self.metrics.vanished.labels(done.engine).inc()
            self._journal(done.engine, adapter, "unloaded", True, None, "files gone", RECONCILE_REASON)
        # What the engine certainly holds, lorafleet did not load: SGLang's registered adapters (in host memory),
        # vLLM's running ones (in a GPU slot, so cached). Adopted while they fit, so the budget counts them.
        held = registry if not state.profile.load_fills_gpu else set(done.running)
        for adapter in sorted(held):
            size = self.core.sizes.get(adapter)
            if size is not None and not state.holds(adapter) and state.has_room(size):
                state.admit(adapter, size)
        if self.plan is not None:
            for p in self.plan.placements:
                if p.engine == done.engine and p.adapter not in done.vanished:
                    wanted[p.adapter] = wanted.get(p.adapter, False) or p.pinned
        decisions: list[Decision] = []
        for adapter, pin in wanted.items():
            if not state.holds(adapter):
                order = lambda: self.core.policy.victim_order(state, now)  # noqa: E731
                decisions += self.core.load(now, done.engine, adapter, PLAN, order, pin=pin)
        return self.decided(now, decisions)

    # --- inventory reload ---------------------------------------------------------------------------------------
    def replace_inventory(self, inventory: Inventory, log_patterns: Sequence[str]) -> None:
        """A new inventory: engines that stayed with the same budget keep their book; the demand model and the
        policy carry over (the policy is bound to the new core)."""
        old = self.core
        self._setup(inventory, old.policy, log_patterns)
        new = self.core
        new.demand = old.demand
        new.counters = old.counters
        for key, state in old.book.engines.items():
            if key in new.book.engines and new.book.engines[key].budget == state.budget:
                new.book.engines[key] = state
        new.loading_reason = {k: v for k, v in old.loading_reason.items() if k[0] in new.book.engines}

    def update_gauges(self) -> None:
        for key, state in self.core.book.engines.items():
            self.metrics.resident.labels(key).set(len(state.resident))
            self.metrics.resident_bytes.labels(key).set(state.used_bytes)

    # --- helpers ----------------------------------------------------------------------------------------------
    def _model_ms(self, engine: str, adapter: str) -> float:
        return self.sim.cold_ms(engine, adapter)

    def cold_ms(self, engine: str, adapter: str) -> float:
        """A cold load's time: the load-time model, scaled by what this engine's loads measured (when known)."""
        return self._model_ms(engine, adapter) * self.speed.get(engine, 1.0)

    def _journal(
        self,
        engine: str,
        adapter: str,
        action: str,
        ok: bool,
        ms: float | None,
        error: str | None,
        reason: str,
        unused: bool = False,
    ) -> None:
        size = self.core.sizes.get(adapter)
        row = ActionRow(self.stamp, self.source, adapter, engine, action, ok, ms, size, error, reason, unused)
        self.pending.actions.append(row)


__all__ = ["Fleet"]
