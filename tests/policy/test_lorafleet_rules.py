"""The lorafleet policy's rules, each pinned: shadow experts, trust and edge, lift, timing, retries, preload."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lorafleet.policy.core import PolicyCore, credit_cap
from lorafleet.policy.events import ADAPTER, RequestEvent
from lorafleet.policy.predictive import BLENDED, QUICK, SHORT, LorafleetPolicy
from tests.policy.builders import make_inventory

ENGINE = [{"kind": "vllm", "max_loras": 2, "max_cpu_loras": 5}]


def core_with(tmp_path: Path) -> tuple[PolicyCore, LorafleetPolicy]:
    policy = LorafleetPolicy()
    core = PolicyCore(make_inventory(tmp_path, adapters=6, engines=ENGINE), policy)
    state = core.book["h/e0"]
    for name in ("a0", "a1", "a2", "a3", "a4"):
        state.admit(name, 1)
    for _ in range(50):  # a0 is by far the most popular, and the least recently used
        core.demand.observe("t", "a0", 1.0)
    core.touch_credit["h/e0"] = credit_cap(state)  # a full touch credit: every steer that gains is worth its touches
    return core, policy


def test_following_the_lru_expert_when_recency_has_been_clearly_better(tmp_path: Path) -> None:
    core, policy = core_with(tmp_path)
    state = core.book["h/e0"]
    for name in ("a2", "a0", "a4"):  # requests on the engine: a1 and a3 were never asked for (oldest), then these
        policy.experts["h/e0"].requested(name)
    experts = policy.experts["h/e0"]
    experts.tempo.evidence[:] = [5.0, 1.0]  # the fast side ...
    experts.pace.evidence[:] = [5.0, 1.0]  # ... by recency
    assert list(policy.victim_order(state, 2.0)) == ["a1", "a3", "a2", "a0", "a4"]  # by request, not book order
    experts.tempo.evidence[:] = [1.0, 5.0]
    assert next(iter(policy.victim_order(state, 2.0))) != "a0"  # by value: the popular a0 is kept


def test_the_fast_side_ranks_by_the_policys_own_quick_memory(tmp_path: Path) -> None:
    core, policy = core_with(tmp_path)
    state = core.book["h/e0"]
    experts = policy.experts["h/e0"]
    experts.tempo.evidence[:] = [5.0, 1.0]  # the fast side, with quick popularity (pace's default)
    assert policy.quick.rate == pytest.approx(core.demand.rate / policy.quick_memory)  # a quarter of the short one
    requests = ["a3"] * 3 + ["a1", "a4", "a2", "a4"]
    for i, name in enumerate(requests):
        core.on_request(2.0 + i, RequestEvent(2.0 + i, ADAPTER, name, "t", "h/e0"), "h/e0")
    order = list(policy.victim_order(state, 10.0))
    assert order[:3] == ["a0", "a1", "a2"]  # a0 is popular to the demand model's memories, but not lately
    assert order[-2:] == ["a4", "a3"]


def test_each_memory_estimates_the_same_steady_share(tmp_path: Path) -> None:
    core, policy = core_with(tmp_path)
    state = core.book["h/e0"]
    for i in range(400):  # a1 and a2 take half the traffic each, for many quick half-lives
        name = ("a1", "a2")[i % 2]
        core.on_request(2.0 + i, RequestEvent(2.0 + i, ADAPTER, name, "t", "h/e0"), "h/e0")
    expected = 1.0 - math.exp(-0.5 * policy.horizon)  # requested within the horizon, at a share of one half
    for memory in (SHORT, QUICK):
        scores = dict((a, s) for s, a in policy._cheapest(state, 500.0, memory=memory))
        assert scores["a1"] == pytest.approx(expected, rel=0.05), memory
        assert scores["a0"] < 0.5 * expected  # the early favourite has faded from both


def _share(policy: LorafleetPolicy, memory: str, adapter: str) -> float:
    """An adapter's popularity share from the memory asked for, as `_cheapest` reads it."""
    demand = policy.core.demand
    if memory == BLENDED:
        return demand.share(adapter)
    if memory == SHORT:
        return min(1.0, demand.short_scale * demand.popularity.get(adapter, 0.0))
    return min(1.0, policy.quick.rate / policy.quick.weight * policy.quick.counts.get(adapter, 0.0))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    requests=st.lists(st.integers(0, 5), max_size=40),
    hot=st.dictionaries(st.integers(0, 4), st.floats(0.05, 1.0), max_size=4),
    periodic=st.sets(st.integers(0, 4), max_size=2),
    memory=st.sampled_from([BLENDED, SHORT, QUICK]),
)
def test_the_lazy_order_is_the_exact_order_of_full_scores(
    tmp_path: Path, requests: list[int], hot: dict[int, float], periodic: set[int], memory: str
) -> None:
    """Residents come out by ascending full score (popularity from the memory asked for, raised by predictions
    and periods), ties least recently used first, though full scores are computed only as far as needed."""
    core, policy = core_with(tmp_path)
    state = core.book["h/e0"]
    demand = core.demand
    for i, a in enumerate(requests):
        name = f"a{a}"
        core.on_request(2.0 + i, RequestEvent(2.0 + i, ADAPTER, name, "t", "h/e0"), "h/e0")
    now = 2.0 + len(requests)
    policy.hot = {f"a{i}": {"t": (p, now - 1.0, "a0", now + 100.0)} for i, p in hot.items()}
    policy.periodic = {f"a{i}" for i in periodic}
    for i in periodic:
        for k in range(5):
            demand.observe("cron", f"a{i}", now - 50.0 + 10.0 * k)  # every 10 s

    expected = sorted((policy._boosted(a, now, _share(policy, memory, a)), i, a) for i, a in enumerate(state.resident))
    assert list(policy._cheapest(state, now, memory=memory)) == [(score, a) for score, _, a in expected]


def test_an_eviction_opens_a_regret_pair_that_the_next_request_settles(tmp_path: Path) -> None:
    core, policy = core_with(tmp_path)
    state = core.book["h/e0"]
    experts = policy.experts["h/e0"].tempo
    victim = next(iter(policy.victim_order(state, 2.0)))  # the steady side's; the fast side's would have been a0
    assert victim != "a0" and experts.pending == ("a0", False)
    policy.on_evicted(2.0, "h/e0", victim)
    policy.experts["h/e0"].requested(victim)  # the evicted one came back first: value chose wrong
    assert experts.evidence[0] > 0.99 and experts.evidence[1] == 0.0


# --- trust, edge, lift, timing, retries, preload ------------------------------------------------------------

from dataclasses import replace  # noqa: E402

from lorafleet.policy.core import DEMAND, EVICT, HIT, LOAD, PLAN, PREFETCH  # noqa: E402
from lorafleet.policy.predictive import ScheduledPrefetch  # noqa: E402
from tests.policy.builders import TWO_VLLM, stream  # noqa: E402


def ask(core: PolicyCore, events) -> list:  # type: ignore[no-untyped-def]
    """Drive the core as replay does, with instant loads: scheduled work up to each request's time, then the
    request; every load completes at once."""
    decisions: list = []

    def done(now: float, new: list) -> None:  # type: ignore[type-arg]
        decisions.extend(new)
        for d in new:
            if d.action == LOAD:
                done(now, core.load_finished(now, d.engine, d.adapter))

    for e in events:
        while (wakeup := core.next_wakeup()) is not None and wakeup <= e.time:
            done(wakeup, core.tick(wakeup))
        done(e.time, core.on_request(e.time, e, core.route(e))[1])
    return decisions


def test_trust_and_edge_move_toward_what_came_true(tmp_path: Path) -> None:
    inv = make_inventory(tmp_path, adapters=4, engines=ENGINE, tenants={"t": "{workflows: [[a0, a1]]}"})
    policy = LorafleetPolicy()
    core = PolicyCore(inv, policy)
    ask(core, stream([0], tenants=["t"]))
    assert policy.predicted["t"] == (["a1"], [0.0], "a0")  # guessed after a0
    assert policy.trust["t"] == 0.6  # a declared workflow's start
    ask(core, stream([1], tenants=["t"]))  # it came true; a1 was none of the tenant's mix before
    assert policy.trust["t"] == pytest.approx(0.6 + 0.1 * (1 - 0.6))
    # The record of the guesses made after a0, from a declared workflow's start; only the rank guessed moves
    assert policy.edge == {("t", "a0"): pytest.approx([0.2 + 0.1 * (1 - 0.0 - 0.2), 0.2, 0.2])}
    undeclared = LorafleetPolicy(min_evidence=1.0)
    other = PolicyCore(make_inventory(tmp_path, adapters=4, engines=ENGINE, name="u.yaml"), undeclared)
    ask(other, stream([0, 1, 0], tenants=["u"]))  # a1 has followed a0 once: guessed after the second a0
    assert undeclared.trust["u"] == 0.3
    guessed, (baseline,), after = undeclared.predicted["u"]
    assert (guessed, after) == (["a1"], "a0")
    ask(other, [replace(stream([1], tenants=["u"])[0], time=2000.0)])
    assert undeclared.edge[("u", "a0")] == pytest.approx([0.1 + 0.1 * (1 - baseline - 0.1), 0.1, 0.1])


def test_a_prediction_is_weighed_by_the_tenants_trust(tmp_path: Path) -> None:
    inv = make_inventory(tmp_path, adapters=4, engines=ENGINE, tenants={"t": "{workflows: [[a0, a1]]}"})
    policy = LorafleetPolicy()
    core = PolicyCore(inv, policy)
    ask(core, stream([0], tenants=["t"]))  # the declared workflow says a1 follows a0 (probability 1)
    probability = policy.hot["a1"]["t"][0]
    assert probability == pytest.approx(1.0 * policy.initial_trust_declared)


def test_edge_is_measured_against_the_tenants_usual_mix(tmp_path: Path) -> None:
    inv = make_inventory(tmp_path, adapters=4, engines=ENGINE, tenants={"t": "{workflows: [[a0, a1]]}"})
    policy = LorafleetPolicy()
    core = PolicyCore(inv, policy)
    ask(core, stream([1, 1, 2, 0], tenants=["t"]))  # a1 is already much of t's mix when a0 predicts it
    guessed, (baseline,), after = policy.predicted["t"]
    assert ("t", "a0") not in policy.edge  # no guess made after a0 scored yet: a declared workflow's start
    edge = 2 * policy.min_edge
    assert (guessed, after) == (["a1"], "a0") and 0.3 < baseline < 1.0
    ask(core, [replace(stream([1], tenants=["t"])[0], time=2000.0)])
    assert policy.edge[("t", "a0")][0] == pytest.approx(edge + policy.trust_rate * (1.0 - baseline - edge))


def test_a_tenant_without_an_edge_is_scored_but_not_acted_on(tmp_path: Path) -> None:
    inv = make_inventory(tmp_path, adapters=4, engines=ENGINE, tenants={"t": "{workflows: [[a0, a1]]}"})
    policy = LorafleetPolicy()
    core = PolicyCore(inv, policy)
    policy.trust["t"], policy.edge[("t", "a0")] = 0.9, [0.05] * 3  # below min_edge
    decisions = ask(core, stream([0], tenants=["t"]))
    assert not [d for d in decisions if d.reason == PREFETCH]
    assert policy.predicted["t"][0] == ["a1"]  # still scored next time, so it can earn trust back
    policy.edge[("t", "a0")] = [0.5] * 3
    decisions = ask(core, stream([0], tenants=["t"]))
    assert [(d.action, d.adapter) for d in decisions if d.reason == PREFETCH] == [(LOAD, "a1")]


def test_a_tenant_exactly_at_the_minimum_edge_is_acted_on(tmp_path: Path) -> None:
    inv = make_inventory(tmp_path, adapters=4, engines=ENGINE, tenants={"t": "{workflows: [[a0, a1]]}"})
    policy = LorafleetPolicy()
    core = PolicyCore(inv, policy)
    policy.trust["t"], policy.edge[("t", "a0")] = 0.9, [policy.min_edge] * 3  # where an undeclared tenant starts
    decisions = ask(core, stream([0], tenants=["t"]))
    assert [(d.action, d.adapter) for d in decisions if d.reason == PREFETCH] == [(LOAD, "a1")]


def irregular(sequence: list[int], seed: int = 4) -> list:  # type: ignore[type-arg]
    """One tenant's requests at irregular gaps (1–30 s), so no adapter looks periodic."""
    import random

    rng = random.Random(seed)
    events, t = [], 1000.0
    for e in stream(sequence, tenants=["t"]):
        t += rng.uniform(1.0, 30.0)
        events.append(replace(e, time=t))
    return events


def test_no_prefetch_when_the_next_adapter_is_no_likelier_than_the_tenants_usual_mix(tmp_path: Path) -> None:
    """min_lift: alternating a0, a1 — the next one is certain, but so is it from the mix alone (the other adapter is
    all the traffic that is not a0)."""
    inv = make_inventory(tmp_path, adapters=6, engines=[{"kind": "vllm", "max_loras": 1, "max_cpu_loras": 1}])
    alternating = PolicyCore(inv, LorafleetPolicy())
    decisions = ask(alternating, irregular([0, 1] * 20))
    assert not [d for d in decisions if d.reason == PREFETCH]
    cycling = PolicyCore(inv, LorafleetPolicy())  # a0..a5 in turn: the next is 6x likelier than the mix
    decisions = ask(cycling, irregular([0, 1, 2, 3, 4, 5] * 6))
    assert [d for d in decisions if d.reason == PREFETCH]


def test_a_prefetch_is_timed_before_the_tenants_earliest_next_request(tmp_path: Path) -> None:
    one_slot = [{"kind": "vllm", "max_loras": 1, "max_cpu_loras": 1}]  # a1 is never still there when due
    inv = make_inventory(tmp_path, adapters=4, engines=one_slot, tenants={"t": "{workflows: [[a0, a1]]}"})
    policy = LorafleetPolicy()
    core = PolicyCore(inv, policy)
    a0, a1, a2, a3 = stream([0, 1, 2, 3], ["t"])
    for start in (0.0, 100.0, 200.0):  # a0 then, 30 s later, a1 (the usual gap after a0), then others
        ask(core, [replace(a0, time=start), replace(a1, time=start + 30), replace(a2, time=start + 50)])
        ask(core, [replace(a3, time=start + 70)])
    decisions = ask(core, [replace(a0, time=300.0)])
    assert not [d for d in decisions if d.reason == PREFETCH]  # not now: scheduled
    due = core.next_wakeup()
    load_s = policy._load_s[("h/e0", "a1")]
    lead = load_s * (policy.lead_factor + 1) + policy.lead_margin_s  # a0's own load was in flight then
    assert due == pytest.approx(300.0 + 30.0 - lead) and 300.0 < due < 330.0
    later = ask(core, [replace(a2, time=due + 0.001)])  # time passes: the scheduled prefetch goes first
    assert next((d.adapter, d.reason) for d in later if d.action == LOAD) == ("a1", PREFETCH)


def test_a_timed_prediction_of_an_adapter_already_held_schedules_nothing(tmp_path: Path) -> None:
    """a1 usually comes 30 s after a0; at the next a0, a1 is still resident: no prefetch is scheduled for it.
    Once it is gone, the next call of a0 schedules one, before a1's usual time."""
    inv = make_inventory(tmp_path, adapters=4, engines=ENGINE, tenants={"t": "{workflows: [[a0, a1]]}"})
    policy = LorafleetPolicy()
    core = PolicyCore(inv, policy)
    a0, a1, a2, _ = stream([0, 1, 2, 3], ["t"])
    for start in (0.0, 100.0, 200.0):
        ask(core, [replace(a0, time=start), replace(a1, time=start + 30), replace(a2, time=start + 50)])
    assert core.book["h/e0"].holds("a1")
    ask(core, [replace(a0, time=300.0)])
    assert [w.adapter for w in policy.scheduled] == []
    core.book["h/e0"].evict("a1")
    ask(core, [replace(a0, time=301.0)])  # another call of a0: the guess is made again, timed from it
    assert [w.adapter for w in policy.scheduled] == ["a1"] and 301.0 < policy.scheduled[0].due < 331.0


def evicted_by_the_engine(tmp_path: Path) -> tuple[PolicyCore, LorafleetPolicy, list[RequestEvent]]:
    """a1 usually comes 30 s after a0; at 300 s a0 comes with a1 still resident (nothing scheduled), then another
    tenant's a3 at 301 s makes vLLM evict its least recently used, a1 (no touch budget to steer it). Returns the
    other tenant's next request, a4."""
    one_gpu = [{"kind": "vllm", "max_loras": 1, "max_cpu_loras": 3}]
    inv = make_inventory(tmp_path, adapters=6, engines=one_gpu, tenants={"t": "{workflows: [[a0, a1]]}"})
    policy = LorafleetPolicy()
    core = PolicyCore(inv, policy, touch_budget=0.0)
    a0, a1, a2, a3, a4 = stream([0, 1, 2, 3, 4], ["t"])
    for start in (0.0, 100.0, 200.0):
        ask(core, [replace(a0, time=start), replace(a1, time=start + 30), replace(a2, time=start + 50)])
    ask(core, [replace(a0, time=300.0)])
    assert core.book["h/e0"].holds("a1") and not policy.scheduled and "t" in policy.hot["a1"]
    return core, policy, [replace(a3, tenant="u", time=301.0), replace(a4, tenant="u")]


def test_a_predicted_adapter_the_engine_evicts_is_brought_back_before_it_is_due(tmp_path: Path) -> None:
    core, policy, (a3, a4) = evicted_by_the_engine(tmp_path)
    evictions = [d.adapter for d in ask(core, [a3]) if d.action == EVICT]
    assert evictions == ["a1"]
    lead = policy._load_seconds("h/e0", "a1") * policy.lead_factor + policy.lead_margin_s  # nothing in flight
    assert [(w.adapter, w.due) for w in policy.scheduled] == [("a1", pytest.approx(300.0 + 30.0 - lead))]
    later = ask(core, [replace(a4, time=329.99)])  # past the due time: a1 comes back first
    assert next((d.adapter, d.reason) for d in later if d.action == LOAD) == ("a1", PREFETCH)


def test_a_bring_back_is_dropped_once_the_tenant_moved_on(tmp_path: Path) -> None:
    core, policy, (a3, a4) = evicted_by_the_engine(tmp_path)
    ask(core, [a3])
    assert [w.adapter for w in policy.scheduled] == ["a1"]
    ask(core, [replace(a3, tenant="t", adapter="a2", time=310.0)])  # t went elsewhere: the guess was wrong
    core.book["h/e0"].evict("a3")  # a free slot: only the guess going stale keeps a1 out
    later = ask(core, [replace(a4, time=329.99)])
    assert "a1" not in [d.adapter for d in later if d.action == LOAD]


def test_no_bring_back_for_an_expired_prediction_or_one_without_a_gap_to_time_it(tmp_path: Path) -> None:
    core, policy, (a3, _) = evicted_by_the_engine(tmp_path)
    probability, made_at, after, _ = policy.hot["a1"]["t"]
    policy.hot["a1"]["t"] = (probability, made_at, after, 300.5)  # expired before the eviction
    ask(core, [a3])
    assert not policy.scheduled
    (tmp_path / "again").mkdir()
    core, policy, (a3, _) = evicted_by_the_engine(tmp_path / "again")
    core.demand.gaps.pop(("t", "a0"))  # no gap seen after a0: nothing to time it by
    ask(core, [a3])
    assert not policy.scheduled


def test_what_a_prefetch_displaces_comes_back_once_per_prediction(tmp_path: Path) -> None:
    """Two predictions for one slot would otherwise take it in turns, each load evicting the other; what the
    engine evicts for a request's load comes back as often as it goes."""
    core, policy, _ = evicted_by_the_engine(tmp_path)
    core.demand.observe("u", "a5", 301.0)
    policy.displace_margin = 1e9  # a5 is worth whatever it displaces: vLLM evicts its least recently used, a1
    decisions = policy._prefetch(301.0, "h/e0", "a5", None)
    assert [d.adapter for d in decisions if d.action == EVICT] == ["a1"]
    assert [w.adapter for w in policy.scheduled] == ["a1"] and not policy._displacing

    def displaced(now: float) -> list[str]:  # a1 displaced by a prefetch again: what is scheduled for it
        policy.scheduled.clear()
        policy._displacing = True
        try:
            policy.on_evicted(now, "h/e0", "a1")
        finally:
            policy._displacing = False
        return [w.adapter for w in policy.scheduled]

    assert displaced(302.0) == []  # the same prediction open: once
    policy.scheduled.clear()
    policy.on_evicted(303.0, "h/e0", "a1")  # evicted for a request's load
    assert [w.adapter for w in policy.scheduled] == ["a1"]
    probability, _, after, expires = policy.hot["a1"]["t"]
    policy.hot["a1"]["t"] = (probability, 305.0, after, expires)  # a new prediction of a1 (t called a0 again)
    assert displaced(306.0) == ["a1"]
    assert policy.returned == {("t", "a1"): 305.0}
    ask(core, [stream([2], ["t"])[0]])  # t's next move closes the prediction: nothing kept for it
    assert policy.returned == {}


def test_no_bring_back_while_another_engine_of_the_pool_holds_it(tmp_path: Path) -> None:
    two = [{"kind": "vllm", "max_loras": 1, "max_cpu_loras": 4}] * 2
    inv = make_inventory(tmp_path, adapters=4, engines=two, tenants={"t": "{workflows: [[a0, a1]]}"})
    policy = LorafleetPolicy()
    core = PolicyCore(inv, policy)
    for start in (0.0, 100.0, 200.0):  # a1 comes 30 s after a0
        core.demand.observe("t", "a0", start)
        core.demand.observe("t", "a1", start + 30.0)
    policy.hot["a1"] = {"t": (0.9, 300.0, "a0", 600.0)}  # predicted at 300 s
    core.book["h/e1"].admit("a1", 1)
    policy.on_evicted(301.0, "h/e0", "a1")
    assert not policy.scheduled  # h/e1 still has it
    core.book["h/e1"].evict("a1")
    policy.on_evicted(302.0, "h/e0", "a1")
    assert [w.adapter for w in policy.scheduled] == ["a1"]


def busy_engine(tmp_path: Path) -> tuple[PolicyCore, LorafleetPolicy]:
    policy = LorafleetPolicy()
    core = PolicyCore(make_inventory(tmp_path, adapters=8, engines=ENGINE), policy)
    state = core.book["h/e0"]
    state.start_load("a4", 1)
    state.start_load("a5", 1)  # max_in_flight loads already: the loader is busy
    policy.generation[("tenant", "t")] = 1
    policy.scheduled.append(ScheduledPrefetch(10.0, 1, ("tenant", "t"), 1, "h/e0", "a1"))
    return core, policy


def wait_out(core: PolicyCore, policy: LorafleetPolicy, during=None) -> list:  # type: ignore[no-untyped-def]
    """Tick through the scheduled prefetch's retries; `during(now)` runs before each retry."""
    now = policy.scheduled[0].due
    assert core.tick(now) == []
    retry = policy.scheduled[0]
    load_s = policy._load_seconds("h/e0", "a1")
    assert (retry.attempt, retry.due) == (1, pytest.approx(now + load_s + policy.lead_margin_s))  # a load's time
    for _ in range(policy.retries - 1):
        now = policy.scheduled[0].due
        if during is not None:
            during(now)
        assert core.tick(now) == []
    now = policy.scheduled[0].due
    if during is not None:
        during(now)
    return core.tick(now)


def test_a_prefetch_waiting_on_a_slow_loader_goes_after_its_retries(tmp_path: Path) -> None:
    core, policy = busy_engine(tmp_path)
    decisions = wait_out(core, policy)  # the same two loads in flight all along: slow, not flooded
    assert [d.adapter for d in decisions if d.action == LOAD] == ["a1"] and not policy.scheduled


def test_a_prefetch_waiting_on_a_saturated_loader_is_dropped(tmp_path: Path) -> None:
    core, policy = busy_engine(tmp_path)
    state = core.book["h/e0"]
    queue = iter(["a6", "a7", "a0", "a2", "a3"])

    def turn_over(now: float) -> None:  # one load completes, a new demand load takes its place
        finished = next(iter(state.in_flight))
        core.load_finished(now, "h/e0", finished)
        core.load(now, "h/e0", next(queue), DEMAND, lambda: list(state.resident))

    assert wait_out(core, policy, turn_over) == [] and not policy.scheduled  # the queue turned over, still full


@pytest.mark.parametrize("before", [5, None])
@pytest.mark.parametrize("turnovers", [1, 2])
def test_a_loader_is_saturated_once_as_many_loads_as_max_in_flight_completed_meanwhile(
    tmp_path: Path, turnovers: int, before: int | None
) -> None:
    """Exactly `max_in_flight` loads completed (and replaced) while the prefetch waited: the whole queue turned
    over, so it is dropped; one fewer is a slow loader, and the prefetch goes after its retries. Whether the
    engine had completed loads before (only those completed since count) or none yet."""
    core, policy = busy_engine(tmp_path)
    assert policy.max_in_flight == 2
    if before is not None:
        policy.completed["h/e0"] = before
    else:
        policy.completed.pop("h/e0", None)
    state = core.book["h/e0"]
    queue = iter(["a6", "a7"])
    done = []

    def turn_over(now: float) -> None:
        if len(done) < turnovers:
            finished = next(iter(state.in_flight))
            core.load_finished(now, "h/e0", finished)
            core.load(now, "h/e0", next(queue), DEMAND, lambda: list(state.resident))
            done.append(finished)

    loads = [d.adapter for d in wait_out(core, policy, turn_over) if d.action == LOAD]
    assert loads == ([] if turnovers == policy.max_in_flight else ["a1"]) and not policy.scheduled


def test_stale_scheduled_prefetches_are_dropped(tmp_path: Path) -> None:
    core, policy = busy_engine(tmp_path)
    core.book["h/e0"].finish_load("a5")  # one load in flight: the loader has room
    assert [d.adapter for d in core.tick(10.0) if d.action == LOAD] == ["a1"]
    policy.scheduled.append(ScheduledPrefetch(20.0, 9, ("tenant", "t"), 0, "h/e0", "a2"))  # an older generation
    assert core.tick(20.0) == [] and not policy.scheduled


def test_a_timed_prefetch_already_due_is_dropped_behind_a_busy_loader(tmp_path: Path) -> None:
    inv = make_inventory(tmp_path, adapters=6, engines=ENGINE)
    policy = LorafleetPolicy()
    core = PolicyCore(inv, policy)
    state = core.book["h/e0"]
    state.start_load("a4", 1)
    key = ("tenant", "t")
    policy.generation[key] = 1
    assert [d.adapter for d in policy._prefetch_at(5.0, 5.0, key, 1, "h/e0", "a1", "a0", timed=True)] == ["a1"]
    assert len(state.in_flight) == policy.max_in_flight  # exactly max_in_flight loads: busy already
    # Timed from the tenant's gaps: its next request comes before the busy loader could bring a2 in.
    assert policy._prefetch_at(5.0, 4.0, key, 1, "h/e0", "a2", "a0", timed=True) == []
    # Untimed (no gaps seen yet): nothing says it would be late, so it goes.
    assert [d.adapter for d in policy._prefetch_at(5.0, 5.0, key, 1, "h/e0", "a3", "a0") if d.action == LOAD] == ["a3"]
    assert not policy.scheduled


def test_preload_pins_the_pinned_then_loads_the_workflow_heads(tmp_path: Path) -> None:
    inv = make_inventory(
        tmp_path,
        adapters=4,
        engines=ENGINE,
        tenants={"p": "{pinned: [a3]}", "w": "{workflows: [[a1, a2]]}"},
    )
    core = PolicyCore(inv, LorafleetPolicy())
    decisions = core.start(0.0)
    assert [(d.adapter, d.reason) for d in decisions if d.action == LOAD] == [("a3", PLAN), ("a1", PLAN)]
    assert core.book["h/e0"].pins == {"a3"}


def test_preload_pins_no_more_than_the_engine_allows(tmp_path: Path) -> None:
    inv = make_inventory(tmp_path, adapters=4, engines=ENGINE, tenants={"p": "{pinned: [a2, a3]}"})
    core = PolicyCore(inv, LorafleetPolicy())
    decisions = core.start(0.0)  # vLLM with 2 GPU slots: one pin at most, one slot left to serve the rest
    assert [(d.adapter, d.reason) for d in decisions if d.action == LOAD] == [("a2", PLAN)]
    assert core.book["h/e0"].pins == {"a2"}


# --- scoring and scheduling details ---------------------------------------------------------------------------


def test_the_horizon_is_the_fleets_adapter_slots(tmp_path: Path) -> None:
    engines = [
        {"kind": "vllm", "max_loras": 2, "max_cpu_loras": 5},
        {"kind": "sglang", "max_loras_per_batch": 3},  # no host cap: its GPU slots
    ]
    policy = LorafleetPolicy()
    PolicyCore(make_inventory(tmp_path, adapters=2, engines=engines), policy)
    assert policy.horizon == 8.0


def test_residents_without_predictions_are_valued_by_their_blended_share(tmp_path: Path) -> None:
    core, policy = core_with(tmp_path)
    demand = core.demand
    for i in range(400):  # a1 was popular long ago (long memory), a2 lately (short memory)
        demand.observe("t", "a1" if i < 200 else "a2", 2.0 + i)
    state = core.book["h/e0"]
    got = list(policy._cheapest(state, 1000.0))
    want = sorted((1.0 - math.exp(-demand.share(a) * policy.horizon), a) for a in state.resident)
    assert [a for _, a in got] == [a for _, a in want]
    assert [s for s, _ in got] == pytest.approx([s for s, _ in want])


def ten_second_timer(tmp_path: Path) -> tuple[PolicyCore, LorafleetPolicy, float]:
    """a3 requested every 10 s from 0 to 50 s, found periodic; its score from popularity alone."""
    core, policy = core_with(tmp_path)
    for i in range(6):
        core.demand.observe("cron", "a3", 10.0 * i)
    policy.periodic.add("a3")
    return core, policy, 1.0 - math.exp(-core.demand.share("a3") * policy.horizon)


def test_a_periodic_adapter_due_soon_is_worth_more_than_its_popularity(tmp_path: Path) -> None:
    _, policy, plain = ten_second_timer(tmp_path)
    assert policy.score("a3", 59.0) > plain


def test_value_also_asks_the_short_memory_alone_for_the_regret_pair(tmp_path: Path) -> None:
    core, policy = core_with(tmp_path)
    demand = core.demand
    for _ in range(450):
        demand.observe("t", "a0", 1.0)  # a0: 500 requests, long ago
    for i in range(950):
        demand.observe("t", ("a1", "a2", "a3")[i % 3], 10.0 + i)
    for i in range(10):
        demand.observe("t", "a4", 1000.0 + i)  # a4: a few, lately
    state = core.book["h/e0"]
    short_first = min(state.resident, key=lambda a: demand.popularity.get(a, 0.0))
    blended_first = min(state.resident, key=demand.share)
    assert (short_first, blended_first) == ("a0", "a4")  # the two memories disagree here
    assert next(iter(policy.victim_order(state, 1100.0))) == "a4"  # the blend is followed by default
    assert policy.experts["h/e0"].memory.pending == ("a0", False)


def test_prefetches_due_at_the_same_instant_go_in_the_order_they_were_scheduled(tmp_path: Path) -> None:
    """The loader takes max_in_flight (2) loads at a time: of four prefetches due at the same instant, the two
    scheduled first go, whichever adapters they name; the others wait for a retry. (Four, not three: a
    heap of three equal entries happens to pop in insertion order, so only four tell the order kept from chance.)"""
    for order in (["a1", "a2", "a3", "a5"], ["a5", "a3", "a2", "a1"], ["a2", "a5", "a1", "a3"]):
        policy = LorafleetPolicy()
        inv = make_inventory(tmp_path, adapters=8, engines=ENGINE, name=f"{order[0]}.yaml")
        core = PolicyCore(inv, policy)
        for n, adapter in enumerate(order):
            policy.generation[("tenant", f"t{n}")] = 1
            policy._prefetch_at(0.0, 10.0, ("tenant", f"t{n}"), 1, "h/e0", adapter, "a0")
        assert [d.adapter for d in core.tick(10.0) if d.action == LOAD] == order[:2]
        assert sorted((w.adapter, w.attempt) for w in policy.scheduled) == sorted((a, 1) for a in order[2:])


def test_a_busy_loader_is_retried_four_times(tmp_path: Path) -> None:
    core, policy = busy_engine(tmp_path)
    attempts = 0
    while policy.scheduled:
        core.tick(policy.scheduled[0].due)
        attempts += 1
    assert attempts == 1 + 4


def test_a_plans_unpinned_placements_stay_unpinned(tmp_path: Path) -> None:
    from lorafleet.policy.placement import Placement

    inv = make_inventory(tmp_path, adapters=3, engines=[{"kind": "vllm", "max_loras": 2, "max_cpu_loras": 3}])
    core = PolicyCore(inv, LorafleetPolicy([Placement("a0", "h/e0", False), Placement("a1", "h/e0", True)]))
    assert [d.adapter for d in core.start(0.0) if d.action == LOAD] == ["a0", "a1"]
    assert core.book["h/e0"].pins == {"a1"}


def test_a_live_prediction_raises_the_score_by_its_probability_times_the_chance_it_comes_soon(
    tmp_path: Path,
) -> None:
    core, policy = core_with(tmp_path)
    demand = core.demand
    for t, gap in ((100.0, 4.0), (104.0, 10.0), (114.0, 20.0)):  # t's gaps after a2: 4, 10 and 20 s
        demand.observe("t", "a2", t)
        demand.observe("t", "a1", t + gap)
    demand.observe("t", "a2", 134.0)
    demand.arrival_gap = 1.0  # a window of `horizon` (5) seconds
    plain = 1.0 - math.exp(-demand.share("a4") * policy.horizon)
    policy.hot["a4"] = {"t": (0.5, 134.0, "a2", 1000.0)}  # made at 134 s after a2, lasts until 1000 s
    soon = demand.next_within("t", "a2", 139.0 - 134.0, policy.horizon)
    assert soon == 0.5  # 5 s on: of the gaps longer than 5 s (10, 20), half end within the next 5 s
    assert policy.score("a4", 139.0) == pytest.approx(1.0 - (1.0 - plain) * (1.0 - 0.5 * soon))


def test_without_gaps_a_prediction_comes_soon_as_often_as_its_tenant_sends_within_the_horizon(
    tmp_path: Path,
) -> None:
    core, policy = core_with(tmp_path)
    demand = core.demand
    plain = 1.0 - math.exp(-demand.share("a4") * policy.horizon)
    policy.hot["a4"] = {"u": (0.5, 1.0, "a2", 1000.0)}  # tenant u: no gaps seen after a2
    soon = 1.0 - math.exp(-demand.tenant_share("u") * policy.horizon)
    assert policy.score("a4", 2.0) == pytest.approx(1.0 - (1.0 - plain) * (1.0 - 0.5 * soon))
    demand.observe("u", "a3", 2.0)
    soon = 1.0 - math.exp(-demand.tenant_share("u") * policy.horizon)
    assert 0.0 < soon < 1.0
    assert policy.score("a4", 2.0) == pytest.approx(1.0 - (1.0 - plain) * (1.0 - 0.5 * soon))


def evicted_timer(tmp_path: Path, covered: float = 0.0) -> tuple[PolicyCore, LorafleetPolicy]:
    """a3 requested every 60 s, last at 400 s, and evicted at 410 s: its return scheduled (unless `covered`, the
    share of its requests a guess named in time, leaves too few). A run of calls ends after one request's time
    at the fleet's rate (this sparse test fleet's: seconds), so a request 15 s after the last is a run of its
    own."""
    core, policy = core_with(tmp_path)
    core.demand.run_horizon = 1.0
    for i in range(6):
        core.demand.observe("cron", "a3", 100.0 + 60.0 * i)
    policy.periodic.add("a3")
    policy.generation[("adapter", "a3")] = 1
    policy.covered["a3"] = covered
    policy.on_evicted(410.0, "h/e0", "a3")
    return core, policy


def test_an_evicted_periodic_adapter_is_brought_back_a_lead_before_it_is_due(tmp_path: Path) -> None:
    _, policy = evicted_timer(tmp_path)
    work = policy.scheduled[-1]
    assert (work.adapter, work.due) == ("a3", pytest.approx(460.0 - policy._lead("h/e0", "a3")))


def test_a_timer_learned_from_lines_written_at_each_end_is_brought_back_a_lead_before_its_next_arrival(
    tmp_path: Path,
) -> None:
    """Its requests take 1-30 s and lorafleet learns each from its line: the rhythm is in the arrivals (found
    periodic) and the return is due a period after the last arrival, less the lead — not after its line."""
    core, policy = core_with(tmp_path)
    for i, duration in enumerate([1.0, 25.0, 3.0, 30.0, 2.0, 20.0]):  # arrivals every 60 s from 100 s
        arrival = 100.0 + 60.0 * i
        core.learn(arrival + duration, RequestEvent(arrival, ADAPTER, "a3", "cron", "h/e0"), "h/e0", HIT)
    assert "a3" in policy.periodic
    policy.on_evicted(425.0, "h/e0", "a3")
    work = policy.scheduled[-1]
    assert (work.adapter, work.due) == ("a3", pytest.approx(460.0 - policy._lead("h/e0", "a3")))


def test_a_timer_making_several_calls_each_run_is_brought_back_a_lead_before_its_next_run(tmp_path: Path) -> None:
    """A batch job firing every 60 s with three calls 0.4 s apart: calls closer than the policy's horizon takes
    at the fleet's rate are one run, so the job is periodic, and its return is due a period after its latest
    run's start (400 s), less the lead."""
    core, policy = core_with(tmp_path)
    assert core.demand.run_horizon == policy.horizon
    for run in range(6):
        for call in range(3):
            at = 100.0 + 60.0 * run + 0.4 * call
            core.learn(at, RequestEvent(at, ADAPTER, "a3", "cron", "h/e0"), "h/e0", HIT)
    assert "a3" in policy.periodic
    policy.on_evicted(425.0, "h/e0", "a3")
    work = policy.scheduled[-1]
    assert (work.adapter, work.due) == ("a3", pytest.approx(460.0 - policy._lead("h/e0", "a3")))


@pytest.mark.parametrize(
    ("at", "tenant", "periodic", "returned"),
    [(415.0, "noise", False, ["a3"]), (455.0, "cron", True, [])],  # a stray request; its tick, a little early
)
def test_a_regular_request_drops_a_pending_return_and_a_stray_one_leaves_it(
    tmp_path: Path, at: float, tenant: str, periodic: bool, returned: list[str]
) -> None:
    """A request of a periodic adapter on its tick settles the return scheduled for it (left valid, each eviction
    would add one more: the periodic families fell by 60 points so). A stray request (15 s after the last, against
    60 s before) ends its being periodic but not the timer behind it: the return stays, and comes for the timer's
    next tick (dropping it too cost periodic-random 0.17 points over eight seeds; docs/benchmarks.md)."""
    core, policy = evicted_timer(tmp_path)
    assert [w.adapter for w in policy.scheduled] == ["a3"]
    ask(core, [RequestEvent(time=at, tenant=tenant, adapter="a3", kind=ADAPTER)])
    assert ("a3" in policy.periodic) == periodic
    core.book["h/e0"].evict("a3")  # the engine lets it go again, before the return falls due
    assert [d.adapter for d in core.tick(500.0) if d.action == LOAD] == returned and not policy.scheduled


class _Guessing(LorafleetPolicy):
    """Acts on one fixed guess after every request of `after` (the gates stand aside)."""

    def __init__(self, after: str, guess: str) -> None:
        super().__init__()
        self.after, self.guess = after, guess

    def _predict(
        self, tenant: str | None, adapter: str, now: float = 0.0, arrived: float = 0.0
    ) -> list[tuple[str, float]]:
        return [(self.guess, 0.9)] if adapter == self.after else []


@pytest.mark.parametrize(
    ("guess", "later", "covered"),
    # named in time, just in time, too late; another adapter named
    [("a2", 1.5, 0.1), ("a2", 1.0, 0.1), ("a2", 0.5, 0.0), ("a4", 1.5, 0.0)],
)
def test_an_adapter_is_covered_as_often_as_a_guess_acted_on_named_it_a_load_before_it_came(
    tmp_path: Path, guess: str, later: float, covered: float
) -> None:
    """A guess acted on after the tenant's move to a1 names a2: when a2 comes more than a load's time after that
    move (the repeat of a1 in between keeps the guess's first time: its prefetch went then), a prefetch made then
    would have loaded it, and a2's covered share rises by the trust rate; sooner, or another adapter named, it
    falls."""
    policy = _Guessing("a1", guess)
    core = PolicyCore(make_inventory(tmp_path, adapters=6, engines=ENGINE), policy)
    load = policy._load_seconds("h/e0", "a2")
    core.on_request(100.0, RequestEvent(100.0, ADAPTER, "a1", "t", "h/e0"), "h/e0")
    repeat = 100.0 + load * 0.9
    core.on_request(repeat, RequestEvent(repeat, ADAPTER, "a1", "t", "h/e0"), "h/e0")
    assert policy.acted["t"] == ([guess], 100.0)
    at = 100.0 + load * later
    core.on_request(at, RequestEvent(at, ADAPTER, "a2", "t", "h/e0"), "h/e0")
    assert policy.covered["a2"] == pytest.approx(covered)
    assert policy.needed("a2") == pytest.approx(1.0 - covered)
    again = at + 5.0  # a repeat of a2 is no move: nothing foretold it, nothing is scored
    core.on_request(again, RequestEvent(again, ADAPTER, "a2", "t", "h/e0"), "h/e0")
    assert policy.covered["a2"] == pytest.approx(covered)


def test_a_request_learned_from_its_line_is_covered_by_when_it_came_not_when_it_was_read(tmp_path: Path) -> None:
    """A guess named a2 at 100 s; a2 came half a load's time later (no prefetch made then would have loaded) and
    its line, written at its end, was read 5 s after: it was not in time, whatever the line's time."""
    policy = _Guessing("a1", "a2")
    core = PolicyCore(make_inventory(tmp_path, adapters=6, engines=ENGINE), policy)
    load = policy._load_seconds("h/e0", "a2")
    core.on_request(100.0, RequestEvent(100.0, ADAPTER, "a1", "t", "h/e0"), "h/e0")
    arrival = 100.0 + load * 0.5
    core.learn(arrival + 5.0, RequestEvent(arrival, ADAPTER, "a2", "t", "h/e0"), "h/e0", HIT)
    assert policy.covered["a2"] == 0.0


@pytest.mark.parametrize(("covered", "returned"), [(0.79, True), (0.81, False)])
def test_a_timer_its_tenants_moves_foretell_in_time_is_not_brought_back(
    tmp_path: Path, covered: float, returned: bool
) -> None:
    """The return is for a request nothing else brings in time: a timer whose requests a guess acted on named a
    load ahead more than 1 - min_probability of the time comes back by that guess (a loop polled in order), and a
    return of its own would only hold a slot early (loop-over-capacity, docs/benchmarks.md)."""
    _, policy = evicted_timer(tmp_path, covered)
    assert [w.adapter for w in policy.scheduled] == (["a3"] if returned else [])


def test_a_timers_protection_counts_only_the_requests_nothing_else_brings_in_time(tmp_path: Path) -> None:
    core, policy, plain = ten_second_timer(tmp_path)
    soon = core.demand.adapter_next_within("a3", 59.0, policy.horizon * core.demand.arrival_gap)
    assert soon > 0.0
    policy.covered["a3"] = 0.75
    assert policy.score("a3", 59.0) == pytest.approx(1.0 - (1.0 - plain) * (1.0 - 0.25 * soon))
    policy.covered["a3"] = 1.0
    assert policy.score("a3", 59.0) == pytest.approx(plain)


class _Scored(LorafleetPolicy):
    """Scores fixed by the test (popularity and predictions stand aside)."""

    def __init__(self, scores: dict[str, float]) -> None:
        super().__init__()
        self.scores = scores

    def _boosted(self, adapter: str, now: float, share: float) -> float:
        return self.scores.get(adapter, 0.0)


@pytest.mark.parametrize(
    ("resident", "candidate", "displaced"),
    [(1.0, 1.0, True), (0.5, 0.5, True), (0.9, 1.0, True), (1.0, 0.9, False)],
)
def test_a_prefetch_displaces_only_what_is_worth_no_more(
    tmp_path: Path, resident: float, candidate: float, displaced: bool
) -> None:
    """Both certain to be asked for within the horizon (scores saturate at 1): the prediction for the tenant's
    next request is the sooner, so a resident worth as much gives way; one worth more stays."""
    policy = _Scored({"a0": resident, "a1": 1.0, "a2": 1.0, "a3": candidate})
    engine = [{"kind": "sglang", "max_loras_per_batch": 1, "max_loaded_loras": 3}]  # an unload frees: no touches
    core = PolicyCore(make_inventory(tmp_path, adapters=4, engines=engine), policy)
    state = core.book["h/e0"]
    for name in ("a0", "a1", "a2"):  # a0 the least recently used
        state.admit(name, core.sizes[name])
    decisions = policy._prefetch(1.0, "h/e0", "a3", None)
    assert [(d.action, d.adapter) for d in decisions] == ([("unload", "a0"), ("load", "a3")] if displaced else [])


BYTES_ENGINE = {"kind": "sglang", "max_loras_per_batch": 2, "max_loaded_loras": 8}  # a0..a3: 8, 16, 32, 64 KiB


@pytest.mark.parametrize(("budget_mb", "first"), [(0.1, "a3"), (100, "a0"), (None, "a0")])
def test_under_a_byte_budget_residents_go_by_value_per_share_of_the_budget(
    tmp_path: Path, budget_mb: float | None, first: str
) -> None:
    """a3 (64 KiB) is a little more popular than a0 (8 KiB), and the more recently used: where bytes bind
    (0.1 MiB) it still goes first, being worth less per byte; where they cannot (100 MiB, or no byte budget)
    each takes a slot's share and the less popular a0 goes first."""
    engine = {**BYTES_ENGINE, **({"lora_budget_mb": budget_mb} if budget_mb is not None else {})}
    policy = LorafleetPolicy()
    core = PolicyCore(make_inventory(tmp_path, adapters=4, engines=[engine]), policy)
    state = core.book["h/e0"]
    for name in ("a0", "a3"):
        state.admit(name, core.sizes[name])
    for i in range(12):
        core.demand.observe("t", "a3", 1.0)
        if i < 10:
            core.demand.observe("t", "a0", 1.0)
    order = [a for _, a in policy._cheapest(state, 2.0)]
    assert order[0] == first
    assert policy.cost(state, "a0") == pytest.approx(1 / 8)  # its bytes are less than a slot's share
    if budget_mb == 0.1:
        assert policy.cost(state, "a3") == pytest.approx(65536 / int(0.1 * 2**20))


@pytest.mark.parametrize(("budget_mb", "displaced"), [(0.07, True), (None, False)])
def test_a_prefetch_under_a_byte_budget_weighs_value_per_share_of_the_budget(
    tmp_path: Path, budget_mb: float | None, displaced: bool
) -> None:
    """a0 (8 KiB, worth 0.5) needs the room a3 (64 KiB, worth 1.0) takes: per share of a 0.07 MiB budget a0 is
    worth more, so a3 gives way; counted in slots alone it would not."""
    policy = _Scored({"a0": 0.5, "a3": 1.0})
    full = {"max_loras_per_batch": 1, "max_loaded_loras": 1} if budget_mb is None else {"lora_budget_mb": budget_mb}
    engine = {**BYTES_ENGINE, **full}  # full with a3: by its one slot, or by its bytes
    core = PolicyCore(make_inventory(tmp_path, adapters=4, engines=[engine]), policy)
    core.book["h/e0"].admit("a3", core.sizes["a3"])
    decisions = policy._prefetch(1.0, "h/e0", "a0", None)
    assert [(d.action, d.adapter) for d in decisions] == ([("unload", "a3"), ("load", "a0")] if displaced else [])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    requests=st.lists(st.integers(0, 3), max_size=40),
    hot=st.dictionaries(st.integers(0, 3), st.floats(0.05, 1.0), max_size=3),
    memory=st.sampled_from([BLENDED, SHORT, QUICK]),
)
def test_the_lazy_order_under_a_byte_budget_is_the_exact_order_of_full_densities(
    tmp_path: Path, requests: list[int], hot: dict[int, float], memory: str
) -> None:
    """Residents come out by ascending full score per share of the budget, ties least recently used first."""
    policy = LorafleetPolicy()
    engine = {**BYTES_ENGINE, "lora_budget_mb": 0.2}
    core = PolicyCore(make_inventory(tmp_path, adapters=4, engines=[engine]), policy)
    state = core.book["h/e0"]
    for name in ("a2", "a0", "a3", "a1"):
        state.admit(name, core.sizes[name])
    for i, a in enumerate(requests):
        core.on_request(2.0 + i, RequestEvent(2.0 + i, ADAPTER, f"a{a}", "t", "h/e0"), "h/e0")
    now = 2.0 + len(requests)
    policy.hot = {f"a{i}": {"t": (p, now - 1.0, "a0", now + 100.0)} for i, p in hot.items()}
    expected = sorted(
        (policy._boosted(a, now, _share(policy, memory, a)) / policy.cost(state, a), i, a)
        for i, a in enumerate(state.resident)
    )
    assert list(policy._cheapest(state, now, memory=memory)) == [(density, a) for density, _, a in expected]


def test_a_guess_closing_for_one_tenant_leaves_another_tenants_guess_of_the_same_adapter_open(tmp_path: Path) -> None:
    """t and u both run a0 then a1: after each one's a0, a1 is predicted for it; t's a1 closes t's guess only —
    a1 stays protected as u's next step."""
    tenants = {"t": "{workflows: [[a0, a1]]}", "u": "{workflows: [[a0, a1]]}"}
    inv = make_inventory(tmp_path, adapters=4, engines=ENGINE, tenants=tenants)
    policy = LorafleetPolicy()
    core = PolicyCore(inv, policy)
    ask(core, stream([0, 0], tenants=["t", "u"]))
    assert set(policy.hot["a1"]) == {"t", "u"}
    ask(core, [replace(stream([1], tenants=["t"])[0], time=1005.0)])
    assert set(policy.hot["a1"]) == {"u"}


def test_a_prefetch_goes_where_the_log_says_the_gateway_sent_this_request_when_the_next_step_has_no_route(
    tmp_path: Path,
) -> None:
    """No line has told where a1 goes; this request's names e1: the tenant's next step is prefetched there, not on
    the engine the placement rule would pick (e0, both being empty)."""
    inv = make_inventory(tmp_path, adapters=4, engines=TWO_VLLM, tenants={"t": "{workflows: [[a0, a1]]}"})
    core = PolicyCore(inv, LorafleetPolicy())
    assert core.place("a1") == "h/e0"
    decisions = ask(core, [replace(stream([0], tenants=["t"])[0], engine="h/e1")])
    prefetched = [(d.engine, d.adapter) for d in decisions if d.action == LOAD and d.reason == PREFETCH]
    assert prefetched == [("h/e1", "a1")]


def test_a_plan_placement_on_an_engine_that_cannot_serve_the_adapter_is_not_loaded(tmp_path: Path) -> None:
    from lorafleet.policy.placement import Placement
    from lorafleet.policy.predictive import initial_loads

    inv = make_inventory(tmp_path, adapters=2, engines=ENGINE, ranks=[8, 128])  # a1: rank 128, the engine takes 64
    core = PolicyCore(inv, LorafleetPolicy())
    plan = [Placement("a1", "h/e0", False), Placement("a0", "h/e0", False)]
    assert [(d.action, d.adapter) for d in initial_loads(core, plan, 0.0)] == [(LOAD, "a0")]


class _Counting(LorafleetPolicy):
    """Counts the full scores computed (`_boosted`)."""

    boosted = 0

    def _boosted(self, adapter: str, now: float, share: float) -> float:
        self.boosted += 1
        return super()._boosted(adapter, now, share)


@pytest.mark.parametrize("budget_mb", [None, 0.5])
@pytest.mark.parametrize("memory", [BLENDED, SHORT, QUICK])
def test_the_cheapest_resident_costs_one_full_score_where_no_prediction_raises_any(
    tmp_path: Path, budget_mb: float | None, memory: str
) -> None:
    """Without predictions or periods a score is its popularity part, so the lower bound each resident is walked
    by is its score: the first one out needs its own full score only, with or without a byte budget (a looser
    bound would compute more before it)."""
    policy = _Counting()
    engine = {"kind": "sglang", "max_loras_per_batch": 2, "max_loaded_loras": 12}
    if budget_mb is not None:
        engine["lora_budget_mb"] = budget_mb
    core = PolicyCore(make_inventory(tmp_path, adapters=12, engines=[engine], ranks=[8]), policy)
    state = core.book["h/e0"]
    at = 1.0
    for i in range(12):
        name = f"a{i}"
        state.admit(name, core.sizes[name])
        for _ in range(i + 1):  # a0 the least popular, a11 the most
            core.on_request(at, RequestEvent(at, ADAPTER, name, "t", "h/e0"), "h/e0")
            at += 1.0
    policy.hot, policy.periodic = {}, set()
    policy.boosted = 0
    _, first = next(iter(policy._cheapest(state, at, memory=memory)))
    assert first == "a0" and policy.boosted == 1
