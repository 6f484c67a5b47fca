"""The baselines' documented rules, each pinned: removing or inverting one fails a test here."""

from __future__ import annotations

import math
from pathlib import Path

from lorafleet.policy.baselines import AgedCounts, _ArcLists
from lorafleet.replay.driver import Simulation
from tests.policy.builders import make_inventory, stream

ONE_ENGINE = [{"kind": "vllm", "max_loras": 1, "max_cpu_loras": 3}]


def run(tmp_path: Path, policy: str, sequence: list[int], tenants: list[str] | None = None, adapters: int = 6):
    inv = make_inventory(tmp_path, adapters=adapters, zero_load=True, engines=ONE_ENGINE)
    # The rules themselves, on vLLM: as many touches as each order needs (the budget has its own tests).
    return Simulation(inv, policy, stream(sequence, tenants=tenants), touch_budget=math.inf).run()


def test_aged_counts_halve_every_period() -> None:
    counts = AgedCounts(4)
    for key in ("a", "a", "a", "b"):
        counts.add(key)
    assert counts.get("a") == 1.5 and counts.get("b") == 0.5
    counts.add("a")
    assert counts.get("a") == 2.5


def test_lfu_keeps_the_frequent_adapter_lru_would_drop(tmp_path: Path) -> None:
    # a0 asked often early; then a1, a2, a3 once each: LRU drops a0, LFU keeps it.
    sequence = [0, 0, 0, 0, 1, 2, 3, 0]
    assert run(tmp_path, "lru", sequence).hits == 3
    assert run(tmp_path, "lfu", sequence).hits == 4


def test_arc_ghosts_move_the_target_both_ways() -> None:
    arc = _ArcLists(2)
    for a in ("x", "y"):
        arc.request(a)
    arc.evicted("x")  # from t1 to its ghost b1
    arc.request("x")  # a recency ghost returns: p grows
    assert arc.p == 1.0 and "x" in arc.t2
    arc.request("y")  # y seen twice: t2
    arc.evicted("y")  # to b2
    arc.request("y")  # a frequency ghost returns: p shrinks
    assert arc.p == 0.0
    arc.request("z")
    arc.request("z")  # z in t2
    arc.evicted("z")  # to b2
    arc.request("z")  # another frequency ghost: p would go below 0, and stays at 0
    assert arc.p == 0.0


def test_arc_evicts_from_t1_while_it_is_over_its_target() -> None:
    arc = _ArcLists(3)
    for a in ("a", "b", "c"):
        arc.request(a)
    arc.request("c")  # c moves to t2
    assert arc.order(["a", "b", "c"])[:2] == ["a", "b"]  # |t1| = 2 > p = 0: t1's oldest first
    arc.p = 3.0
    assert arc.order(["a", "b", "c"])[0] == "c"  # t1 within its target: t2's oldest first
    arc.p = 2.0
    assert arc.order(["a", "b", "c"])[0] == "c"  # |t1| = p exactly: not over it, t2's oldest first


def test_wtinylfu_admits_a_newcomer_only_if_more_frequent_than_mains_oldest(tmp_path: Path) -> None:
    # Capacity 3 (window 1): a0 and a1 are frequent; a one-off newcomer must not displace them.
    sequence = [0, 1, 0, 1, 0, 1, 2, 3, 4, 0, 1]
    lru = run(tmp_path, "lru", sequence)
    tiny = run(tmp_path, "wtinylfu", sequence)
    assert tiny.hits > lru.hits
    assert tiny.hits == 6  # a0 and a1 survive the three one-offs


def test_markov_prefetches_the_usual_next_step_and_collapses_repeats(tmp_path: Path) -> None:
    # Tenant t walks a0 -> a1 (twice per step) -> a2 -> a3 -> a4; capacity 3 cannot hold the cycle.
    walk = [0, 1, 1, 2, 3, 4] * 6
    markov = run(tmp_path, "markov", walk, tenants=["t"])
    lru = run(tmp_path, "lru", walk, tenants=["t"])
    assert markov.prefetch_loads > 0 and markov.hits > lru.hits
    # Repeats collapsed: the repeat of a1 is never counted as a1 -> a1, so a1 is never prefetched after a1.
    assert markov.prefetch_loads <= 5 * 5


def test_markov_needs_a_successor_that_came_next_at_least_half_the_time(tmp_path: Path) -> None:
    # After a0 come a1, a2, a3, a4 in turn: no successor reaches half, so nothing is prefetched.
    walk = [0, 1, 0, 2, 0, 3, 0, 4] * 4
    assert run(tmp_path, "markov", walk, tenants=["t"]).prefetch_loads == 0


def test_aged_counts_drop_what_fades_below_a_quarter_and_period_is_at_least_one() -> None:
    counts = AgedCounts(2)
    counts.add("a")
    counts.add("b")  # halves: a = b = 0.5
    counts.add("c")
    counts.add("c")  # halves: a = b = 0.25 (kept), c = 1.0
    assert counts.get("a") == 0.25
    counts.add("c")
    counts.add("c")  # halves: a and b fall to 0.125 and are dropped
    assert "a" not in counts.counts and "b" not in counts.counts and counts.get("c") == 1.5
    assert AgedCounts(0).period == 1


def test_arc_ghost_lists_are_bounded_by_the_capacity() -> None:
    arc = _ArcLists(2)
    for a in ("a", "b", "c", "d", "e"):
        arc.request(a)
        arc.evicted(a)
    assert list(arc.b1) == ["d", "e"]  # the oldest ghosts forgotten, the capacity's worth kept
    for a in ("f", "g", "h"):
        arc.request(a)
        arc.request(a)  # seen twice: t2
        arc.evicted(a)
    assert list(arc.b2) == ["g", "h"]


def test_capacity_is_host_slots_else_gpu_slots_and_at_least_one() -> None:
    from lorafleet.policy.baselines import capacity
    from lorafleet.policy.residency import Budget, EngineResidency

    assert capacity(EngineResidency("k", "vllm", "m", Budget(2, 5, None))) == 5
    assert capacity(EngineResidency("k", "sglang", "m", Budget(3, None, None))) == 3
    assert capacity(EngineResidency("k", "sglang", "m", Budget(0, None, None))) == 1


def test_markov_ignores_requests_no_engine_serves(tmp_path: Path) -> None:
    inv = make_inventory(tmp_path, adapters=3)
    from lorafleet.policy.baselines import MarkovPolicy
    from lorafleet.policy.core import PolicyCore

    core = PolicyCore(inv, MarkovPolicy())
    events = stream([0, 1, 0, 1, 0], tenants=["t"])
    for e in events[:-1]:
        core.on_request(e.time, e, core.route(e))
    assert core.policy.on_request(events[-1].time, events[-1], None, "unserved") == []


def test_lfu_and_wtinylfu_counts_halve_every_ten_turnovers_of_the_fleets_slots(tmp_path: Path) -> None:
    from lorafleet.drive.policies import make_policy
    from lorafleet.policy.core import PolicyCore

    inv = make_inventory(tmp_path, adapters=2, engines=[{"kind": "vllm", "max_loras": 1, "max_cpu_loras": 3}] * 2)
    for name in ("lfu", "wtinylfu"):
        policy = make_policy(name)
        PolicyCore(inv, policy)
        assert policy.counts.period == 10 * 6  # type: ignore[attr-defined]


def test_wtinylfu_window_is_one_percent_of_the_slots_between_one_and_two(tmp_path: Path) -> None:
    from lorafleet.policy.baselines import WTinyLfuPolicy
    from lorafleet.policy.core import PolicyCore

    slots = [99, 100, 199, 200, 500]
    engines = [{"kind": "vllm", "max_loras": 1, "max_cpu_loras": n} for n in slots]
    policy = WTinyLfuPolicy()
    PolicyCore(make_inventory(tmp_path, adapters=1, engines=engines), policy)
    assert [policy.window_size[f"h/e{i}"] for i in range(len(slots))] == [1, 1, 1, 2, 2]


def test_arc_ignores_requests_no_engine_serves(tmp_path: Path) -> None:
    from lorafleet.drive.policies import make_policy
    from lorafleet.policy.core import PolicyCore

    core = PolicyCore(make_inventory(tmp_path, adapters=2), make_policy("arc"))
    event = stream([0])[0]
    assert core.policy.on_request(event.time, event, None, "unserved") == []


def test_every_victim_order_is_an_order_of_the_residents(tmp_path: Path) -> None:
    import random

    from lorafleet.drive.policies import BASELINES, make_policy
    from lorafleet.policy.core import LOAD, PolicyCore

    inv = make_inventory(tmp_path, adapters=12, engines=[{"kind": "vllm", "max_loras": 2, "max_cpu_loras": 5}])
    rng = random.Random(3)
    events = stream([rng.choice([0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]) for _ in range(300)], tenants=["t", "u"])
    for name in [*BASELINES, "lorafleet"]:
        core = PolicyCore(inv, make_policy(name))
        state = core.book["h/e0"]
        for e in events:
            _, decisions = core.on_request(e.time, e, "h/e0")
            for d in decisions:
                if d.action == LOAD:
                    core.load_finished(e.time, d.engine, d.adapter)
            order = list(core.policy.victim_order(state, e.time))
            assert sorted(order) == sorted(state.resident), name


def full_with_a_window_of_two(tmp_path: Path):  # type: ignore[no-untyped-def]
    """W-TinyLFU on one engine holding a0..a4, its window a3 and a4 (the newest)."""
    from lorafleet.policy.baselines import WTinyLfuPolicy
    from lorafleet.policy.core import PolicyCore

    policy = WTinyLfuPolicy()
    core = PolicyCore(
        make_inventory(tmp_path, adapters=5, engines=[{"kind": "vllm", "max_loras": 1, "max_cpu_loras": 5}]), policy
    )
    state = core.book["h/e0"]
    for name in ("a0", "a1", "a2", "a3", "a4"):
        state.admit(name, 1)
    policy.window_size["h/e0"] = 2
    policy.windows["h/e0"].update(dict.fromkeys(["a3", "a4"]))
    return policy, state


def test_wtinylfu_keeps_every_resident_in_its_order_with_a_window_of_two(tmp_path: Path) -> None:
    policy, state = full_with_a_window_of_two(tmp_path)
    for _ in range(3):
        policy.counts.add("a0")  # main's oldest is wanted more than the window's oldest (a3): a3 goes first
    assert list(policy.victim_order(state, 0.0)) == ["a3", "a0", "a1", "a2", "a4"]


def test_wtinylfu_admits_the_windows_oldest_and_keeps_the_rest_of_the_window_in_order(tmp_path: Path) -> None:
    policy, state = full_with_a_window_of_two(tmp_path)
    for _ in range(3):
        policy.counts.add("a3")  # the window's oldest is wanted more than main's oldest (a0): admitted
    assert list(policy.victim_order(state, 0.0)) == ["a0", "a1", "a2", "a4", "a3"]
    assert list(policy.windows["h/e0"]) == ["a4"]


def test_arc_moves_its_target_by_the_ratio_of_the_ghost_lists() -> None:
    """A recency ghost's return grows p by |b2| / |b1| (at least 1), a frequency ghost's shrinks it by |b1| / |b2|
    (at least 1): ARC's adaptation, Megiddo and Modha's δ1 and δ2."""
    arc = _ArcLists(8)
    for a in ("a", "e", "b", "c", "d", "f", "g", "h"):
        arc.request(a)
    for a in ("b", "c", "d", "f", "g", "h"):
        arc.request(a)  # seen twice: t2
    for a in ("a", "e", "b", "c", "d", "f", "g", "h"):
        arc.evicted(a)
    assert (len(arc.b1), len(arc.b2)) == (2, 6)
    arc.request("a")  # a recency ghost: p += 6 / 2
    assert arc.p == 3.0
    arc.request("e")  # p += 6 / 1, capped at c
    assert arc.p == 8.0
    arc.request("x")
    arc.evicted("x")
    assert (len(arc.b1), len(arc.b2)) == (1, 6)
    arc.request("b")  # a frequency ghost: p -= max(1 / 6, 1)
    assert arc.p == 7.0


def test_wtinylfu_keeps_mains_oldest_against_a_newcomer_wanted_exactly_as_much(tmp_path: Path) -> None:
    """Admission needs more requests than main's oldest, not as many: at a tie the window's newcomer goes first."""
    from collections import OrderedDict

    from lorafleet.policy.baselines import WTinyLfuPolicy
    from lorafleet.policy.core import PolicyCore

    policy = WTinyLfuPolicy()
    core = PolicyCore(make_inventory(tmp_path, adapters=4, engines=ONE_ENGINE), policy)
    state = core.book.engines["h/e0"]
    for a in ("a0", "a1", "a2"):
        state.admit(a, core.sizes[a])
    policy.windows["h/e0"] = OrderedDict.fromkeys(["a2"])
    policy.counts.counts.update({"a0": 2.0, "a1": 5.0, "a2": 2.0})
    assert list(policy.victim_order(state, 0.0)) == ["a2", "a0", "a1"]
    policy.counts.counts["a2"] = 2.5  # wanted more: admitted, main's oldest first
    assert list(policy.victim_order(state, 0.0)) == ["a0", "a1", "a2"]


def test_a_tenant_the_demand_model_forgets_the_policies_forget_too(tmp_path: Path) -> None:
    """Past MAX_TENANTS (policy/demand.py) the least recently active tenant goes from the core's demand model and
    from whatever its policy keeps per tenant: markov's successors and last adapter, the predictor's trust, edges,
    open guesses, those acted on, their timeliness and wanted prefetches."""
    from lorafleet.policy.baselines import MarkovPolicy
    from lorafleet.policy.core import PolicyCore
    from lorafleet.policy.predictive import LorafleetPolicy
    from tests.policy.builders import run_session

    inv = make_inventory(tmp_path, adapters=4)
    sequence = [0, 1, 2] * 8
    for policy in (MarkovPolicy(), LorafleetPolicy()):
        core = PolicyCore(inv, policy)
        core.demand.max_tenants = 2
        events = stream(sequence, tenants=["t1"]) + stream(sequence, tenants=["t2"])
        run_session(core, [*events, *stream([3], tenants=["t3"])], finish=False)
        assert list(core.demand.tenants) == ["t2", "t3"]
        if isinstance(policy, MarkovPolicy):
            assert "t1" not in policy.last and all(t != "t1" for t, _ in policy.successors)
            assert "t2" in policy.last and any(t == "t2" for t, _ in policy.successors)
        else:
            assert "t1" not in policy.trust and "t1" not in policy.predicted
            assert all(t != "t1" for t, _ in policy.edge) and ("tenant", "t1") not in policy.generation
            assert all("t1" not in by_tenant for by_tenant in policy.hot.values())
            assert "t1" not in policy.too_late and "t1" not in policy.predicted_at
            assert "t2" in policy.trust and any(t == "t2" for t, _ in policy.edge)
            assert "t2" in policy.too_late and "t2" in policy.predicted_at
            assert "t1" not in policy.acted and "t2" in policy.acted
