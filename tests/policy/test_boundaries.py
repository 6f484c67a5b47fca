"""Rules at their boundaries — where a mutation run (benchmarks/mutation.py) found `<` and `<=` interchangeable
for the rest of the tests: exactly-full budgets, one free slot, pins filling the GPU tier, the simulated
loader's demand-first order, empty replays."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lorafleet.drive.simulated import SimulatedEngines
from lorafleet.inventory.model import LoadModel
from lorafleet.policy.core import DEMAND, EVICT, LOAD, PREFETCH, Decision, Policy
from lorafleet.policy.placement import why_not
from lorafleet.policy.residency import Budget, EngineResidency
from lorafleet.replay.driver import Simulation
from tests.policy.builders import make_inventory, stream


def engine(host: int | None = 2, gpu: int = 1, bytes_: int | None = None) -> EngineResidency:
    return EngineResidency("h/e", "sglang", "m", Budget(gpu, host, bytes_))


def filled(state: EngineResidency, *adapters: str, size: int = 10) -> EngineResidency:
    for a in adapters:
        state.admit(a, size)
    return state


def test_an_adapter_exactly_the_byte_budget_fits_and_one_byte_more_never_does() -> None:
    state = engine(host=None, bytes_=100)
    assert state.fits_ever(100) and state.has_room(100)
    assert not state.fits_ever(101)
    assert state.victims_for(101, []) is None


def test_a_single_slot_engine_can_hold_an_adapter() -> None:
    state = engine(host=1)
    assert state.fits_ever(10) and state.has_room(10)
    filled(state, "a")
    assert not state.has_room(10)
    assert state.victims_for(10, ["a"]) == ["a"]


def test_victims_are_exactly_as_many_as_needed() -> None:
    state = filled(engine(host=3), "a", "b")
    assert state.victims_for(10, ["a", "b"]) == []  # one slot free: nobody leaves
    filled(state, "c")
    assert state.victims_for(10, ["a", "b", "c"]) == ["a"]  # full: exactly one leaves
    by_bytes = filled(engine(host=None, bytes_=30), "a", "b", "c")
    assert by_bytes.victims_for(10, ["a", "b", "c"]) == ["a"]  # exactly full in bytes: one leaves
    assert by_bytes.victims_for(20, ["a", "b", "c"]) == ["a", "b"]


def test_used_slots_count_loads_in_flight() -> None:
    state = filled(engine(host=2), "a")
    state.start_load("b", 10)
    assert state.used_slots == 2 and not state.has_room(10)
    assert state.victims_for(10, ["a", "b"]) == ["a"]  # the one in flight is never a victim


def test_pins_filling_the_gpu_tier_still_rotate_but_fewer_pins_are_kept() -> None:
    state = filled(engine(host=4, gpu=2), "p", "q", "x")
    state.pin("p")
    state.use_gpu("p")
    state.use_gpu("x")
    state.use_gpu("y")  # the tier is full: the unpinned one leaves, the pin stays
    assert list(state.gpu) == ["p", "y"]
    state.pin("q")
    state.use_gpu("q")  # two pins fill both slots: pins rotate too (an engine always serves)
    state.use_gpu("z")
    assert "z" in state.gpu and len(state.gpu) == 2


def test_an_adapter_exactly_the_engines_budget_is_servable(tmp_path: Path) -> None:
    inv = make_inventory(tmp_path, adapters=1, engines=[{"kind": "vllm", "max_loras": 1, "max_cpu_loras": 2}])
    adapter = inv.adapters["a0"]
    exact = replace(inv.engines[0], lora_budget_bytes=adapter.size_bytes)
    assert why_not(adapter, exact) is None
    assert why_not(adapter, replace(exact, lora_budget_bytes=adapter.size_bytes - 1)) is not None


def test_the_simulated_loader_serves_demand_before_queued_prefetches() -> None:
    sim = SimulatedEngines({"e": LoadModel()}, {"e": Budget(1, None, None)}, {"p1": 10, "p2": 10, "d": 10})
    sim.apply(0.0, [Decision(LOAD, "e", "p1", PREFETCH), Decision(LOAD, "e", "p2", PREFETCH)])
    sim.apply(1.0, [Decision(LOAD, "e", "d", DEMAND)])
    order = []
    while sim.completions:
        done = sim.pop_done()
        order.append(done.adapter)
        sim.start_next(done.done_at, done.engine)
    assert order == ["p1", "d", "p2"]  # p1 was loading already: never preempted; d jumps p2
    assert sim.last_done == done.done_at  # the latest load's end: where a replay's span ends


def _finish_all(sim: SimulatedEngines) -> list[str]:
    order = []
    while sim.completions:
        done = sim.pop_done()
        order.append(done.adapter)
        sim.start_next(done.done_at, done.engine)
    return order


def test_the_simulated_loader_serves_demand_loads_first_come_first_served() -> None:
    """A busy engine's scheduler serves its waiting requests in order: the newest does not go first (it left a
    request waiting 47 s on a saturated engine, agentic-noisy tune seed 2, while newer ones kept coming)."""
    sim = SimulatedEngines(
        {"e": LoadModel()}, {"e": Budget(1, None, None)}, dict.fromkeys(["p1", "p2", "d1", "d2"], 10)
    )
    sim.apply(0.0, [Decision(LOAD, "e", "p1", PREFETCH), Decision(LOAD, "e", "p2", PREFETCH)])
    sim.apply(1.0, [Decision(LOAD, "e", "d1", DEMAND)])
    sim.apply(2.0, [Decision(LOAD, "e", "d2", DEMAND)])
    assert _finish_all(sim) == ["p1", "d1", "d2", "p2"]


def test_a_waited_on_prefetch_joins_the_demand_loads_behind_those_already_waiting() -> None:
    sim = SimulatedEngines(
        {"e": LoadModel()}, {"e": Budget(1, None, None)}, dict.fromkeys(["p1", "p2", "p3", "d1"], 10)
    )
    sim.apply(0.0, [Decision(LOAD, "e", a, PREFETCH) for a in ["p1", "p2", "p3"]])
    sim.apply(1.0, [Decision(LOAD, "e", "d1", DEMAND)])
    sim.promote("e", "p3")
    sim.promote("e", "d1")  # already a demand load: it keeps its place
    assert _finish_all(sim) == ["p1", "d1", "p3", "p2"]


def test_a_demand_load_that_started_leaves_the_demand_loads_waiting() -> None:
    sim = SimulatedEngines(
        {"e": LoadModel()}, {"e": Budget(1, None, None)}, dict.fromkeys(["p0", "d1", "p2", "d3"], 10)
    )
    sim.apply(0.0, [Decision(LOAD, "e", "p0", PREFETCH), Decision(LOAD, "e", "d1", DEMAND)])
    sim.apply(0.0, [Decision(LOAD, "e", "p2", PREFETCH)])
    done = sim.pop_done()  # p0; d1 starts
    sim.start_next(done.done_at, done.engine)
    sim.apply(done.done_at, [Decision(LOAD, "e", "d3", DEMAND)])  # the only demand load waiting: before p2
    assert [done.adapter, *_finish_all(sim)] == ["p0", "d1", "d3", "p2"]


def test_the_first_prefetch_in_line_waited_on_joins_the_demand_loads() -> None:
    names = ["p1", "p2", "p3", "d1", "d2"]
    sim = SimulatedEngines({"e": LoadModel()}, {"e": Budget(1, None, None)}, dict.fromkeys(names, 10))
    sim.apply(0.0, [Decision(LOAD, "e", a, PREFETCH) for a in ["p1", "p2", "p3"]])
    sim.apply(1.0, [Decision(LOAD, "e", "d1", DEMAND)])
    sim.promote("e", "p2")  # first among the prefetches, right behind d1: a request waits on it now
    sim.apply(2.0, [Decision(LOAD, "e", "d2", DEMAND)])  # a later request: behind p2's
    assert _finish_all(sim) == ["p1", "d1", "p2", "d2", "p3"]


def test_a_demand_load_waited_on_again_keeps_its_place() -> None:
    sim = SimulatedEngines({"e": LoadModel()}, {"e": Budget(1, None, None)}, dict.fromkeys(["p1", "d1", "d2"], 10))
    sim.apply(0.0, [Decision(LOAD, "e", "p1", PREFETCH)])
    sim.apply(1.0, [Decision(LOAD, "e", "d1", DEMAND), Decision(LOAD, "e", "d2", DEMAND)])
    sim.promote("e", "d2")  # a later request for d2: d1's request still came first
    assert _finish_all(sim) == ["p1", "d1", "d2"]


def test_a_queued_load_of_an_adapter_a_reload_dropped_still_runs_at_its_queued_size() -> None:
    load = LoadModel()
    sim = SimulatedEngines({"e": load}, {"e": Budget(1, None, None)}, {"a": 10, "b": 4_000_000})
    sim.apply(0.0, [Decision(LOAD, "e", "a", DEMAND), Decision(LOAD, "e", "b", PREFETCH)])
    sim.replace_engines({"e": load}, {"e": Budget(1, None, None)}, {"a": 10})  # the new inventory lacks b
    first = sim.pop_done()
    sim.start_next(first.done_at, first.engine)
    second = sim.pop_done()
    assert second.adapter == "b"
    assert (second.done_at - first.done_at) * 1000.0 == pytest.approx(load.cold_ms(4_000_000))


def test_a_new_budget_while_a_simulated_load_is_in_flight_leaves_the_engine_new(tmp_path: Path) -> None:
    """The engine starts anew under its new budget (as its book does): the old loader's load, when it completes,
    neither reaches the new book (it raised KeyError: an inventory reload in the daemon replaces every expert's
    inventory) nor frees the new loader, busy with a load of its own."""
    from lorafleet.drive.session import Session
    from lorafleet.policy.baselines import LruPolicy
    from lorafleet.policy.core import PolicyCore

    engines: list[dict[str, object]] = [{"kind": "sglang", "max_loras_per_batch": 1, "max_loaded_loras": 3}]
    inv = make_inventory(tmp_path, adapters=3, engines=engines)
    smaller = make_inventory(tmp_path, adapters=3, engines=[{**engines[0], "max_loaded_loras": 2}], name="new.yaml")
    session = Session(PolicyCore(inv, LruPolicy()), simulate=True, answers=False)
    sim = session.sim
    assert sim is not None
    e = stream([0, 1, 2], gap_s=0.001)
    session.start(e[0].time)
    session.request(e[0])  # a0 loading
    a0_done = sim.next_done()
    session.replace_inventory(smaller)
    session.request(e[1])  # a1 loading on the new loader, a2 queued behind it
    session.request(e[2])
    engine = next(iter(sim.loaders))
    assert sim.loaders[engine].current == "a1" and sim.next_done() == a0_done
    session.advance(a0_done)  # a0's load completes: not in the new book, and a1 still loads
    assert sim.loaders[engine].current == "a1" and list(sim.loaders[engine].queue) == ["a2"]
    session.finish()
    book = session.core.book.engines[engine]
    assert set(book.resident) == {"a1", "a2"} and not book.in_flight and session.counts.requests == 3


def test_simulated_holdings_count_evictions_and_violations() -> None:
    sim = SimulatedEngines({"e": LoadModel()}, {"e": Budget(1, 1, None)}, {"a": 10, "b": 10})
    sim.apply(0.0, [Decision(LOAD, "e", "a", DEMAND)])
    sim.apply(0.0, [Decision(EVICT, "e", "a", "b"), Decision(LOAD, "e", "b", DEMAND)])
    assert sim.violations == 0 and sim.held["e"] == {"b": 10}
    sim.apply(0.0, [Decision(LOAD, "e", "a", DEMAND)])
    assert sim.violations == 1


def test_simulated_holdings_at_their_byte_budget_are_no_violation_and_over_both_budgets_count_twice() -> None:
    sim = SimulatedEngines({"e": LoadModel()}, {"e": Budget(1, 2, 20)}, {"a": 10, "b": 10, "c": 10})
    sim.apply(0.0, [Decision(LOAD, "e", "a", DEMAND), Decision(LOAD, "e", "b", DEMAND)])
    assert sim.violations == 0  # 20 of 20 bytes, 2 of 2 slots: full, not over
    sim.apply(0.0, [Decision(LOAD, "e", "c", DEMAND)])
    assert sim.violations == 2  # one slot and 10 bytes over


def test_an_empty_replay_counts_nothing(tmp_path: Path) -> None:
    inv = make_inventory(tmp_path, adapters=2)
    r = Simulation(inv, "lorafleet", []).run()
    assert (r.requests, r.hits, r.late, r.misses, r.loads, r.budget_violations, r.evictions) == (0,) * 7
    assert r.hit_ratio == 0.0 and r.cold_ms_percentile(99) == 0.0 and r.loader_utilization == 0.0


def test_a_late_request_on_a_prefetch_counts_as_its_use_once(tmp_path: Path) -> None:
    inv = make_inventory(tmp_path, adapters=3, tenants={"t": "{workflows: [[a0, a1]]}"})
    load_ms = inv.engines[0].load.cold_ms(inv.adapters["a1"].size_bytes)
    events = stream([0, 1, 1], tenants=["t"], gap_s=load_ms / 4000.0)  # a1 asked while its prefetch loads
    r = Simulation(inv, "lorafleet", events).run()
    # a0 preloaded (a workflow's head), a1 prefetched: each used, and a1's second late request is not a second use
    assert (r.late, r.prefetch_loads, r.prefetch_used, r.wasted_prefetches) == (3, 2, 2, 0)


def test_replay_serves_adapter_requests_only_and_base_model_and_unknown_ones_change_nothing(tmp_path: Path) -> None:
    """Base-model and unknown requests are the log tally's to count (`replay --json`'s "log"): the policies
    neither serve nor count them, with durations or without."""
    from lorafleet.policy.events import BASE, UNKNOWN

    inv = make_inventory(tmp_path, adapters=2)
    for timed in (False, True):
        plain = stream([0, 1, 0])
        if timed:
            plain = [replace(e, seen=e.time + 0.5) for e in plain]
        events = list(plain)
        events.insert(1, replace(events[0], kind=BASE, adapter=None))
        events.insert(2, replace(events[0], kind=UNKNOWN, adapter=None))
        events.insert(3, replace(events[0], kind=UNKNOWN, adapter=None))
        r, alone = Simulation(inv, "lru", events).run(), Simulation(inv, "lru", plain).run()
        assert r.requests == 3 and (r.hits, r.misses, r.loads) == (alone.hits, alone.misses, alone.loads)


def test_gpu_hits_are_hits_whose_adapter_held_a_gpu_slot(tmp_path: Path) -> None:
    inv = make_inventory(tmp_path, adapters=3, engines=[{"kind": "vllm", "max_loras": 1, "max_cpu_loras": 3}])
    r = Simulation(inv, "lru", stream([0, 0, 1, 0, 0], gap_s=5.0)).run()
    # a0 miss, a0 hit in its slot, a1 miss (takes the one slot), a0 hit but copied back, a0 hit in its slot
    assert (r.hits, r.gpu_hits) == (3, 2)


def test_a_hit_outside_the_gpu_slots_waits_the_copy_into_one(tmp_path: Path) -> None:
    inv = make_inventory(tmp_path, adapters=2, engines=[{"kind": "vllm", "max_loras": 1, "max_cpu_loras": 2}])
    r = Simulation(inv, "lru", stream([0, 1, 0, 0], gap_s=5.0)).run()
    load, a0, a1 = inv.engines[0].load, inv.adapters["a0"].size_bytes, inv.adapters["a1"].size_bytes
    # a0 and a1 cold; a0 resident but a1 holds the one GPU slot: it waits the copy; then it is in its slot
    assert r.cold_ms == pytest.approx([load.cold_ms(a0), load.cold_ms(a1), load.copy_ms(a0), 0.0], abs=1e-9)
    assert r.cold_ms_paid == pytest.approx(sum(r.cold_ms)) and load.copy_ms(a0) > 0.0


@pytest.mark.parametrize("kind", ["vllm", "sglang"])
def test_a_request_that_waited_for_its_load_runs_with_the_adapter_in_a_gpu_slot(tmp_path: Path, kind: str) -> None:
    """On SGLang a load fills host memory only, but the request waiting on it runs in a batch: its adapter takes a
    GPU slot then, as on vLLM (it was counted as never reaching one: a cold adapter never pushed a hot one out)."""
    slots = (
        {"max_loras": 1, "max_cpu_loras": 3} if kind == "vllm" else {"max_loras_per_batch": 1, "max_loaded_loras": 3}
    )
    inv = make_inventory(tmp_path, adapters=3, engines=[{"kind": kind, **slots}])
    r = Simulation(inv, "lru", stream([0, 0, 1, 1, 0], gap_s=5.0)).run()
    # a0 miss (runs in the slot), a0 hit in its slot, a1 miss (takes the slot), a1 hit in it, a0 hit copied back
    assert (r.hits, r.gpu_hits) == (3, 2)


def test_cold_ms_percentiles_are_nearest_rank() -> None:
    from lorafleet.replay.driver import PolicyResult

    r = PolicyResult(policy="x", cold_ms=[0.0, 0.0, 10.0, 20.0])
    assert (r.cold_ms_percentile(50), r.cold_ms_percentile(75), r.cold_ms_percentile(100)) == (0.0, 10.0, 20.0)
    assert r.cold_ms_percentile(1) == 0.0


def test_the_oracle_evicts_what_is_needed_furthest_away(tmp_path: Path) -> None:
    from lorafleet.policy.core import PolicyCore
    from lorafleet.policy.oracle import OraclePolicy

    inv = make_inventory(tmp_path, adapters=4, engines=[{"kind": "vllm", "max_loras": 1, "max_cpu_loras": 3}])
    events = stream([3, 0, 1, 2, 0])  # after the first request: a0 next, then a1, then a2
    oracle = OraclePolicy(events)
    core = PolicyCore(inv, oracle, touch_budget=math.inf)  # the rule itself: every touch it needs
    state = core.book["h/e0"]
    for adapter in ("a0", "a1", "a2"):
        state.admit(adapter, 1)
    _, decisions = core.on_request(events[0].time, events[0], "h/e0")
    assert [d.adapter for d in decisions if d.action == EVICT] == ["a2"]  # needed last of the three
    assert list(oracle.victim_order(state, events[0].time)) == ["a1", "a0"]


def test_baselines_ignore_pins_and_lorafleet_keeps_them(tmp_path: Path) -> None:
    from lorafleet.policy.baselines import LruPolicy
    from lorafleet.policy.core import PolicyCore
    from lorafleet.policy.predictive import LorafleetPolicy

    assert not LruPolicy.honours_pins and LorafleetPolicy.honours_pins
    inv = make_inventory(tmp_path, adapters=3, tenants={"t": "{pinned: [a0]}"})
    lru_core = PolicyCore(inv, LruPolicy())
    assert lru_core.start(0.0) == [] and not lru_core.book["h/e0"].pins


def test_a_failed_load_is_counted_and_frees_its_reservation(tmp_path: Path) -> None:
    from lorafleet.drive.session import Session
    from lorafleet.policy.baselines import LruPolicy
    from lorafleet.policy.core import PolicyCore

    inv = make_inventory(tmp_path, adapters=2)
    session = Session(PolicyCore(inv, LruPolicy()))  # live: loads come back as calls
    event = stream([0])[0]
    (call,) = session.request(event)
    assert session.answered(event.time + 1, call, "failed", False, 5.0, "boom") == []
    core = session.core
    assert (session.counts.failed, session.counts.loads) == (1, 0) and not core.book["h/e0"].holds("a0")
    assert core.book["h/e0"].used_bytes == 0  # its bytes are free again


def test_a_further_copy_only_when_half_its_rate_beats_the_mean_rate(tmp_path: Path) -> None:
    from lorafleet.plan.planner import plan_residency

    two = [{"kind": "vllm", "max_loras": 1, "max_cpu_loras": 4}] * 2
    inv = make_inventory(tmp_path, adapters=4, engines=two)

    def copies(rates: dict[str, float]) -> int:
        return sum(p.adapter == "a0" for p in plan_residency(inv, rates).placements)

    assert copies({"a0": 4.0, "a1": 1.0, "a2": 1.0, "a3": 2.0}) == 1  # 4 x 0.5 = 2 = the mean: not more
    assert copies({"a0": 4.4, "a1": 1.0, "a2": 1.0, "a3": 2.0}) == 2  # 2.2 > the mean 2.1: a second copy
    assert copies({"a0": 40.0, "a1": 1.0, "a2": 1.0, "a3": 2.0}) == 2  # never more copies than engines


def test_no_victims_when_only_bytes_are_capped_and_there_is_room() -> None:
    state = filled(engine(host=None, bytes_=100), "a", "b")
    assert state.victims_for(10, ["a", "b"]) == []


def test_a_load_requested_while_in_flight_takes_its_place_by_that_request() -> None:
    state = filled(engine(host=4), "a", "b")
    state.start_load("c", 10)
    state.note_use("c")  # asked for while loading
    state.touch("a")  # a used after that request
    state.finish_load("c")
    assert list(state.resident) == ["b", "c", "a"]
    state.start_load("d", 10)  # nobody asked for d while it loaded: most recent when it lands
    state.finish_load("d")
    assert list(state.resident)[-1] == "d"


@settings(max_examples=300, deadline=None)
@given(
    gpu_slots=st.integers(1, 5),
    held=st.integers(1, 12),
    pins=st.sets(st.integers(0, 11), max_size=6),
    gpu_first=st.lists(st.integers(0, 11), max_size=8),
    touched=st.lists(st.integers(0, 11), unique=True, max_size=12),
)
def test_keeping_in_one_pass_equals_keeping_one_by_one(
    gpu_slots: int, held: int, pins: set[int], gpu_first: list[int], touched: list[int]
) -> None:
    def state() -> EngineResidency:
        s = EngineResidency("e", "vllm", "m", Budget(gpu_slots, 16, None))
        for i in range(held):
            s.admit(f"a{i}", 1)
        s.pins.update(f"a{i}" for i in pins if i < held)
        s.gpu.clear()
        for i in gpu_first:
            if i < held:
                s.use_gpu(f"a{i}")
        return s

    names = [f"a{i}" for i in touched if i < held]
    one_by_one, in_one_pass = state(), state()
    for name in names:
        one_by_one.keep(name)
    in_one_pass.keep_all(names)
    assert list(in_one_pass.resident) == list(one_by_one.resident)
    assert in_one_pass.used_at == one_by_one.used_at
    assert set(in_one_pass.gpu) == set(one_by_one.gpu)
    unpinned = [a for a in one_by_one.gpu if a not in one_by_one.pins]
    assert [a for a in in_one_pass.gpu if a not in in_one_pass.pins] == unpinned


# --- counters, the simulated loader and the result's arithmetic, each pinned ---------------------------------


def test_nearest_rank_starts_at_the_smallest_value() -> None:
    from lorafleet.replay.driver import PolicyResult

    r = PolicyResult(policy="x", cold_ms=[5.0, 10.0, 20.0])
    assert (r.cold_ms_percentile(1), r.cold_ms_percentile(34), r.cold_ms_percentile(67)) == (5.0, 10.0, 20.0)


def test_replay_speed_is_requests_over_wall_time() -> None:
    from lorafleet.replay.driver import PolicyResult

    assert PolicyResult(policy="x", requests=300, wall_s=0.5).requests_per_s == 600.0
    assert PolicyResult(policy="x", requests=300, wall_s=0.0).requests_per_s == 0.0


def test_violations_count_slots_and_bytes_apart() -> None:
    state = filled(engine(host=1, bytes_=10), "a")
    state.used_bytes = 11
    state.in_flight["b"] = 0
    assert state.violations() == 2


def test_an_engine_over_its_slots_by_two_gives_two_victims() -> None:
    state = filled(engine(host=4), "a", "b", "c", "d")
    state.budget = Budget(1, 3, None)  # the budget shrank under it (a reload)
    assert state.victims_for(10, ["a", "b", "c", "d"]) == ["a", "b"]


def test_loads_finishing_at_the_same_instant_complete_in_the_order_they_started() -> None:
    load = LoadModel(load_fixed_ms=10.0, disk_gbps=1e15, h2d_gbps=1e15)
    sim = SimulatedEngines({"e1": load, "e2": load, "e3": load}, {k: Budget(1, 4, None) for k in ["e1", "e2", "e3"]},
                           {"a": 1, "b": 1, "c": 1})  # fmt: skip
    sim.apply(0.0, [Decision(LOAD, "e2", "b", DEMAND), Decision(LOAD, "e1", "a", DEMAND)])
    sim.apply(0.0, [Decision(LOAD, "e3", "c", DEMAND)])
    assert [sim.pop_done().engine for _ in range(3)] == ["e2", "e1", "e3"]


def test_promoting_the_load_in_progress_changes_nothing() -> None:
    load = LoadModel(load_fixed_ms=10.0, disk_gbps=1e15, h2d_gbps=1e15)
    sim = SimulatedEngines({"e": load}, {"e": Budget(1, 4, None)}, {"a": 1, "b": 1})
    sim.apply(0.0, [Decision(LOAD, "e", "a", PREFETCH), Decision(LOAD, "e", "b", PREFETCH)])
    sim.promote("e", "a")  # a is loading, not queued
    sim.promote("e", "c")  # c is not loading at all
    assert sim.loaders["e"].current == "a" and list(sim.loaders["e"].queue) == ["b"]


def test_an_eviction_is_an_unload_call_on_sglang_only_and_a_bypassed_miss_counts_once(tmp_path: Path) -> None:
    from lorafleet.drive.policies import make_policy
    from lorafleet.drive.session import Session
    from lorafleet.policy.core import UNLOAD, PolicyCore

    engines = [
        {"kind": "vllm", "max_loras": 1, "max_cpu_loras": 1},
        {"kind": "sglang", "max_loras_per_batch": 1, "max_loaded_loras": 1},
    ]
    inv = make_inventory(tmp_path, adapters=3, engines=engines)
    session = Session(PolicyCore(inv, make_policy("lru")), simulate=True)
    counts = session.counts
    e = stream([0, 1])
    for engine in ("h/e0", "h/e1"):
        session.core.book[engine].admit("a2", 1)
    session.request(replace(e[0], engine="h/e0"))  # vLLM: its own LRU evicts a2, no call
    assert (counts.evictions, counts.unloads) == (1, 0)
    session.request(replace(e[0], engine="h/e1"))  # SGLang: a2 is unloaded
    assert (counts.evictions, counts.unloads) == (2, 1)
    session.request(replace(e[1], time=e[0].time, engine="h/e0"))  # a0 still loading, no other victim: bypassed
    assert (counts.misses, counts.bypassed) == (3, 1)
    live = Session(PolicyCore(inv, make_policy("lru")))
    live.core.book["h/e1"].admit("a2", 1)
    assert [c.action for c in live.request(replace(e[0], engine="h/e1"))] == [UNLOAD, "load"]
    live.core.book["h/e0"].admit("a2", 1)
    assert [c.action for c in live.request(replace(e[0], engine="h/e0"))] == ["load"]  # vLLM: no call evicts


def test_a_prefetch_used_counts_once(tmp_path: Path) -> None:
    from lorafleet.drive.policies import make_policy
    from lorafleet.policy.core import PolicyCore

    inv = make_inventory(tmp_path, adapters=2)
    core = PolicyCore(inv, make_policy("lru"))
    core.load(0.0, "h/e0", "a0", PREFETCH, tuple)
    core.load_finished(0.5, "h/e0", "a0")
    e = stream([0, 0])
    core.on_request(e[0].time, e[0], "h/e0")
    assert core.used_prefetch
    core.on_request(e[1].time, e[1], "h/e0")
    assert not core.used_prefetch


def test_a_request_naming_no_engine_is_routed_by_placement(tmp_path: Path) -> None:
    from lorafleet.drive.policies import make_policy
    from lorafleet.policy.core import PolicyCore

    inv = make_inventory(tmp_path, adapters=2, engines=[{"kind": "vllm", "max_loras": 1, "max_cpu_loras": 2}] * 2)
    core = PolicyCore(inv, make_policy("lru"))
    event = stream([1])[0]
    assert event.engine is None and core.route(event) == core.place("a1") == "h/e0"
    assert core.route(replace(event, engine="h/e1")) == "h/e1"
    assert core.route(replace(event, engine="elsewhere")) == "h/e0"


def test_the_fleets_demand_half_life_is_eight_turnovers_and_at_least_100(tmp_path: Path) -> None:
    from lorafleet.drive.policies import make_policy
    from lorafleet.policy.core import PolicyCore

    small = make_inventory(tmp_path, adapters=2, name="small.yaml")  # 3 slots
    big = make_inventory(tmp_path, adapters=2, engines=[{"kind": "vllm", "max_loras": 4, "max_cpu_loras": 20}] * 2)
    assert PolicyCore(small, make_policy("lru")).demand.rate == pytest.approx(math.log(2) / 100.0)
    assert PolicyCore(big, make_policy("lru")).demand.rate == pytest.approx(math.log(2) / (8.0 * 40))


def test_the_oracle_starts_with_the_first_requests_adapter_and_skips_unservable_ones(tmp_path: Path) -> None:
    from lorafleet.drive.policies import make_policy
    from lorafleet.policy.core import PolicyCore
    from lorafleet.policy.oracle import OraclePolicy

    inv = make_inventory(tmp_path, adapters=3, ranks=[8, 128, 8])  # a1's rank is above the engine's maximum
    events = stream([1, 2, 0], gap_s=10.0)
    oracle = make_policy("oracle", events)
    assert isinstance(oracle, OraclePolicy) and not oracle.yield_to_demand  # variant 0 by default
    core = PolicyCore(inv, oracle)
    assert [(d.action, d.adapter) for d in core.start(0.0)] == [(LOAD, "a2")]


def two_requests(tmp_path: Path) -> Simulation:
    """Replay of two requests 10 s apart on one engine."""
    return Simulation(make_inventory(tmp_path, adapters=2), "lru", stream([0, 1], gap_s=10.0))


def run_probe(sim: Simulation, probe: Policy) -> None:
    """Run the replay with `probe` in place of its policy (a policy that only watches the book)."""
    core = sim.session.core
    probe.bind(core)
    core.policy = probe
    sim.run()


def test_a_wakeup_sees_the_engines_as_of_its_own_time(tmp_path: Path) -> None:
    """Replay runs load completions and the policy's wakeups in one time order: a wakeup due before a load
    completes sees that load still in flight, even when the next request comes after both."""
    seen: list[tuple[float, list[str]]] = []

    class Probe(Policy):
        name = "probe"

        def __init__(self) -> None:
            self.wakeups = [1000.002, 1005.0]  # the first request comes at 1000.0 (epoch seconds, as every time)

        def next_wakeup(self) -> float | None:
            return self.wakeups[0] if self.wakeups else None

        def tick(self, now: float) -> list[Decision]:
            seen.append((now, sorted(self.core.book["h/e0"].in_flight)))
            self.wakeups.pop(0)
            return []

    run_probe(two_requests(tmp_path), Probe())
    assert seen == [(1000.002, ["a0"]), (1005.0, [])]  # a0's load (15 ms and more) is still running at 2 ms


def test_a_wakeup_due_as_a_load_completes_sees_it_done(tmp_path: Path) -> None:
    """At the same instant, a load's completion comes before a wakeup: the wakeup sees the adapter resident."""
    seen: list[tuple[list[str], list[str]]] = []

    class Probe(Policy):
        name = "probe"

        def __init__(self) -> None:
            self.due: float | None = None

        def next_wakeup(self) -> float | None:
            engines = sim.session.sim
            if self.due is None and engines is not None and engines.completions:
                self.due = engines.next_done()  # one time unit: the completion's own instant
            return None if seen else self.due

        def tick(self, now: float) -> list[Decision]:
            state = self.core.book["h/e0"]
            seen.append((sorted(state.in_flight), sorted(state.resident)))
            return []

    sim = two_requests(tmp_path)
    run_probe(sim, Probe())
    assert seen == [([], ["a0"])]


def test_replay_reports_progress_every_4096_requests(tmp_path: Path) -> None:
    inv = make_inventory(tmp_path, adapters=2)
    calls: list[int] = []
    Simulation(inv, "lru", stream([0, 1] * 5000, gap_s=0.01)).run(calls.append)
    assert calls == [0, 4096, 8192]


def test_headroom_captured_is_the_share_of_the_gap_from_lru_to_the_oracle() -> None:
    from lorafleet.replay.driver import PolicyResult, headroom_captured

    def at(hits: int) -> PolicyResult:
        return PolicyResult(policy="x", requests=100, hits=hits)

    assert headroom_captured(at(50), at(30), at(90)) == pytest.approx(1 / 3)
    assert headroom_captured(at(50), at(30), at(30)) is None


def test_a_pin_limit_holds_across_several_pins(tmp_path: Path) -> None:
    from lorafleet.plan.planner import plan_residency

    inv = make_inventory(tmp_path, adapters=3, engines=[{"kind": "vllm", "max_loras": 2, "max_cpu_loras": 3}])
    planned = plan_residency(inv, {"a0": 1.0, "a1": 1.0, "a2": 1.0}, ["a0", "a1"])
    assert [p.adapter for p in planned.placements if p.pinned] == ["a0"]  # one pin: one GPU slot stays free


class _PrefetchA1AtStart(Policy):
    def start(self, now: float) -> list[Decision]:
        return self.core.load(now, "h/e0", "a1", PREFETCH, tuple)


def test_a_request_that_finds_its_prefetch_in_a_gpu_slot_is_credited_its_whole_cold_load(tmp_path: Path) -> None:
    from lorafleet.drive.session import Session
    from lorafleet.policy.core import PolicyCore

    core = PolicyCore(make_inventory(tmp_path, adapters=2), _PrefetchA1AtStart())
    cold = core.load_ms["h/e0"].cold_ms(core.sizes["a1"])
    session = Session(core, simulate=True)
    session.start(1000.0)
    session.request(replace(stream([1])[0], time=1001.0))  # loaded by then, into a GPU slot (vLLM)
    counts = session.counts
    assert (counts.hits, counts.gpu_hits, counts.prefetch_used) == (1, 1, 1)
    assert counts.cold_ms_avoided == pytest.approx(cold) and counts.cold_ms_paid == 0.0


def test_a_request_waiting_on_a_prefetch_still_loading_is_credited_the_load_time_it_did_not_wait(
    tmp_path: Path,
) -> None:
    from lorafleet.drive.session import Session, Waited
    from lorafleet.policy.core import LATE, PolicyCore

    core = PolicyCore(make_inventory(tmp_path, adapters=2), _PrefetchA1AtStart())
    cold = core.load_ms["h/e0"].cold_ms(core.sizes["a1"])
    session = Session(core, simulate=True)
    session.start(1000.0)
    session.request(replace(stream([1])[0], time=1000.0 + cold / 4000.0))  # a quarter of its load is done
    session.finish()
    counts = session.counts
    assert (counts.late, counts.prefetch_used) == (1, 1)
    assert counts.cold_ms_paid == pytest.approx(0.75 * cold)
    assert counts.cold_ms_avoided == pytest.approx(0.25 * cold)  # the quarter it did not wait
    (waited,) = [a for a in session.take_answers() if isinstance(a, Waited)]
    assert waited.request.outcome == LATE and waited.avoided_ms == pytest.approx(0.25 * cold)


def test_on_vllm_no_touch_is_sent_for_a_load_the_engine_made_alone_nor_while_every_resident_is_in_use(
    tmp_path: Path,
) -> None:
    """A demand load lorafleet learns of after the fact (`alone`) found the engine's own LRU done: nothing is
    touched, though a pin is older than the victim, and no credit is spent. Where every resident runs a request
    no room can be made: neither a prefetch nor a demand load is made."""
    from lorafleet.policy.core import TOUCH, PolicyCore

    inv = make_inventory(tmp_path, adapters=4, engines=[{"kind": "vllm", "max_loras": 2, "max_cpu_loras": 2}])
    core = PolicyCore(inv, Policy())
    state = core.book.engines["h/e0"]
    for adapter in ("a0", "a1"):
        state.admit(adapter, core.sizes[adapter])
    state.pins.add("a0")
    core.touch_credit["h/e0"] = 5.0
    order = lambda: list(state.resident)  # noqa: E731
    decisions = core.load(1000.0, "h/e0", "a2", DEMAND, order, complete=True, alone=True)
    assert [d.action for d in decisions if d.action == TOUCH] == [] and core.touch_credit["h/e0"] == 5.0
    assert [d.adapter for d in decisions if d.action == EVICT] == ["a1"]
    state.finish_load("a2")
    for adapter in ("a0", "a2"):
        state.run(adapter)
    for credit in (0.0, 5.0):
        core.touch_credit["h/e0"] = credit
        for reason, complete in ((PREFETCH, False), (DEMAND, True)):
            assert core.load(1001.0, "h/e0", "a3", reason, order, complete=complete) == []
            assert core.touch_credit["h/e0"] == credit and list(state.resident) == ["a0", "a2"]


def test_the_oracle_loads_ahead_only_what_its_loader_can_bring_in_time_and_a_yielding_one_waits(
    tmp_path: Path,
) -> None:
    """a0 comes at once and a1 a millisecond later, both before any load could finish; a2 ten seconds on. The
    oracle skips the two it cannot save and loads a2 ahead; the variant that yields to demand leaves the loader
    free for a0's demand load instead."""
    from lorafleet.policy.core import PolicyCore
    from lorafleet.policy.events import ADAPTER, RequestEvent
    from lorafleet.policy.oracle import OraclePolicy

    events = [
        RequestEvent(at, ADAPTER, adapter, tenant="t", base_model="m")
        for at, adapter in ((1000.0, "a0"), (1000.001, "a1"), (1010.0, "a2"))
    ]
    inv = make_inventory(tmp_path, adapters=3)
    plain = PolicyCore(inv, OraclePolicy(events))
    assert [(d.action, d.adapter) for d in plain.start(1000.0)] == [(LOAD, "a2")]
    yielding = PolicyCore(inv, OraclePolicy(events, yield_to_demand=True))
    assert yielding.start(1000.0) == []


class _NewestFirst(Policy):
    """Evicts the most recently used first: on vLLM every older adapter must be touched for its choice."""

    def victim_order(self, state: EngineResidency, now: float) -> list[str]:
        return list(reversed(state.resident))


def test_on_vllm_a_demand_load_with_exactly_one_touch_of_credit_ranks_and_spends_it(tmp_path: Path) -> None:
    """A credit of exactly one touch pays for a victim one place from the engine's own choice: the older adapter
    is touched and the policy's victim goes; under one touch the engine's least recently used goes, untouched."""
    from lorafleet.policy.core import TOUCH, PolicyCore

    inv = make_inventory(tmp_path, adapters=3, engines=[{"kind": "vllm", "max_loras": 1, "max_cpu_loras": 2}])
    for credit, touched, evicted in ((1.0, ["a0"], ["a1"]), (0.99, [], ["a0"])):
        policy = _NewestFirst()
        core = PolicyCore(inv, policy)
        state = core.book.engines["h/e0"]
        for adapter in ("a0", "a1"):
            state.admit(adapter, core.sizes[adapter])
        core.touch_credit["h/e0"] = credit
        order = lambda state=state, policy=policy: policy.victim_order(state, 1000.0)  # noqa: E731
        decisions = core.load(1000.0, "h/e0", "a2", DEMAND, order, complete=True)
        assert [d.adapter for d in decisions if d.action == TOUCH] == touched, credit
        assert [d.adapter for d in decisions if d.action == EVICT] == evicted, credit
        assert core.touch_credit["h/e0"] == credit - len(touched)


def test_the_engines_alone_keep_no_demand_model(tmp_path: Path) -> None:
    """Only a policy that reads the demand model has it kept for each request (per-request work where it is
    read: lru, what the engines do alone, reads none)."""
    from lorafleet.drive.session import Session
    from lorafleet.policy.core import PolicyCore
    from lorafleet.policy.predictive import LorafleetPolicy

    inv = make_inventory(tmp_path, adapters=3)
    for policy, observed in ((Policy(), 0), (LorafleetPolicy(), 3)):
        core = PolicyCore(inv, policy)
        session = Session(core, simulate=True)
        for event in stream([0, 1, 2]):
            session.request(event)
        assert core.demand.clock == observed, policy.name


def test_the_affordable_victims_stop_reading_the_policys_order_once_every_one_in_reach_came() -> None:
    """A value order computes each score as it is read: once every adapter within the credit's reach has come,
    nothing more of it is read."""
    from lorafleet.policy.core import _among

    def order():  # type: ignore[no-untyped-def]
        yield from ("a3", "a1", "a0")
        raise AssertionError("read past the last adapter in reach")

    assert list(_among(order(), {"a0", "a1"})) == ["a1", "a0"]


class _PrefetchA1Later(Policy):
    """Wants a1 loaded ahead at 1000.5: a timed wakeup, as the predictor schedules its prefetches."""

    due: float | None = 1000.5

    def next_wakeup(self) -> float | None:
        return self.due

    def tick(self, now: float) -> list[Decision]:
        self.due = None
        return self.core.load(now, "h/e0", "a1", PREFETCH, tuple)


def test_a_request_that_comes_after_a_due_wakeup_returns_the_wakeups_calls_first(tmp_path: Path) -> None:
    """Live, a request's calls are those of the policy's wakeups due by its arrival, then its own."""
    from lorafleet.drive.session import Session
    from lorafleet.policy.core import PolicyCore
    from lorafleet.policy.events import ADAPTER, RequestEvent

    inv = make_inventory(
        tmp_path, adapters=3, engines=[{"kind": "sglang", "max_loras_per_batch": 2, "max_loaded_loras": 3}]
    )
    session = Session(PolicyCore(inv, _PrefetchA1Later()))
    session.start(1000.0)
    calls = session.request(RequestEvent(1001.0, ADAPTER, "a0", "t", "h/e0", "m"))
    assert [(c.action, c.adapter, c.reason) for c in calls] == [(LOAD, "a1", PREFETCH), (LOAD, "a0", DEMAND)]


def test_a_hit_outside_the_gpu_slots_is_answered_as_one(tmp_path: Path) -> None:
    """The answers the journal folds say whether each hit found its adapter in a GPU slot: the first request for an
    adapter held in host memory waits its copy in (no GPU hit), the next finds it there."""
    from lorafleet.drive.session import Served, Session
    from lorafleet.policy.core import HIT, PolicyCore
    from lorafleet.policy.events import ADAPTER, RequestEvent

    inv = make_inventory(tmp_path, adapters=3, engines=[{"kind": "vllm", "max_loras": 1, "max_cpu_loras": 3}])
    core = PolicyCore(inv, Policy())
    for adapter in ("a0", "a1"):  # a1, loaded last, holds the one GPU slot: a0 is in host memory only
        core.book.engines["h/e0"].admit(adapter, core.sizes[adapter])
    assert list(core.book.engines["h/e0"].gpu) == ["a1"]
    session = Session(core, simulate=True)
    for at in (1000.0, 1001.0):
        session.request(RequestEvent(at, ADAPTER, "a0", "t", "h/e0", "m"))
    served = [a for a in session.take_answers() if isinstance(a, Served)]
    assert [(s.outcome, s.gpu) for s in served] == [(HIT, False), (HIT, True)]
    assert session.counts.gpu_hits == 1
