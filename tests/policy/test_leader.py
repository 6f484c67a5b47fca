"""The lorafleet policy follows the whole-policy expert with a clear recent lead (drive/leader.py): each rule
pinned, and the touch budget every policy keeps to (policy/core.py)."""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

from lorafleet.drive.leader import LeaderPolicy, Standings
from lorafleet.drive.session import Session
from lorafleet.policy.baselines import LfuPolicy, LruPolicy, MarkovPolicy
from lorafleet.policy.core import Policy, PolicyCore
from lorafleet.policy.events import ADAPTER, RequestEvent
from lorafleet.policy.predictive import LorafleetPolicy
from lorafleet.policy.residency import EngineResidency
from lorafleet.replay.driver import Simulation
from tests.policy.builders import full_engine, make_inventory, run_session, stream

FOUR = [{"kind": "vllm", "max_loras": 1, "max_cpu_loras": 4}]
FOUR_SGLANG = [{"kind": "sglang", "max_loras_per_batch": 2, "max_loaded_loras": 4}]  # evicts by unloading: no touches


class MruPolicy(Policy):
    """A deliberately bad expert: evicts the most recently used."""

    name = "mru"

    def victim_order(self, state: EngineResidency, now: float) -> Iterable[str]:
        return list(reversed(state.resident))


def run(policy: Policy, inventory, events: list[RequestEvent], touch_budget: float = 0.1):  # type: ignore[no-untyped-def]
    return run_session(PolicyCore(inventory, policy, touch_budget=touch_budget), events)


def loop_then_scan(n: int = 600) -> list[int]:
    """A working set of 4 in turn (LRU keeps it whole on 4 slots; MRU thrashes), with a rare stray."""
    rng = random.Random(7)
    return [rng.randrange(4, 12) if rng.random() < 0.05 else i % 4 for i in range(n)]


# --- the standings ------------------------------------------------------------------------------------------
def test_a_challenger_takes_the_lead_only_past_z_deviations_plus_the_margin() -> None:
    standings = Standings(2, memory=1e9, z=2.0, margin=2.0)
    changed = [standings.record([False, True]) for _ in range(6)]
    # After k requests only the challenger hit, its lead is k: not yet clear while k <= 2·sqrt(k) + 2 ...
    assert not any(changed[:5])
    more = [standings.record([False, True]) for _ in range(6)]
    assert any(more) and standings.leader == 1 and standings.changes == 1
    # k = 8 is the first with k > 2·sqrt(k) + 2 (8 > 7.66; 7 > 7.29 fails): exactly then
    fresh = Standings(2, memory=1e9, z=2.0, margin=2.0)
    flips = [fresh.record([False, True]) for _ in range(9)]
    assert flips.index(True) == 7


def test_a_lead_of_exactly_z_deviations_plus_the_margin_is_not_yet_clear() -> None:
    """Strictly more than z·√d + margin: with z = 1 and no margin, a lead of 1 over d = 1 request is not clear
    (1 = √1); a lead of 2 over 2 is (2 > √2)."""
    standings = Standings(2, memory=1e9, z=1.0, margin=0.0)
    assert [standings.record([False, True]) for _ in range(2)] == [False, True]


LIVE = 2  # in standings of two experts, the live engines' entrant


def test_a_request_the_leader_hit_never_changes_the_leader() -> None:
    standings = Standings(2, memory=1e9, z=0.0, margin=0.0)
    standings.short.beats[1][LIVE] = 100.0  # far ahead of the live engines already
    assert not standings.record([True, False]) and standings.leader == 0
    assert standings.record([False, True]) and standings.leader == 1


def test_a_request_the_live_engines_hit_never_changes_the_leader_though_the_leaders_own_copy_missed() -> None:
    standings = Standings(2, memory=1e9, z=0.0, margin=0.0)
    standings.short.beats[1][LIVE] = 100.0
    assert not standings.record([False, True], live=True) and standings.leader == 0
    assert standings.record([False, True], live=False) and standings.leader == 1


def test_a_challenger_ahead_of_the_live_engines_takes_the_lead_though_not_ahead_of_the_leaders_own_copy() -> None:
    """The leader's twin falls short of its own copy: the live engines miss what the leader alone would hit. A
    challenger level with the leader alone but clearly ahead of the live engines takes over; judged against the
    leader's own copy it never would."""
    standings = Standings(2, memory=1e9, z=2.0, margin=2.0)
    changed = [standings.record([True, True], live=False) for _ in range(8)]
    # k = 8 is the first with k > 2·sqrt(k) + 2: the challenger's lead over the live engines, exactly then
    assert changed == [False] * 7 + [True] and standings.leader == 1
    assert standings.short.ahead(1, 0) == 0.0  # level with the leader alone all along


def test_from_a_change_the_live_engines_past_is_the_new_leaders_own_record() -> None:
    """At a change the live record restarts as the new leader's: an expert that was ahead of the live engines
    under the old leader, but not of the new one, does not take over at the next miss."""
    standings = Standings(3, memory=1e9, z=0.0, margin=0.0)
    live = 3
    assert standings.record([False, True, True]) and standings.leader in (1, 2)
    leader, other = standings.leader, 3 - standings.leader
    assert standings.short.beats[other][live] == standings.short.beats[other][leader] == 0.0
    assert standings.short.beats[live][0] == standings.short.beats[leader][0] > 0.0
    hits = [False, False, False]
    assert not standings.record(hits, live=False) and standings.leader == leader


def test_the_challenger_picked_is_the_one_furthest_ahead_of_the_live_engines_after_its_cost() -> None:
    """Two challengers each one request ahead of the live engines over a record of five: the one that would cost
    half a request a request is 1.5 behind after its cost, the one never followed is 1 ahead and takes the lead
    (picked before its cost, the first would be tried, fail its cost, and no one would lead)."""
    standings = Standings(3, memory=1e9, z=0.0, margin=0.0, prior=0.0)
    standings.shortfall, standings.tenure = [0.0, 5.0, 0.0], [0.0, 10.0, 0.0]
    assert not any(standings.record([True, True, True]) for _ in range(4))
    assert standings.record([False, True, True]) and standings.leader == 2


def test_a_cost_is_judged_as_if_its_expert_had_led_the_prior_more_requests_at_none() -> None:
    standings = Standings(2, memory=1e9, z=0.0, margin=0.0, prior=10.0)
    standings.shortfall, standings.tenure = [0.0, 5.0], [0.0, 10.0]
    assert standings.costs() == [0.0, pytest.approx(0.25)]  # 5 over 10 + 10
    # the shipped prior, read from an instance (compiled, the class attribute is a descriptor)
    assert LeaderPolicy().shortfall_prior == 100.0 and Standings(2, 50.0, 2.0, 2.0).prior == 100.0


def test_a_challenger_that_fell_short_through_its_twin_must_lead_by_more_than_that_cost() -> None:
    """An expert whose twin fell short of its own copy (`charge`) pays that shortfall, per request of the record,
    on top of the hysteresis before it leads again; one that never led pays nothing."""
    standings = Standings(2, memory=1e9, z=0.0, margin=0.0, prior=0.0)
    assert standings.costs() == [0.0, 0.0]
    standings.leader = 1
    for own, live in [(True, False), (True, True), (True, False), (False, False)]:
        standings.charge(own, live)
    assert standings.costs() == [0.0, pytest.approx(0.5)]  # 2 requests of its own copy's hits missed live, in 4
    assert standings.shortfall[0] == standings.tenure[0] == 0.0  # charged to the leader alone
    standings.leader = 0
    standings.charge(False, True)  # a twin that did better costs nothing, and never pays back into a credit
    assert standings.costs() == [0.0, pytest.approx(0.5)]

    def lead_after_agreeing(standings: Standings) -> list[bool]:
        """10 requests both experts hit, then 5 only expert 1 hit: a lead of 5 over a record of 15 requests."""
        agreed = [standings.record([True, True]) for _ in range(10)]
        return agreed + [standings.record([False, True]) for _ in range(5)]

    assert not any(lead_after_agreeing(standings))  # 5 is not over 0.5 x 15
    cheap = Standings(2, memory=1e9, z=0.0, margin=0.0, prior=0.0)
    cheap.shortfall, cheap.tenure = [0.0, 1.0], [0.0, 10.0]  # 0.1 a request: a lead of 1 is not over 1.1 ...
    assert lead_after_agreeing(cheap).index(True) == 11  # ... but 2 is over 1.2
    never = Standings(2, memory=1e9, z=0.0, margin=0.0, prior=0.0)
    assert lead_after_agreeing(never).index(True) == 10  # never led: the first lead takes it
    # With z = 1 the cost adds to the deviations: at 0.25 a request a lead of 4 over 14 is ahead after its cost
    # (4 > 3.5) but not clear (4 is not over 2 + 3.5); never followed, a lead of 2 over 2 is (2 > 1.41)
    priced = Standings(2, memory=1e9, z=1.0, margin=0.0, prior=0.0)
    priced.shortfall, priced.tenure = [0.0, 2.5], [0.0, 10.0]
    assert not any(lead_after_agreeing(priced))
    assert lead_after_agreeing(Standings(2, memory=1e9, z=1.0, margin=0.0)).index(True) == 11


def test_requests_where_every_expert_agrees_are_no_evidence() -> None:
    standings = Standings(3, memory=1e9, z=0.0, margin=0.0)
    for _ in range(50):
        standings.record([True, True, True])
        standings.record([False, False, False])
    assert standings.short.beats == [[0.0] * 4 for _ in range(4)] and standings.leader == 0  # three and the live


def test_the_lead_never_changes_on_a_request_every_expert_missed_alike() -> None:
    """Expert 1 is ahead lately but vetoed by expert 0's lead over the long record; a request both missed ages
    the records (the long lead fades below the veto) yet is no evidence: the lead changes only at the next
    request expert 1 wins."""
    sequence = [[True, False], [True, False], [True, True], [True, False], [True, False], [False, True], [False, True]]
    standings = Standings(2, memory=2.0, z=0.0, margin=0.5, long_memory=8.0)
    assert not any(standings.record(hits) for hits in sequence)
    assert not standings.record([False, False]) and standings.leader == 0
    assert standings.record([False, True]) and standings.leader == 1


def test_old_evidence_fades_so_a_past_lead_does_not_hold_for_ever() -> None:
    standings = Standings(2, memory=50, z=1.0, margin=0.0)
    for _ in range(200):
        standings.record([True, False])  # the leader was far better ...
    for _ in range(200):
        standings.record([False, True])  # ... and is now far worse
    assert standings.leader == 1
    remembered = Standings(2, memory=1e9, z=1.0, margin=0.0)
    for _ in range(200):
        remembered.record([True, False])
    for _ in range(200):
        remembered.record([False, True])
    assert remembered.leader == 0  # with no fading, 200 old wins still cancel 200 new ones


def test_weights_rescale_without_changing_the_standings() -> None:
    standings = Standings(2, memory=2.0, z=0.0, margin=0.0, long_memory=2.0)
    for _ in range(600):  # the weight doubles per request: rescaled long before it overflows
        standings.record([True, False])
        standings.record([True, True])  # agreeing requests age the records too
    assert standings.leader == 0
    for record in (standings.short, standings.long):
        # each win is worth half the next request's: 1/2 + 1/8 + 1/32 + ... = 2/3 of the latest request
        assert record is not None and math.isfinite(record.weight)
        assert record.beats[0][1] / record.weight == pytest.approx(2 / 3)


def _steady_edge(standings: Standings, rounds: int, won: int = 6, lost: int = 4) -> list[bool]:
    """Rounds of ten differing requests the challenger wins `won` of (the leader missing them) and the leader
    `lost` — a lead that holds, of 2 requests in 10."""
    changed = []
    for _ in range(rounds):
        changed += [standings.record([True, False]) for _ in range(lost)]
        changed += [standings.record([False, True]) for _ in range(won)]
    return changed


def test_a_small_lead_that_holds_is_seen_by_the_long_record_alone() -> None:
    # In a window of 50 requests the lead is about 10, under 2·sqrt(50) + 2 = 16: the short record never sees it.
    short_only = Standings(2, memory=50, z=2.0, margin=2.0)
    assert not any(_steady_edge(short_only, 300)) and short_only.leader == 0
    # Over 2,000 it is about 400, far over 2·sqrt(2000) + 2 = 91.
    both = Standings(2, memory=50, z=2.0, margin=2.0, long_memory=2000)
    assert any(_steady_edge(both, 300)) and both.leader == 1 and both.changes == 1


def test_a_short_run_of_luck_does_not_take_the_lead_from_one_clearly_ahead_over_the_long_record() -> None:
    def burst(standings: Standings) -> bool:
        _steady_edge(standings, 200, won=4, lost=6)  # the leader 2 in 10 ahead, for 2,000 requests ...
        return any(standings.record([False, True]) for _ in range(30))  # ... then 30 the challenger won in a row

    assert burst(Standings(2, memory=50, z=2.0, margin=2.0))  # 30 > 2·sqrt(30) + 2: the short record alone flips
    held = Standings(2, memory=50, z=2.0, margin=2.0, long_memory=2000)
    assert not burst(held) and held.leader == 0
    # A lasting change still passes: once the long record's lead has faded, the short one's clear lead counts.
    assert any(held.record([False, True]) for _ in range(3000)) and held.leader == 1


def test_a_lead_over_the_long_past_does_not_take_the_lead_from_one_clearly_ahead_lately() -> None:
    standings = Standings(2, memory=50, z=2.0, margin=2.0, long_memory=2000)
    standings.long.beats[1][LIVE] = 500.0  # type: ignore[union-attr]  # the challenger far ahead over the long past ...
    standings.short.beats[LIVE][1] = 40.0  # ... and the live engines clearly ahead lately
    assert not standings.record([False, True]) and standings.leader == 0
    standings.short.beats[LIVE][1] = 0.0  # no longer ahead lately: the long record's lead counts
    assert standings.record([False, True]) and standings.leader == 1


# --- following ----------------------------------------------------------------------------------------------
def test_a_bad_first_expert_is_dropped_for_the_one_doing_better(tmp_path: Path) -> None:
    inv = make_inventory(tmp_path, adapters=12, engines=FOUR_SGLANG, zero_load=True)
    events = stream(loop_then_scan())
    policy = LeaderPolicy(experts=[("mru", MruPolicy), ("lru", LruPolicy)])
    followed = run(policy, inv, events)
    alone = run(LruPolicy(), inv, events)
    bad = run(MruPolicy(), inv, events)
    assert policy.leader_of("m") == "lru"
    assert bad.hits < alone.hits * 0.8
    standings = policy.standings["m"]  # judged over 500 requests (the floor: 4 slots) and over 4 times as many
    assert standings.long is not None and 1 / (1 - standings.long.keep) == pytest.approx(2000.0)
    assert 1 / (1 - standings.short.keep) == pytest.approx(500.0)
    assert followed.hits >= alone.hits - 4 * 4  # a few turnovers of the 4 slots, while the lead was proven


def test_the_experts_that_do_not_lead_serve_a_request_after_its_live_decision(tmp_path: Path) -> None:
    """Before `idle` only the copy the live engines imitate (the leader's own, until the lead first changes;
    then its twin) has served the latest request and the standings have not scored it; after, every copy has, and
    the change of leader it brings applies from the next request on."""
    from lorafleet.drive.session import Session

    inv = make_inventory(tmp_path, adapters=12, engines=FOUR_SGLANG, zero_load=True)
    events = stream(loop_then_scan())
    policy = LeaderPolicy(experts=[("mru", MruPolicy), ("lru", LruPolicy)])
    session = Session(PolicyCore(inv, policy), simulate=True, answers=False)
    session.start(events[0].time)
    mru, lru = (shadow.session.counts for shadow in policy.shadows)
    standings = policy.standings["m"]
    switched = None
    for n, event in enumerate(events, start=1):
        weight = standings.short.weight
        session.request(event)
        assert (mru.requests, lru.requests) == (n, n - 1)  # mru leads throughout: lru waits
        assert standings.short.weight == weight  # not scored yet
        live_leader = standings.leader
        session.idle()
        assert mru.requests == lru.requests == n and standings.short.weight > weight
        if standings.leader != live_leader:
            switched = n
            break
    assert switched is not None and standings.leader == 1
    twin = policy.twins[1].session.counts
    before = twin.requests
    session.request(events[switched])  # the next request: lru's twin serves it at once, as the leader's now
    assert twin.requests == before + 1
    assert mru.requests == lru.requests == switched  # the experts' own copies wait, lru's too
    session.idle()
    assert mru.requests == lru.requests == twin.requests == switched + 1


def test_the_standings_remember_sixteen_turnovers_of_a_large_pools_slots(tmp_path: Path) -> None:
    """Past the 500-request floor the memory grows with the pool: 2 engines x 32 slots, 16 turnovers."""
    engines = [{"kind": "sglang", "max_loras_per_batch": 8, "max_loaded_loras": 32}] * 2
    policy = LeaderPolicy(experts=[("lru", LruPolicy), ("lfu", LfuPolicy)])
    PolicyCore(make_inventory(tmp_path, adapters=80, engines=engines), policy)
    standings = policy.standings["m"]
    assert 1 / (1 - standings.short.keep) == pytest.approx(16 * 64)
    assert standings.long is not None and 1 / (1 - standings.long.keep) == pytest.approx(4 * 16 * 64)


def test_the_shipped_policy_keeps_a_tenants_pin_through_a_change_of_leader(tmp_path: Path) -> None:
    """`lorafleet` (the leader over the predictor and every baseline) preloads a pinned adapter and never evicts
    it, whichever expert leads: 600 requests of another tenant on a 4-slot engine (a loop over a0-a3, strays over
    a4-a11) change the leader and leave it resident and pinned."""
    engines = [{"kind": "vllm", "max_loras": 2, "max_cpu_loras": 4}]  # a GPU slot to pin, one to serve the rest
    inv = make_inventory(tmp_path, adapters=12, engines=engines, tenants={"p": "{pinned: [a11]}"})
    policy = LeaderPolicy()
    core = PolicyCore(inv, policy)
    run_session(core, stream(loop_then_scan(), tenants=["q"]))
    state = core.book["h/e0"]
    assert policy.leader_of("m") != "predictive"  # the lead changed: another expert's contents are imitated
    assert state.pins == {"a11"} and "a11" in state.resident


def test_the_first_expert_is_the_live_policy_while_it_leads(tmp_path: Path) -> None:
    inv = make_inventory(tmp_path, adapters=12, engines=FOUR)
    events = stream(loop_then_scan())
    policy = LeaderPolicy(experts=[("lru", LruPolicy), ("mru", MruPolicy)])
    followed = run(policy, inv, events)
    alone = run(LruPolicy(), inv, events)
    assert policy.leader_of("m") == "lru"
    assert (followed.hits, followed.loads, followed.touches) == (alone.hits, alone.loads, alone.touches)


def test_imitating_a_leader_from_the_start_is_exact(tmp_path: Path) -> None:
    """Forced to follow lru from the first request (z infinite: the leader never changes), on two engines with
    their own routing, the live engines do exactly what lru does alone: same routing, same contents."""
    engines = [
        {"kind": "vllm", "max_loras": 1, "max_cpu_loras": 3},
        {"kind": "vllm", "max_loras": 1, "max_cpu_loras": 3},
    ]
    inv = make_inventory(tmp_path, adapters=14, engines=engines)
    rng = random.Random(3)
    events = stream([min(13, int(rng.expovariate(0.3))) for _ in range(800)], gap_s=0.05)
    policy = LeaderPolicy(experts=[("mru", MruPolicy), ("lru", LruPolicy)])
    policy.z = math.inf
    core = PolicyCore(inv, policy)
    for standings in policy.standings.values():
        standings.leader = 1
    followed = run_session(core, events)
    alone = run(LruPolicy(), inv, events)
    assert (followed.hits, followed.late, followed.loads) == (alone.hits, alone.late, alone.loads)
    assert followed.touches == 0


def test_the_leaders_prefetches_are_made_live(tmp_path: Path) -> None:
    """A tenant's fixed cycle a0 → a1 → … → a5 on 4 slots: lru always misses; markov prefetches the next. With
    markov leading, the live engine prefetches too and hits like markov."""
    inv = make_inventory(tmp_path, adapters=6, engines=FOUR)
    events = stream([i % 6 for i in range(600)], gap_s=1.0)
    policy = LeaderPolicy(experts=[("lru", LruPolicy), ("markov", MarkovPolicy)])
    followed = run(policy, inv, events)
    markov = run(MarkovPolicy(), inv, events)
    lru = run(LruPolicy(), inv, events)
    assert lru.hits == 0 and markov.hits > 500
    assert policy.leader_of("m") == "markov"
    assert followed.prefetch_loads > 400 and followed.hits >= markov.hits - 30


def test_the_predictor_learns_while_another_leads_and_none_of_its_prefetches_is_made_live(tmp_path: Path) -> None:
    inv = make_inventory(tmp_path, adapters=12, engines=FOUR)
    events = stream(loop_then_scan())
    policy = LeaderPolicy(experts=[("predictive", LorafleetPolicy), ("lru", LruPolicy)])
    policy.z = math.inf  # lru leads throughout
    core = PolicyCore(inv, policy)
    for standings in policy.standings.values():
        standings.leader = 1
    assert run_session(core, events, finish=False).prefetch_loads == 0
    predictor = policy.shadows[0].session
    assert predictor.counts.prefetch_loads > 0  # on its own copy it prefetched ...
    assert isinstance(predictor.core.policy, LorafleetPolicy) and predictor.core.policy.trust  # ... and scored


def test_while_the_predictor_leads_its_prefetches_are_made_live(tmp_path: Path) -> None:
    inv = make_inventory(tmp_path, adapters=12, engines=FOUR)
    events = stream(loop_then_scan())
    policy = LeaderPolicy(experts=[("predictive", LorafleetPolicy), ("lru", LruPolicy)])
    policy.z = math.inf  # the predictor leads throughout
    live = run_session(PolicyCore(inv, policy), events, finish=False)
    predictor = policy.shadows[0].session.counts
    assert predictor.prefetch_loads > 0 and live.prefetch_loads == predictor.prefetch_loads
    assert live.hits == predictor.hits  # imitated from the same start: exactly its copy's outcomes


def test_the_default_experts_are_the_predictor_every_baseline_and_the_eager_predictor(tmp_path: Path) -> None:
    from lorafleet.drive.policies import BASELINES

    policy = LeaderPolicy()
    assert policy.names == ("predictive", *BASELINES, "predictive-eager")
    PolicyCore(make_inventory(tmp_path), policy)
    predictor, eager = policy.shadows[0].session.core, policy.shadows[-1].session.core
    assert isinstance(predictor.policy, LorafleetPolicy) and predictor.policy.min_evidence is None
    assert isinstance(eager.policy, LorafleetPolicy) and eager.demand.min_evidence == 1.0
    assert predictor.demand.min_evidence == 5.0
    assert eager.policy.min_lift == 0.0 and predictor.policy.min_lift == 2.5  # the shipped bars
    assert eager.policy.min_edge == 0.0 and predictor.policy.min_edge == 0.1


# --- the touch budget ---------------------------------------------------------------------------------------
def zipf_events(n: int = 1500, adapters: int = 12) -> list[RequestEvent]:
    rng = random.Random(11)
    weights = [1.0 / (k + 1) for k in range(adapters)]
    return stream(rng.choices(range(adapters), weights=weights, k=n), gap_s=0.2)


def test_touches_stay_within_the_budget_per_request_served(tmp_path: Path) -> None:
    inv = make_inventory(tmp_path, adapters=12, engines=FOUR)
    events = zipf_events()
    free = run(LfuPolicy(), inv, events, touch_budget=math.inf)
    budgeted = run(LfuPolicy(), inv, events, touch_budget=0.1)
    assert free.touches > 0.3 * free.requests  # lfu's order needs many touches on vLLM ...
    assert budgeted.touches <= 0.1 * budgeted.requests  # ... the budget: earned before spent


def test_with_no_budget_a_policy_evicts_as_the_engine_does_alone(tmp_path: Path) -> None:
    inv = make_inventory(tmp_path, adapters=12, engines=FOUR)
    events = zipf_events()
    lru = run(LruPolicy(), inv, events)
    for policy in (LfuPolicy(), LeaderPolicy()):
        counts = run(policy, inv, events, touch_budget=0.0)
        assert counts.touches == 0
    lfu = run(LfuPolicy(), inv, events, touch_budget=0.0)
    assert lfu.hits == lru.hits  # only the engine's own order is affordable


def test_over_budget_the_policys_preference_among_affordable_victims_is_kept(tmp_path: Path) -> None:
    core = full_engine(tmp_path)
    core.touch_credit["h/e0"] = 1.0  # one touch: the second oldest is within reach, the third is not
    decisions = core.load(0.0, "h/e0", "a4", "demand", lambda: ["a2", "a1", "a0"])
    evicted = [d.adapter for d in decisions if d.action == "evict"]
    touched = [d.adapter for d in decisions if d.action == "touch"]
    assert evicted == ["a1"] and touched == ["a0"] and core.touch_credit["h/e0"] == 0.0


def test_over_budget_a_prefetch_passes_over_a_pinned_affordable_victim_to_the_next(tmp_path: Path) -> None:
    """One touch of credit reaches a0 and a1; the policy lets go of a2 (two touches), then a1 (pinned), then a0:
    the prefetch evicts a0, with no touch."""
    core = full_engine(tmp_path)
    core.book.engines["h/e0"].pins.add("a1")
    core.touch_credit["h/e0"] = 1.0
    decisions = core.load(0.0, "h/e0", "a4", "prefetch", lambda: ["a2", "a1", "a0"])
    assert [(d.action, d.adapter) for d in decisions] == [("evict", "a0"), ("load", "a4")]
    assert core.touch_credit["h/e0"] == 1.0


def test_touch_budget_is_earned_per_request_and_banked_up_to_one_turnover(tmp_path: Path) -> None:
    inv = make_inventory(tmp_path, adapters=6, engines=FOUR)
    core = PolicyCore(inv, LruPolicy(), touch_budget=0.5)
    core.touch_credit["h/e0"] = 0.0
    for event in stream([0, 0, 0, 0]):
        core.on_request(event.time, event, "h/e0")
    assert core.touch_credit["h/e0"] == 2.0
    for event in stream([0] * 40):
        core.on_request(event.time, event, "h/e0")
    assert core.touch_credit["h/e0"] == 4.0  # 4 slots' worth at most


def test_replay_keeps_every_policy_within_the_budget(tmp_path: Path) -> None:
    inv = make_inventory(tmp_path, adapters=12, engines=FOUR)
    events = zipf_events()
    for name in ("lfu", "arc", "wtinylfu", "lorafleet"):
        result = Simulation(inv, name, events, touch_budget=0.05).run()
        assert result.touches <= 0.05 * result.requests, name


def test_over_budget_a_prefetch_is_not_made_and_a_demand_load_takes_the_engines_own_choice(tmp_path: Path) -> None:
    core = full_engine(tmp_path)
    state = core.book.engines["h/e0"]
    # The prefetch may displace only a2, which takes two touches the engine has not earned: not made at all
    # (never a victim the policy did not let go, never a touch unpaid for).
    assert core.load(0.0, "h/e0", "a4", "prefetch", lambda: ["a2"]) == []
    assert set(state.resident) == {"a0", "a1", "a2", "a3"}
    decisions = core.load(0.0, "h/e0", "a4", "demand", lambda: ["a2", "a1", "a0", "a3"], complete=True)
    assert [(d.action, d.adapter) for d in decisions] == [("evict", "a0"), ("load", "a4")]


def test_a_demand_miss_keeps_a_pinned_oldest_adapter_by_an_unpaid_touch_never_a_bypass(tmp_path: Path) -> None:
    """Pins are kept at any cost, and a demand load always makes room: on vLLM with no touch credit, when the
    engine's own victim (the least recently used, a0) is pinned, a0 is touched and the next oldest goes."""
    core = full_engine(tmp_path)  # touch budget 0: no credit is ever earned
    core.book.engines["h/e0"].pins.add("a0")
    event = stream([4])[0]
    outcome, decisions = core.on_request(event.time, event, "h/e0")
    assert outcome == "miss"
    assert [(d.action, d.adapter) for d in decisions] == [("touch", "a0"), ("evict", "a1"), ("load", "a4")]
    assert "a0" in core.book.engines["h/e0"].resident and "a4" in core.book.engines["h/e0"].in_flight


MATCHED = {
    "slots": ({"kind": "vllm", "max_loras": 2, "max_cpu_loras": 8}, None),
    "a tenant's pin": ({"kind": "vllm", "max_loras": 2, "max_cpu_loras": 8}, {"t": "{pinned: [a23]}"}),
    "bytes, vLLM": ({"kind": "vllm", "max_loras": 2, "max_cpu_loras": 8, "lora_budget_mb": 0.2}, None),
    "bytes, SGLang": ({"kind": "sglang", "max_loras_per_batch": 2, "max_loaded_loras": 8, "lora_budget_mb": 0.2}, None),
}


@pytest.mark.parametrize("case", list(MATCHED))
def test_a_new_leaders_twin_is_matched_to_the_live_engine_at_once_and_imitated_exactly_from_then(
    tmp_path: Path, case: str
) -> None:
    """On vLLM under the touch budget the live engine cannot buy the evictions that would bring it to a new
    leader's contents (mru's, 8 slots, then lfu's): as the lead changes, a twin of the new leader's copy takes the
    live engine's contents, loads in flight (its loader as it stands), pins, recency and touch credit, and from then
    on, until the lead changes again, the live engine hits exactly when the twin does and holds what it holds — with
    a pinned adapter, and where bytes bind (the twin's victims go first on the live engine, in its order). The
    expert's own copy is left as it was: it goes on as the expert alone would."""
    from lorafleet.drive.session import Session

    spec, tenants = MATCHED[case]
    inv = make_inventory(tmp_path, adapters=24, engines=[spec], tenants=tenants)
    rng = random.Random(5)
    weights = [1.0 / (k + 1) for k in range(24)]
    events = stream(rng.choices(range(24), weights=weights, k=3000), gap_s=0.05)
    policy = LeaderPolicy(experts=[("mru", MruPolicy), ("lfu", LfuPolicy)])
    core = PolicyCore(inv, policy, touch_budget=0.1)
    session = Session(core, simulate=True, answers=False)
    session.start(events[0].time)
    standings = policy.standings["m"]
    live = core.book.engines["h/e0"]
    lead: Session | None = None
    matched_at, agreed, compared = None, 0, 0
    for n, event in enumerate(events):
        hits = session.counts.hits
        copy_hits = lead.counts.hits if lead is not None else 0
        session.request(event)
        session.idle()
        if standings.changes == 0:
            continue
        if matched_at is None:
            lead = policy._deciding(standings.leader).session
            own = policy.shadows[standings.leader].session
            assert lead is not own and list(own.core.book.engines["h/e0"].resident) != list(live.resident)
            copy = lead.core.book.engines["h/e0"]
            matched_at, changes = n, standings.changes
            assert live.in_flight  # the case that waited before: a load in flight as the lead changes
            assert list(copy.resident) == list(live.resident) and list(copy.gpu) == list(live.gpu)
            assert copy.in_flight == live.in_flight and sorted(copy.used_at, key=copy.used_at.__getitem__) == sorted(
                live.used_at, key=live.used_at.__getitem__
            )
            assert copy.pins == live.pins and lead.core.touch_credit["h/e0"] == core.touch_credit["h/e0"]
            assert lead.sim is not None and session.sim is not None
            assert lead.sim.loading("h/e0") == session.sim.loading("h/e0")
            assert lead.sim.held["h/e0"] == session.sim.held["h/e0"]
            continue
        if standings.changes != changes:
            break
        compared += 1
        agreed += (session.counts.hits - hits) == (lead.counts.hits - copy_hits)
        assert list(copy.resident) == list(live.resident), n
    assert matched_at is not None and compared > 800
    assert agreed == compared  # exact from the match on
    assert lead is not None and lead.sim is not None and lead.sim.violations == 0


def test_an_expert_is_found_by_its_own_name_and_an_unknown_name_finds_none(tmp_path: Path) -> None:
    inv = make_inventory(tmp_path, adapters=4, engines=FOUR)
    policy = LeaderPolicy(experts=[("lru", LruPolicy), ("lfu", LfuPolicy), ("markov", MarkovPolicy)])
    PolicyCore(inv, policy)
    for name in ("lru", "lfu", "markov"):
        session = policy.expert(name)
        assert session is not None and session.core.policy.name == name
    assert policy.expert("arc") is None


def test_what_a_live_engine_lost_leaves_each_experts_simulated_engine_too(tmp_path: Path) -> None:
    """A reconcile finds the engine restarted (its registry empty): every expert's copy forgets the adapters in
    its book and in its simulated engine, so the copies' next loads count no violation of a budget."""
    from lorafleet.drive.session import Session

    inv = make_inventory(tmp_path, adapters=12, engines=FOUR_SGLANG, zero_load=True)
    policy = LeaderPolicy(experts=[("lru", LruPolicy), ("lfu", LfuPolicy)])
    session = Session(PolicyCore(inv, policy), simulate=True, answers=False)
    events = stream([0, 1, 2, 3] + [4, 5, 6, 7] * 3)
    session.start(events[0].time)
    for event in events[:4]:
        session.request(event)
        session.idle()
    later = events[3].time + 0.5
    session.advance(later)
    for shadow in policy.shadows:
        shadow.session.advance(later)
    session.reconciled(later, "h/e0", registry=[], vanished=[], running=[])
    for event in events[4:]:
        session.request(event)
        session.idle()
    for shadow in policy.shadows:
        assert shadow.session.sim is not None and shadow.session.sim.violations == 0, shadow.name


def test_a_match_keeps_an_adapter_a_reload_dropped_from_the_inventory_while_an_engine_still_holds_it(
    tmp_path: Path,
) -> None:
    """An inventory reload drops a12 while h/e1 still holds it (the engine keeps it registered, the book keeps it).
    A later change of leader matches the new leader's copy of h/e1 to it: its size is the book's, no error."""
    import dataclasses

    from lorafleet.drive.session import Session

    engines = FOUR_SGLANG * 2
    before = make_inventory(tmp_path, adapters=13, engines=engines, zero_load=True, name="one.yaml")
    after = make_inventory(tmp_path, adapters=12, engines=engines, zero_load=True, name="two.yaml")
    policy = LeaderPolicy(experts=[("mru", MruPolicy), ("lru", LruPolicy)])
    session = Session(PolicyCore(before, policy), simulate=True, answers=False)
    first, *rest = stream([12, *loop_then_scan()])
    session.start(first.time)
    session.request(dataclasses.replace(first, engine="h/e1"))
    session.idle()
    session.request(dataclasses.replace(rest[0], time=first.time + 0.5, engine="h/e0"))  # a12 loaded meanwhile
    session.idle()
    session.replace_inventory(after)
    assert "a12" in session.core.book.engines["h/e1"].resident
    for event in rest[1:]:
        session.request(dataclasses.replace(event, engine="h/e0"))
        session.idle()
    assert policy.standings["m"].changes >= 1
    lru = policy.shadows[1].session
    assert lru.sim is not None and lru.sim.held["h/e1"] == {"a12": lru.core.book.engines["h/e1"].sizes["a12"]}


def test_a_copy_matched_to_real_engines_starts_their_loads_anew_those_a_request_waits_on_first(
    tmp_path: Path,
) -> None:
    """Real engines' loads are not simulated: their load in progress and time left are unknown. The copy drops
    its own loads (a request waiting on one is charged its wait so far and a load of its own), takes theirs, and
    its loader starts them at the match, the one a request waits on first; they complete within its budget."""
    from lorafleet.drive.session import Session
    from lorafleet.drive.simulated import Loading
    from lorafleet.policy.core import DEMAND, PREFETCH

    inv = make_inventory(tmp_path, adapters=6, engines=FOUR_SGLANG)
    live = PolicyCore(inv, LruPolicy())
    none: Callable[[], Iterable[str]] = lambda: iter(())  # noqa: E731
    live.load(0.0, "h/e0", "a1", PREFETCH, none)
    live.load(0.0, "h/e0", "a2", DEMAND, none)
    copy = Session(PolicyCore(inv, LruPolicy()), simulate=True, answers=False)
    copy.start(0.0)
    copy.request(RequestEvent(0.004, "t", "a3"))  # a miss: a3 loads on the copy, its request waiting
    assert copy.sim is not None and copy.sim.loading("h/e0").current == "a3"
    dropped = copy.match(0.01, "h/e0", live, None)
    state = copy.core.book.engines["h/e0"]
    assert dropped == [] and state.in_flight == live.book.engines["h/e0"].in_flight
    cold = {a: copy.cold_ms("h/e0", a) for a in ("a2", "a3")}
    assert copy.sim.loading("h/e0") == Loading("a2", 0.01 + cold["a2"] / 1000.0, ("a1",), 0)
    assert copy.counts.cold_ms_paid == pytest.approx(6.0 + cold["a3"])  # its wait so far, then a load of its own
    assert copy.core.loading_reason[("h/e0", "a1")] == PREFETCH
    copy.finish()
    assert list(state.resident) == ["a2", "a1"] and not state.in_flight and copy.sim.violations == 0
    assert copy.counts.cold_ms_paid == pytest.approx(6.0 + cold["a3"])  # a3's old completion charges nothing


def test_a_prefetch_in_flight_that_a_live_request_waits_on_is_claimed_on_the_copy_and_loaded_first(
    tmp_path: Path,
) -> None:
    """A live request waiting on a prefetch still loading claims it (used, never wasted) and makes it a load a
    request waits on: the matched copy holds it so too."""
    from lorafleet.drive.session import Session
    from lorafleet.policy.core import DEMAND, LATE, PREFETCH

    inv = make_inventory(tmp_path, adapters=6, engines=FOUR_SGLANG)
    live = PolicyCore(inv, LruPolicy())
    none: Callable[[], Iterable[str]] = lambda: iter(())  # noqa: E731
    live.load(0.0, "h/e0", "a2", DEMAND, none)
    live.load(0.0, "h/e0", "a1", PREFETCH, none)
    outcome, _ = live.on_request(0.001, RequestEvent(0.001, "t", "a1"), "h/e0")
    assert outcome == LATE and live.used_prefetch
    copy = Session(PolicyCore(inv, LruPolicy()), simulate=True, answers=False)
    copy.match(0.002, "h/e0", live, None)
    assert copy.sim is not None and copy.sim.loading("h/e0")[2:] == (("a1",), 1)  # behind a2, ahead of nothing
    copy.finish()
    state = copy.core.book.engines["h/e0"]
    assert set(state.resident) == {"a1", "a2"} and state.prefetched == set()  # a1 was used: not an unused prefetch


def test_a_copy_matched_to_simulated_engines_takes_their_queue_and_completes_as_they_do(tmp_path: Path) -> None:
    """Three misses at once and a prefetch: one load in progress, two demand loads waiting, the prefetch behind
    them. The copy's loader becomes exactly that, and each load completes on both at the same instant."""
    from lorafleet.drive.session import Session
    from lorafleet.policy.core import PREFETCH

    inv = make_inventory(tmp_path, adapters=6, engines=FOUR_SGLANG)
    live = Session(PolicyCore(inv, LruPolicy()), simulate=True, answers=False)
    live.start(0.0)
    for adapter in ("a0", "a1", "a2"):
        live.request(RequestEvent(0.0, "t", adapter))
    none: Callable[[], Iterable[str]] = lambda: iter(())  # noqa: E731
    live.core.load(0.0, "h/e0", "a3", PREFETCH, none)
    assert live.sim is not None
    live.sim.queue(0.0, "h/e0", "a3", False, False)
    copy = Session(PolicyCore(inv, LruPolicy()), simulate=True, answers=False)
    copy.start(0.0)
    copy.request(RequestEvent(0.0, "t", "a5"))
    copy.match(0.001, "h/e0", live.core, live.sim)
    assert copy.sim is not None and copy.sim.loading("h/e0") == live.sim.loading("h/e0")
    assert copy.sim.loading("h/e0")[0] == "a0" and copy.sim.loading("h/e0")[2:] == (("a1", "a2", "a3"), 2)
    done = [(c.done_at, c.adapter) for c in _completions(live)]
    assert [(c.done_at, c.adapter) for c in _completions(copy) if not c.replaced] == done
    assert copy.sim.violations == 0


def _completions(session):  # type: ignore[no-untyped-def]
    out = []
    sim = session.sim
    while sim.completions:
        done = sim.pop_done()
        out.append(done)
        session._completed(done)
    return out


def test_a_change_of_leader_matches_its_own_pools_engines_only(tmp_path: Path) -> None:
    inv = make_inventory(tmp_path, adapters=4, engines=FOUR)
    policy = LeaderPolicy(experts=[("lru", LruPolicy), ("lfu", LfuPolicy)])
    core = PolicyCore(inv, policy)
    core.book.engines["h/e0"].admit("a0", core.sizes["a0"])
    policy.standings["m"].leader = 1
    policy._match(0.0, "another-model", 1)
    copy = policy._deciding(1).session.core.book.engines["h/e0"]
    assert not copy.resident
    policy._match(0.0, "m", 1)
    assert list(copy.resident) == ["a0"]
    assert not policy.shadows[1].session.core.book.engines["h/e0"].resident  # the expert's own copy: its own


def test_a_twin_is_kept_while_its_expert_leads_and_dropped_once_it_leads_no_pool(tmp_path: Path) -> None:
    """The first leader's own copy decides until the lead first changes (it and the live engines started alike);
    from then on the leader's twin does: a deep copy of its copy, learning apart from it, sharing only the
    inventory's tables with the live core; a twin goes when its expert leads no pool."""
    inv = make_inventory(tmp_path, adapters=4, engines=FOUR)
    policy = LeaderPolicy(experts=[("lru", LruPolicy), ("lfu", LfuPolicy), ("markov", MarkovPolicy)])
    core = PolicyCore(inv, policy)
    standings = policy.standings["m"]
    assert policy._deciding(0) is policy.shadows[0] and not policy.twins
    standings.leader = 1
    policy._match(0.0, "m", 1)
    twin = policy._deciding(1)
    assert list(policy.twins) == [1] and twin is not policy.shadows[1]
    assert twin.session.core.policy is not policy.shadows[1].session.core.policy
    assert twin.session.core.inventory is core.inventory and twin.session.core.sizes is core.sizes
    policy._match(0.0, "m", 1)
    assert policy._deciding(1) is twin  # matched again: the same twin
    standings.leader = 2
    policy._match(0.0, "m", 2)
    assert list(policy.twins) == [2]  # lfu leads no pool now


def test_the_standings_score_a_leader_by_its_own_copy_and_the_live_engines_by_the_twin_they_imitate(
    tmp_path: Path,
) -> None:
    """lfu keeps a0 (asked for thrice) where lru, followed live, let it go for a2; lfu takes the lead and its twin
    takes the live contents. The next a0 misses live and on the twin, and is lfu's hit all the same: the standings
    judge each expert as it fares alone. Scored by the twin, a change of leader would cost the new leader its own
    record (on loop-over-capacity seed 1 markov's matched copy scored 66.7% where markov alone hits 69.4%). The
    twin's miss is the live engines' own, in their record, and what it cost is charged to lfu."""
    engine = {"kind": "vllm", "max_loras": 1, "max_cpu_loras": 2}
    inv = make_inventory(tmp_path, adapters=4, engines=[engine], zero_load=True)
    policy = LeaderPolicy(experts=[("lru", LruPolicy), ("lfu", LfuPolicy)])
    core = PolicyCore(inv, policy, touch_budget=math.inf)
    session = Session(core, simulate=True, answers=False)
    events = stream([0, 0, 0, 1, 2, 0], gap_s=1.0)
    session.start(events[0].time)
    for event in events[:5]:
        session.request(event)
        session.idle()
    live, lfu = core.book.engines["h/e0"], policy.shadows[1].session.core.book.engines["h/e0"]
    assert {*live.resident, *live.in_flight} == {"a1", "a2"} and {*lfu.resident, *lfu.in_flight} == {"a0", "a2"}
    policy.standings["m"].leader = 1
    policy._match(events[4].time, "m", 1)
    hits = session.counts.hits
    session.request(events[5])
    session.idle()
    assert session.counts.hits == hits  # a0: a miss live, as on the twin
    assert not policy.twins[1].hit
    assert policy._hits == [False, True]  # ... and lfu's hit in the standings
    # ... and the live engines' miss in theirs: lfu beat them, and its twin's shortfall is charged to lfu
    standings = policy.standings["m"]
    assert standings.short.beats[1][LIVE] > 0.0 and standings.short.beats[LIVE][1] == 0.0
    assert standings.shortfall == [0.0, 1.0] and standings.tenure == [0.0, 1.0]


def test_where_the_experts_runs_score_them_a_new_leaders_own_copy_is_matched(tmp_path: Path) -> None:
    """On a log with durations or start hints the standings come from each expert's run on stand-in engines, and
    the leader's copy only decides: it is matched itself, and no twin costs a session a request."""
    inv = make_inventory(tmp_path, adapters=4, engines=FOUR)
    policy = LeaderPolicy(experts=[("lru", LruPolicy), ("lfu", LfuPolicy)])
    core = PolicyCore(inv, policy)
    core.book.engines["h/e0"].admit("a0", core.sizes["a0"])
    assert policy._runs(hinted=False) is not None
    policy.standings["m"].leader = 1
    policy._match(0.0, "m", 1)
    assert not policy.twins and policy._deciding(1) is policy.shadows[1]
    assert list(policy.shadows[1].session.core.book.engines["h/e0"].resident) == ["a0"]


def test_a_twin_made_before_the_runs_scored_is_dropped_once_they_do(tmp_path: Path) -> None:
    """A log whose first lines came at arrival and later ones with durations: a twin made while the copies
    scored goes at the next match (on a fleet of several pools, its expert may take the lead on another pool
    while it still leads the first), and the expert's own copy decides and is matched from then on."""
    inv = make_inventory(tmp_path, adapters=4, engines=FOUR)
    policy = LeaderPolicy(experts=[("lru", LruPolicy), ("lfu", LfuPolicy)])
    core = PolicyCore(inv, policy)
    policy.standings["m"].leader = 1
    policy._match(0.0, "m", 1)
    assert list(policy.twins) == [1]
    assert policy._runs(hinted=False) is not None
    core.book.engines["h/e0"].admit("a0", core.sizes["a0"])
    policy._match(0.0, "m", 1)
    assert not policy.twins and policy._deciding(1) is policy.shadows[1]
    assert list(policy.shadows[1].session.core.book.engines["h/e0"].resident) == ["a0"]


@pytest.mark.parametrize("bytes_bind", [False, True])
def test_live_victims_are_what_the_leader_does_not_hold_and_where_bytes_bind_its_last_victims_first(
    tmp_path: Path, bytes_bind: bool
) -> None:
    """The live engine gives up first what the leader's copy does not hold, least recently used first, then the
    rest by recency; where a byte budget binds, what the copy evicted there last goes first, in its order (it
    decides how many go)."""
    spec: dict[str, object] = {"kind": "vllm", "max_loras": 2, "max_cpu_loras": 8}
    if bytes_bind:
        spec["lora_budget_mb"] = 64
    inv = make_inventory(tmp_path, adapters=6, engines=[spec])
    policy = LeaderPolicy(experts=[("lru", LruPolicy), ("lfu", LfuPolicy)])
    core = PolicyCore(inv, policy)
    live = core.book.engines["h/e0"]
    copy = policy.shadows[0].session.core.book.engines["h/e0"]
    for adapter in ("a0", "a1", "a2", "a3", "a4"):
        live.admit(adapter, core.sizes[adapter])
    for adapter in ("a1", "a4"):
        copy.admit(adapter, core.sizes[adapter])
    policy._note_evicted([("h/e0", "a3"), ("h/e0", "a5"), ("h/e0", "a2")])  # a5: not on the live engine
    order = list(policy.victim_order(live, 0.0))
    if bytes_bind:
        assert order == ["a3", "a2", "a0", "a1", "a4"]
    else:
        assert order == ["a0", "a2", "a3", "a1", "a4"]


def test_a_match_settles_every_waiting_copy_request_at_the_copys_own_clock(tmp_path: Path) -> None:
    """Found by review, each failing before its fix: a match dated before the copy's clock (a log read by the
    requests' ends) charged negative waits; a request waiting on a load the live engine makes but the copy no
    longer has room for (a reload shrank an adapter the copy holds at its old size) was never settled; an adapter
    a reload removed was priced as a 0-byte load."""
    from lorafleet.drive.session import Session
    from lorafleet.policy.core import DEMAND, PREFETCH

    none: Callable[[], Iterable[str]] = lambda: iter(())  # noqa: E731
    engines = [{"kind": "sglang", "max_loras_per_batch": 2, "max_loaded_loras": 8, "lora_budget_mb": 24576 / 2**20}]
    before = make_inventory(tmp_path, adapters=4, engines=engines, ranks=[16, 8, 8, 8], name="one.yaml")
    after = make_inventory(tmp_path, adapters=4, engines=engines, ranks=[8, 8, 8, 8], name="two.yaml")
    copy = Session(PolicyCore(before, LruPolicy()), simulate=True, answers=False)
    copy.start(0.0)
    copy.request(RequestEvent(0.0, "t", "a0"))  # a0 loads at 16 KiB
    copy.advance(5.0)
    copy.replace_inventory(after)  # the same budget: the book keeps a0 at 16 KiB
    copy.request(RequestEvent(10.0, "t", "a2"))  # a miss: its request waits on a2
    cold = copy.cold_ms("h/e0", "a2")
    live = PolicyCore(after, LruPolicy())
    live.book.engines["h/e0"].admit("a0", 8192)
    live.load(9.0, "h/e0", "a3", PREFETCH, none)
    live.load(9.5, "h/e0", "a2", DEMAND, none)  # a2 loads there too, and no longer fits here after a3
    copy.match(9.5, "h/e0", live, None)  # dated before the copy's clock (10.0)
    assert "a2" not in copy.core.book.engines["h/e0"].in_flight and not copy.waiters
    assert copy.counts.cold_ms_paid >= cold  # waited 0 ms so far (not -500), then a load of its own
    assert copy.sim is not None and copy.sim.loading("h/e0").done_at >= 10.0  # a3 starts now, not in the past
    copy.finish()
    assert copy.counts.requests == 2 and not copy.waiters

    gone = make_inventory(tmp_path, adapters=3, engines=FOUR_SGLANG, ranks=[64], name="three.yaml")
    held = make_inventory(tmp_path, adapters=4, engines=FOUR_SGLANG, ranks=[64], name="four.yaml")
    copy = Session(PolicyCore(held, LruPolicy()), simulate=True, answers=False)
    copy.start(0.0)
    copy.request(RequestEvent(0.0, "t", "a3"))
    cold = copy.cold_ms("h/e0", "a3")
    copy.replace_inventory(gone)  # a3 is no adapter of the inventory now, still loading on the copy
    copy.match(0.0, "h/e0", PolicyCore(gone, LruPolicy()), None)
    assert copy.counts.cold_ms_paid == pytest.approx(cold)  # its cold load at the size the book had


def test_every_experts_copy_sees_the_live_engines_running_requests(tmp_path: Path) -> None:
    """What runs on an engine (known from start hints) is in use on every copy of it too: no copy takes it as a
    victim where the live engine cannot, through a restart's fresh copies as well."""
    inv = make_inventory(tmp_path, adapters=4, engines=FOUR)
    policy = LeaderPolicy(experts=[("lru", LruPolicy), ("lfu", LfuPolicy)])
    core = PolicyCore(inv, policy)
    core.book.engines["h/e0"].running["a0"] = 1
    assert all(s.session.core.book.engines["h/e0"].running == {"a0": 1} for s in policy.shadows)
    policy.resumed()
    core.book.engines["h/e0"].running["a1"] = 1
    assert all(s.session.core.book.engines["h/e0"].running == {"a0": 1, "a1": 1} for s in policy.shadows)


def test_a_request_learned_from_its_start_hint_makes_room_alike_live_and_on_every_copy(tmp_path: Path) -> None:
    """A start hint comes as the engine takes its request, so the engine has made room for a miss by itself: the
    live book and every expert's copy take the engine's own victim alike (imitation stays exact) and no touch is
    sent, whatever the leader would rather evict."""
    inv = make_inventory(tmp_path, adapters=6, engines=FOUR)
    policy = LeaderPolicy(experts=[("mru", MruPolicy), ("lru", LruPolicy)])
    policy.z = math.inf  # the leader, which would evict the most recent, never changes
    core = PolicyCore(inv, policy, touch_budget=10.0)
    session = Session(core, simulate=True)
    rng = random.Random(5)
    for i in range(200):
        line = RequestEvent(1000.0 + i, ADAPTER, f"a{rng.randrange(6)}", tenant="t", base_model="m", seen=1000.5 + i)
        _, held = session.hint(dataclasses.replace(line, seen=None))
        session.request(line, held=held)
        policy.catch_up()
        for shadow in policy.shadows:
            assert set(shadow.session.core.book.engines["h/e0"].resident) == set(core.book.engines["h/e0"].resident)
    assert session.counts.touches == 0 and session.counts.misses > 50


def _hint_then_line(session: Session, adapter: str, start: float) -> object:
    _, held = session.hint(RequestEvent(start, ADAPTER, adapter, tenant="t", base_model="m"))
    return held


def _line(session: Session, held, end: float) -> None:  # type: ignore[no-untyped-def]
    session.request(dataclasses.replace(held.hint, seen=end), held=held)


def _lru_and_lfu(
    tmp_path: Path, adapters: int = 6, engines: list[dict[str, object]] | None = None
) -> tuple[LeaderPolicy, PolicyCore, Session]:
    """lru and lfu as the experts (lru leading), on a simulated fleet started at 1000 s."""
    inv = make_inventory(tmp_path, adapters=adapters, engines=engines or FOUR)
    policy = LeaderPolicy(experts=[("lru", LruPolicy), ("lfu", LfuPolicy)])
    core = PolicyCore(inv, policy)
    session = Session(core, simulate=True)
    session.start(1000.0)
    return policy, core, session


def _copies_matched(policy: LeaderPolicy, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The engines the copies are matched on from now, in order (a spy on `Session.match`: `plain_core` tests)."""
    matched: list[str] = []
    original = Session.match

    def match(self: Session, now: float, engine: str, source: PolicyCore, engines: object) -> list[str]:
        matched.append(engine)
        return original(self, now, engine, source, engines)  # type: ignore[arg-type]

    monkeypatch.setattr(Session, "match", match)
    return matched


@pytest.mark.plain_core
@pytest.mark.parametrize("lead", [0, 1])
def test_with_hints_a_leaders_copy_parted_from_the_live_engine_is_matched_before_it_decides(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lead: int
) -> None:
    """A request that ends leaves its adapter the engine's most recent; the copies took it at its hint and never
    see its end. Where the experts' runs score the standings (start hints, lines with durations), the leader's
    copy only decides, so where it has parted from the live engine it takes the live engine's contents before
    its next decision; where it has not, nothing is matched. Only the leader's copy: the others are scored."""
    policy, core, session = _lru_and_lfu(tmp_path)
    policy.standings["m"].leader = lead
    policy.z = math.inf  # and it stays the leader
    matched = _copies_matched(policy, monkeypatch)
    first, second = _hint_then_line(session, "a0", 1000.0), _hint_then_line(session, "a1", 1000.1)
    copy_session, other = policy.shadows[lead].session, policy.shadows[1 - lead].session
    for s in (session, copy_session, other):
        s.advance(1000.4)  # both loads done
    _line(session, second, 1000.5)
    _line(session, first, 1001.0)  # a0 ends last: the engine's most recent
    policy.catch_up()
    live, copy = core.book.engines["h/e0"], copy_session.core.book.engines["h/e0"]
    assert list(live.resident) == ["a1", "a0"] and list(copy.resident) == ["a0", "a1"]
    matched.clear()
    _hint_then_line(session, "a2", 1002.0)
    assert matched == ["h/e0"]
    assert list(copy.resident) == list(live.resident) == ["a1", "a0"] and list(copy.in_flight) == ["a2"]
    assert list(other.core.book.engines["h/e0"].resident) == ["a0", "a1"]  # not the leader: as it was
    _hint_then_line(session, "a1", 1002.001)  # agreeing (a2 loading on both): no match
    assert matched == ["h/e0"] and list(copy.resident) == list(live.resident) == ["a0", "a1"]


@pytest.mark.plain_core
def test_on_a_log_the_copies_score_a_leaders_copy_is_never_matched_to_the_live_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lines without durations: the copies' own hits are their record, so a copy apart from the live engine
    stays as it is (there imitation from agreeing contents is exact: they part only when the lead changes)."""
    policy, core, session = _lru_and_lfu(tmp_path, adapters=6)
    matched = _copies_matched(policy, monkeypatch)
    for i, adapter in enumerate(("a0", "a1")):
        session.request(RequestEvent(1000.0 + i, ADAPTER, adapter, tenant="t", engine="h/e0", base_model="m"))
    session.advance(1010.0)
    core.book.engines["h/e0"].reorder("a0")  # as if the engine had been told otherwise
    session.request(RequestEvent(1011.0, ADAPTER, "a2", tenant="t", engine="h/e0", base_model="m"))
    policy.catch_up()
    copy = policy.shadows[0].session.core.book.engines["h/e0"]
    assert matched == [] and list(copy.resident) == ["a0", "a1"]
    assert list(core.book.engines["h/e0"].resident) == ["a1", "a0"]


@pytest.mark.plain_core
def test_a_live_engine_past_its_budget_is_not_matched_by_the_copies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With every resident in use the engine runs past its slots, which no copy can hold: matching it at every
    request would only drop the copy's loads in flight (periodic families: 2.3 points lost with hints)."""
    policy, core, session = _lru_and_lfu(tmp_path, adapters=8)
    matched = _copies_matched(policy, monkeypatch)
    for i in range(6):  # six requests running at once on four slots
        _hint_then_line(session, f"a{i}", 1000.0 + 0.01 * i)
    policy.catch_up()
    live = core.book.engines["h/e0"]
    assert live.past_budget() and len(live.resident) + len(live.in_flight) == 6
    matched.clear()
    _hint_then_line(session, "a6", 1000.5)
    assert matched == []


def test_a_requests_end_parts_its_engine_from_the_copies_even_when_the_next_request_goes_elsewhere(
    tmp_path: Path,
) -> None:
    """The next decision may concern an engine the next request does not go to (a prefetch there): the engine a
    request ended on is compared at the next request wherever that goes."""
    from tests.policy.builders import TWO_VLLM

    policy, core, session = _lru_and_lfu(tmp_path, adapters=6, engines=TWO_VLLM)
    core.routes.update({"a0": "h/e0", "a1": "h/e0", "a2": "h/e1", "a3": "h/e1"})  # where the gateway sends each
    first, second = _hint_then_line(session, "a0", 1000.0), _hint_then_line(session, "a1", 1000.1)
    assert first.engine == second.engine == "h/e0"  # type: ignore[attr-defined]
    copy_session = policy.shadows[0].session
    for s in (session, copy_session):
        s.advance(1000.4)
    _hint_then_line(session, "a1", 1000.45)  # both agree again (matched as needed)
    _hint_then_line(session, "a3", 1000.46)  # on e1: e0 compared (agreeing) again
    _line(session, second, 1000.5)
    _line(session, first, 1001.0)
    live, copy = core.book.engines["h/e0"], copy_session.core.book.engines["h/e0"]
    assert list(live.resident) == ["a1", "a0"] != list(copy.resident)
    elsewhere = _hint_then_line(session, "a2", 1002.0)
    assert elsewhere.engine == "h/e1"  # type: ignore[attr-defined]
    assert list(copy.resident) == list(live.resident) == ["a1", "a0"]


@pytest.mark.plain_core
@pytest.mark.parametrize("parted", ["recency", "a load in flight"])
def test_on_lines_with_durations_a_leaders_copy_parted_from_the_live_engine_is_matched_before_it_serves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, parted: str
) -> None:
    """Lines with durations are scored by the experts' runs too: a line naming the engine the copy has parted
    from (in its recency, in its loads in flight) brings the copy back to the live engine before it serves."""
    policy, core, session = _lru_and_lfu(tmp_path, adapters=6)
    for i, adapter in enumerate(("a0", "a1")):
        line = RequestEvent(1000.0 + i, ADAPTER, adapter, tenant="t", engine="h/e0", base_model="m", seen=1000.5 + i)
        session.request(line)
    session.advance(1010.0)
    policy.catch_up()
    copy = policy.shadows[0].session
    copy.advance(1010.0)
    live = core.book.engines["h/e0"]
    assert list(copy.core.book.engines["h/e0"].resident) == list(live.resident) == ["a0", "a1"]
    matched = _copies_matched(policy, monkeypatch)
    if parted == "recency":
        live.reorder("a0")  # as if the engine had been told otherwise
    else:
        live.start_load("a5", core.sizes["a5"])  # a load the copy does not know of
    session.request(RequestEvent(1011.0, ADAPTER, "a1", tenant="t", engine="h/e0", base_model="m", seen=1011.5))
    assert matched == ["h/e0"]
    if parted == "a load in flight":
        assert "a5" in copy.core.book.engines["h/e0"].in_flight


@pytest.mark.plain_core
def test_a_request_the_copies_score_is_never_matched_though_the_runs_score_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs made from lines learn from lines alone: a hinted request that comes later is scored by the copies'
    own hits (a daemon restarted between a hint and its line reads such lines first), so the leader's copy is
    not matched for it, however it has parted."""
    policy, core, session = _lru_and_lfu(tmp_path, adapters=6)
    session.request(RequestEvent(999.0, ADAPTER, "a5", tenant="t", engine="h/e0", base_model="m", seen=999.5))
    policy.catch_up()
    assert policy._scorers is not None and not policy._scorers[0].hints
    matched = _copies_matched(policy, monkeypatch)
    core.book.engines["h/e0"].start_load("a4", core.sizes["a4"])  # parted from every copy
    _hint_then_line(session, "a0", 1001.0)
    assert matched == []


def test_where_the_experts_cannot_be_made_again_the_copies_score_and_are_never_matched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a restart an expert that is not one of the defaults cannot be run again from its name: no runs, so
    the copies' own hits score every request and the leader's copy is never matched to the live engine."""
    from lorafleet.store.memory import FORMAT, fingerprint, freeze, thaw

    inv = make_inventory(tmp_path, adapters=6, engines=FOUR)
    policy = LeaderPolicy(experts=[("lru", LruPolicy), ("lfu under another name", LfuPolicy)])
    learned = PolicyCore(inv, policy)
    run_session(learned, [RequestEvent(1000.0 + i, ADAPTER, f"a{i % 3}", "t", base_model="m") for i in range(6)])
    core = thaw(inv, freeze(learned), FORMAT, fingerprint(inv), "lorafleet", learned.touch_budget)
    thawed = core.policy
    assert isinstance(thawed, LeaderPolicy) and thawed._makers() is None
    session = Session(core, simulate=True)
    session.start(2000.0)
    matched = _copies_matched(thawed, monkeypatch)
    for i, adapter in enumerate(("a0", "a1", "a2")):
        if i == 2:
            core.book.engines["h/e0"].start_load("a5", core.sizes["a5"])  # parted from every copy
        session.request(RequestEvent(2000.0 + i, ADAPTER, adapter, "t", engine="h/e0", base_model="m", seen=2000.5 + i))
    assert thawed._scorers is None and matched == []
