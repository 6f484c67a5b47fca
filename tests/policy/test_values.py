"""The small values the hot path makes many of, written out as plain classes (compiled, a dataclass's or a
NamedTuple's generated constructor stays interpreted): each keeps the meaning its generated methods had — a
decision is a value, scheduled prefetches come soonest first and then in the order they were made, a load's
completion names what it completed, the load-time model adds its three parts."""

from __future__ import annotations

import heapq
import pickle

import pytest

from lorafleet.drive.session import Call, Performed, Served, Waited
from lorafleet.drive.simulated import Completion, SimulatedEngines
from lorafleet.inventory.capacity import LoadModel, slot_cap
from lorafleet.policy.core import DEMAND, EVICT, HIT, LOAD, MISS, PREFETCH, TOUCH, Decision
from lorafleet.policy.events import ADAPTER, RequestEvent
from lorafleet.policy.predictive import ScheduledPrefetch
from lorafleet.policy.residency import Budget


def test_a_decision_is_a_value_equal_and_hashed_by_every_field() -> None:
    d = Decision(LOAD, "h/e0", "a1", PREFETCH)
    assert d == Decision(LOAD, "h/e0", "a1", PREFETCH, False, False)
    assert hash(d) == hash(Decision(LOAD, "h/e0", "a1", PREFETCH))
    others = [
        Decision(TOUCH, "h/e0", "a1", PREFETCH),
        Decision(LOAD, "h/e1", "a1", PREFETCH),
        Decision(LOAD, "h/e0", "a2", PREFETCH),
        Decision(LOAD, "h/e0", "a1", DEMAND),
        Decision(LOAD, "h/e0", "a1", PREFETCH, unused=True),
        Decision(LOAD, "h/e0", "a1", PREFETCH, overrun=True),
    ]
    assert all(d != other for other in others)
    assert len({d, *others, Decision(LOAD, "h/e0", "a1", PREFETCH)}) == 7
    assert d != (LOAD, "h/e0", "a1", PREFETCH, False, False)  # a value of its own kind, not a tuple
    assert pickle.loads(pickle.dumps(d)) == d
    evict = Decision(EVICT, "h/e0", "a9", "a1", unused=True)
    assert pickle.loads(pickle.dumps(evict)).unused
    shown = repr(Decision(LOAD, "h/e0", "a1", DEMAND, overrun=True))
    assert shown == "Decision(action='load', engine='h/e0', adapter='a1', reason='demand', unused=False, overrun=True)"


def test_scheduled_prefetches_come_soonest_first_then_in_the_order_they_were_made() -> None:
    made = [
        ScheduledPrefetch(5.0, 3, ("tenant", "t"), 1, "h/e0", "c"),
        ScheduledPrefetch(2.0, 4, ("tenant", "t"), 1, "h/e0", "d"),
        ScheduledPrefetch(5.0, 1, ("tenant", "t"), 1, "h/e0", "a"),
        ScheduledPrefetch(5.0, 2, ("adapter", "b"), 2, "h/e1", "b"),
        ScheduledPrefetch(9.0, 0, ("tenant", "u"), 1, "h/e0", "e"),
    ]
    heap: list[ScheduledPrefetch] = []
    for work in made:
        heapq.heappush(heap, work)
    assert [heapq.heappop(heap).adapter for _ in made] == ["d", "a", "b", "c", "e"]
    early, late = made[2], made[0]
    assert early < late and not late < early and not early < early


def test_a_scheduled_prefetch_keeps_every_field_through_a_memory() -> None:
    work = ScheduledPrefetch(7.5, 12, ("tenant", "t"), 3, "h/e0", "a1", attempt=2, completed=40)
    back = pickle.loads(pickle.dumps(work))
    fields = ("due", "seq", "key", "generation", "engine", "adapter", "attempt", "completed")
    assert [getattr(back, f) for f in fields] == [7.5, 12, ("tenant", "t"), 3, "h/e0", "a1", 2, 40]
    assert ScheduledPrefetch(1.0, 1, ("tenant", None), 0, "h/e0", "a").attempt == 0
    assert ScheduledPrefetch(1.0, 1, ("tenant", None), 0, "h/e0", "a").completed == 0


def test_a_completion_names_the_load_its_time_and_whether_a_new_budget_replaced_its_loader() -> None:
    sim = SimulatedEngines({"e": LoadModel()}, {"e": Budget(1, 2, None)}, {"a": 10**6, "b": 10**6})
    sim.apply(0.0, [Decision(LOAD, "e", "a", DEMAND)])
    done = sim.pop_done()
    assert (done.engine, done.adapter, done.replaced) == ("e", "a", False)
    assert done.done_at == pytest.approx(LoadModel().cold_ms(10**6) / 1000.0)
    sim.apply(done.done_at, [Decision(LOAD, "e", "b", DEMAND)])
    sim.replace_engines({"e": LoadModel()}, {"e": Budget(1, 3, None)})  # a new budget: a new loader
    assert sim.pop_done().replaced


def test_the_load_time_model_adds_overhead_disk_read_and_copy() -> None:
    load = LoadModel(load_fixed_ms=10.0, disk_gbps=2.0, h2d_gbps=20.0)
    size = 4 * 10**8  # 0.4 GB: 200 ms from disk, 20 ms to the GPU
    assert load.copy_ms(size) == pytest.approx(20.0)
    assert load.cold_ms(size) == pytest.approx(10.0 + 200.0 + 20.0)
    assert pickle.loads(pickle.dumps(load)) == load
    assert LoadModel() == LoadModel(15.0, 3.0, 25.0)
    assert slot_cap(4, 12) == 12 and slot_cap(4, None) == 4


def test_the_sessions_answers_are_values_of_their_own_kind() -> None:
    event = RequestEvent(1000.0, ADAPTER, "a1", "t")
    served = Served(1000.0, event, "h/e0", MISS, False, False, 0.0)
    call = Call(LOAD, "h/e0", "a1", DEMAND)
    made = [
        call,
        Call(LOAD, "h/e0", "a1", DEMAND, pinned=True),
        Call(LOAD, "h/e0", "a1", DEMAND, unused=True),
        served,
        Served(1000.0, event, "h/e0", HIT, False, False, 0.0),
        Served(1000.0, event, "h/e0", MISS, True, False, 0.0),
        Waited(served, 120.0, 0.0),
        Waited(served, 120.0, 5.0),
        Performed(1001.0, call, "loaded", True, 120.0, None),
        Performed(1001.0, call, "failed", False, 3.0, "HTTP 500"),
        Completion(1001.0, "h/e0", "a1", False),
        Completion(1001.0, "h/e0", "a1", True),
    ]
    again = [pickle.loads(pickle.dumps(x)) for x in made]
    assert again == made and [hash(x) for x in again] == [hash(x) for x in made]
    assert len(set(made)) == len(made)  # each differs from the others by one field
    assert Call(LOAD, "h/e0", "a1", DEMAND) != Decision(LOAD, "h/e0", "a1", DEMAND)  # same fields, another kind
    assert repr(call) == "Call(action='load', engine='h/e0', adapter='a1', reason='demand', pinned=False, unused=False)"
    assert repr(Waited(served, 1.5, 0.0)).startswith("Waited(request=Served(at=1000.0, event=RequestEvent(")
