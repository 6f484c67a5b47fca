"""A request's two times: served at its arrival, learned when lorafleet can know of it (log line or start hint)."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest

from lorafleet.drive.late import LateFleet
from lorafleet.drive.leader import LeaderPolicy
from lorafleet.drive.session import Session
from lorafleet.inventory import Inventory
from lorafleet.policy.baselines import LruPolicy, MarkovPolicy
from lorafleet.policy.core import PREFETCH, Decision, Policy, PolicyCore
from lorafleet.policy.events import ADAPTER, RequestEvent
from lorafleet.policy.predictive import LorafleetPolicy
from lorafleet.policy.residency import EngineResidency
from lorafleet.replay.driver import HINTS, LOG, Simulation, in_arrival_order, simulate
from lorafleet.times import FOLLOW_POLL_S
from tests.policy.builders import make_inventory

STEP_S = 1.0  # each step's generation


def workflow(rounds: int, think_s: float = 0.0, durations: bool = True) -> list[RequestEvent]:
    """One tenant's chain a0 -> a1 -> a2 -> a3, each step sent `think_s` after the previous one ended, as its log
    lines give it: in order of their ends, each line's time its end, its duration known (or not)."""
    events, start = [], 1000.0
    for _ in range(rounds):
        for step in range(4):
            end = start + STEP_S
            arrival = start if durations else end
            seen = end if durations else None
            events.append(RequestEvent(arrival, ADAPTER, f"a{step}", tenant="t", base_model="m", seen=seen))
            start = end + think_s
    return events


def two_slot_inventory(tmp: Path) -> Inventory:
    """One vLLM engine holding two adapters: the engine alone misses every step of a four-step chain."""
    return make_inventory(tmp, adapters=4, engines=[{"kind": "vllm", "max_loras": 1, "max_cpu_loras": 2}])


def three_slot_inventory(tmp: Path) -> Inventory:
    """One vLLM engine holding three adapters: the engine alone still misses every step of a four-step chain, and
    a prefetch of the next step has room beside the step running and the one before, in use until its line is
    read (a start hint says when a request starts, only its line when it ends)."""
    return make_inventory(tmp, adapters=4, engines=[{"kind": "vllm", "max_loras": 1, "max_cpu_loras": 3}])


def test_back_to_back_steps_are_prefetched_from_hints_but_not_from_log_lines(tmp_path: Path) -> None:
    """From log lines each prefetch of the next step is sent once its request has come and the engine loaded its
    adapter: it loads nothing, and no request uses it (the book, which has not read that request's line yet,
    believes it loaded a prefetch the next line then used)."""
    inv = three_slot_inventory(tmp_path)
    events = workflow(30)
    hinted = simulate(inv, "markov", events, visibility=HINTS)
    logged = simulate(inv, "markov", events, visibility=LOG)
    assert hinted.hit_ratio > 0.8  # learned at arrival: a whole generation of lead time
    assert hinted.prefetch_used == hinted.hits and hinted.cold_ms_avoided > 0
    assert logged.hit_ratio < 0.1  # learned at the end: the next step has already arrived
    assert logged.prefetch_loads > 100
    assert (logged.prefetch_used, logged.cold_ms_avoided, logged.wasted_prefetches) == (0, 0.0, 0)
    assert simulate(inv, "lru", events, visibility=HINTS).hit_ratio == 0.0


def test_log_lines_leave_a_think_times_lead_less_the_followers_poll(tmp_path: Path) -> None:
    inv = make_inventory(
        tmp_path, adapters=4, engines=[{"kind": "vllm", "max_loras": 1, "max_cpu_loras": 2}], zero_load=True
    )
    # The next step comes just inside the poll lag: learned too late; just past it: learned in time.
    inside = simulate(inv, "markov", workflow(30, think_s=FOLLOW_POLL_S * 0.5), visibility=LOG)
    past = simulate(inv, "markov", workflow(30, think_s=FOLLOW_POLL_S * 2), visibility=LOG)
    assert inside.hit_ratio < 0.1
    assert past.hit_ratio > 0.8


def test_without_durations_both_visibilities_are_one(tmp_path: Path) -> None:
    inv = two_slot_inventory(tmp_path)
    events = workflow(30, durations=False)
    for policy in ("markov", "lorafleet"):
        hinted, logged = (simulate(inv, policy, events, visibility=v) for v in (HINTS, LOG))
        assert (hinted.hits, hinted.loads, hinted.touches) == (logged.hits, logged.loads, logged.touches)


def test_requests_are_replayed_in_arrival_order() -> None:
    a = RequestEvent(10.0, ADAPTER, "a0", seen=15.0)  # a long request, logged late
    b = RequestEvent(12.0, ADAPTER, "a1", seen=13.0)
    assert list(in_arrival_order([b, a])) == [a, b]
    plain = [RequestEvent(2.0, ADAPTER, "a0"), RequestEvent(1.0, ADAPTER, "a1")]
    assert in_arrival_order(plain) is plain  # one time per request: the log's order is kept


def test_every_experts_copy_is_its_own_replay_until_it_leads(tmp_path: Path) -> None:
    """Each expert's copy is exactly its own replay when requests are known on arrival (the shadow property),
    until it takes the lead: then it is matched to the live engines (leader.py)."""
    inv = two_slot_inventory(tmp_path)
    events = workflow(30)
    hinted = [dataclasses.replace(e, seen=None) for e in events]
    leader = LeaderPolicy()
    core = PolicyCore(inv, leader)
    session = Session(core, simulate=True, answers=False)
    session.start(events[0].time)
    led = set()
    for event in hinted:
        session.request(event)
        led.add(leader.leader_of("m"))
    assert "markov" in led and "lru" not in led
    for shadow in leader.shadows:
        if shadow.name in ("lru", "lfu", "arc"):  # never followed: never matched
            alone = simulate(inv, shadow.name, events, visibility=HINTS)
            assert shadow.counts.hits == alone.hits, shadow.name


def test_a_hint_is_learned_once_and_its_log_line_counted_once(tmp_path: Path) -> None:
    inv = two_slot_inventory(tmp_path)
    leader = LeaderPolicy(experts=[("markov", MarkovPolicy), ("predictive", LorafleetPolicy)])
    core = PolicyCore(inv, leader)
    session = Session(core, simulate=True, answers=False)
    session.start(1000.0)
    for i in range(3):
        start = RequestEvent(1000.0 + i, ADAPTER, f"a{i}", tenant="t", base_model="m")
        _, held = session.hint(start)
        assert session.counts.requests == i  # held until its log line
        line = dataclasses.replace(start, time=1000.5 + i, seen=1000.9 + i)
        session.request(line, held=held)  # its log line: counted, not served or learned again
        assert session.counts.requests == i + 1
    assert (session.counts.misses, core.book.engines["h/e0"].resident.keys() >= {"a1", "a2"}) == (3, True)
    learned = {("t", "a0"): {"a1": 1}, ("t", "a1"): {"a2": 1}}
    shadow = leader.shadows[0]  # each expert's copy learned each request once
    assert shadow.counts.requests == 3 and shadow.session.core.policy.successors == learned  # type: ignore[attr-defined]
    assert leader.shadows[1].session.core.demand.clock == 3


def test_a_hint_prefetches_the_next_step_before_the_request_is_served(tmp_path: Path) -> None:
    inv = two_slot_inventory(tmp_path)
    core = PolicyCore(inv, MarkovPolicy())
    session = Session(core, simulate=True, answers=False)
    session.start(1000.0)
    now = 1000.0
    for _ in range(3):  # the chain, learned from its log lines
        for step in range(4):
            session.request(RequestEvent(now, ADAPTER, f"a{step}", tenant="t", base_model="m"))
            now += 1.0
    hint = RequestEvent(now, ADAPTER, "a0", tenant="t", base_model="m")
    session.hint(hint)
    engine = next(iter(core.book.engines.values()))
    assert "a1" in engine.in_flight or "a1" in engine.resident


def test_a_hint_whose_log_line_never_comes_is_never_counted(tmp_path: Path) -> None:
    inv = two_slot_inventory(tmp_path)
    session = Session(PolicyCore(inv, MarkovPolicy()), simulate=True, answers=True)
    session.start(1000.0)
    _, held = session.hint(RequestEvent(1000.0, ADAPTER, "a0", tenant="t", base_model="m"))
    session.advance(1010.0)  # its load is done, its wait known: still held
    assert session.counts.requests == 0 and session.counts.cold_ms_paid == 0.0
    assert held.counts.requests == 1 and held.counts.cold_ms_paid > 0
    assert not [a for a in session.take_answers() if not hasattr(a, "call")]  # no request's answer either


def test_a_hinted_request_is_filed_under_its_log_lines_tenant_where_the_hint_named_none(tmp_path: Path) -> None:
    """Joined by request id, a hint from a gateway that sends no tenant header and its line naming the tenant are
    one request of that tenant: its answers, and the wait that comes after the line, say so (stats by tenant)."""
    from lorafleet.drive.session import Served, Waited

    inv = two_slot_inventory(tmp_path)
    session = Session(PolicyCore(inv, MarkovPolicy()), simulate=True, answers=True)
    session.start(1000.0)
    _, held = session.hint(RequestEvent(1000.0, ADAPTER, "a0", tenant=None, base_model="m", request_id="r1"))
    session.request(RequestEvent(1000.0, ADAPTER, "a0", tenant="t", base_model="m", seen=1000.0), held=held)
    _, other = session.hint(RequestEvent(1000.0, ADAPTER, "a1", tenant="u", base_model="m", request_id="r2"))
    session.request(RequestEvent(1000.0, ADAPTER, "a1", tenant=None, base_model="m", seen=1000.0), held=other)
    first = session.take_answers()
    served = [(a.event.adapter, a.event.tenant) for a in first if isinstance(a, Served)]
    assert served == [("a0", "t"), ("a1", "u")]  # a line naming no tenant leaves the hint's
    assert not [a for a in first if isinstance(a, Waited)]  # the loads are still running
    session.advance(1010.0)  # the loads are done: the waits come now, after the lines
    waited = [
        (a.request.event.adapter, a.request.event.tenant) for a in session.take_answers() if isinstance(a, Waited)
    ]
    assert sorted(waited) == [("a0", "t"), ("a1", "u")]


def test_a_prefetch_timed_from_a_log_line_counts_the_gap_from_the_requests_arrival(tmp_path: Path) -> None:
    """Steps 2 s apart (1 s of generation, 1 s of thought), each learned at its end: the predictor times the
    next step's prefetch from the arrival, so it is there 1 s later; timed from the end it would come too late."""
    inv = two_slot_inventory(tmp_path)
    events = workflow(40, think_s=1.0)
    assert simulate(inv, "lorafleet", events, visibility=LOG).hit_ratio > 0.8


def test_live_the_book_keeps_the_engines_recency_by_the_requests_ends_the_lines_order(tmp_path: Path) -> None:
    """A long request (arrived first, ended last) is read after a short one that arrived after it: the engine
    touched the long one's adapter at every step until it ended, so it is the more recent there, and in the book."""
    inv = make_inventory(tmp_path, adapters=4, engines=[{"kind": "vllm", "max_loras": 1, "max_cpu_loras": 3}])
    core = PolicyCore(inv, MarkovPolicy())
    session = Session(core)  # live: the driver makes the calls
    session.start(1000.0)
    state = core.book.engines["h/e0"]
    for name in ("a0", "a1", "a2"):
        state.admit(name, core.sizes[name])
    short = RequestEvent(1011.0, ADAPTER, "a1", tenant="u", base_model="m", seen=1012.0)
    long = RequestEvent(1010.0, ADAPTER, "a2", tenant="t", base_model="m", seen=1013.0)
    session.request(short)  # read first: it ended first
    session.request(long)
    assert list(state.resident)[-2:] == ["a1", "a2"]  # a2 ended last: the engine's most recent


def test_a_hinted_requests_line_leaves_its_adapter_the_most_recent(tmp_path: Path) -> None:
    """Hinted at its start (most recent then), the long request ends after a short one: its line makes it the
    most recent again, as the engine's steps did."""
    inv = make_inventory(tmp_path, adapters=4, engines=[{"kind": "vllm", "max_loras": 1, "max_cpu_loras": 3}])
    core = PolicyCore(inv, MarkovPolicy())
    session = Session(core)
    session.start(1000.0)
    state = core.book.engines["h/e0"]
    for name in ("a0", "a1", "a2"):
        state.admit(name, core.sizes[name])
    long = RequestEvent(1010.0, ADAPTER, "a2", tenant="t", base_model="m")
    _, held = session.hint(long)
    short = RequestEvent(1011.0, ADAPTER, "a1", tenant="u", base_model="m")
    _, held_short = session.hint(short)
    assert list(state.resident)[-2:] == ["a2", "a1"]
    session.request(dataclasses.replace(short, seen=1012.0), held=held_short)
    session.request(dataclasses.replace(long, seen=1013.0), held=held)
    assert list(state.resident)[-2:] == ["a1", "a2"]
    assert session.counts.requests == 2


class _MostRecentFirst(MarkovPolicy):
    """A policy that would evict the most recently used first: on vLLM it takes touches to make the engine agree."""

    def victim_order(self, state: EngineResidency, now: float) -> list[str]:
        return list(reversed(state.resident))


def _full_engine(tmp: Path, kind: str = "vllm", name: str = "inv.yaml") -> tuple[PolicyCore, EngineResidency]:
    spec: dict[str, object] = {"kind": kind, "max_loras": 1, "max_cpu_loras": 3}
    if kind == "sglang":
        spec = {"kind": kind, "max_loras_per_batch": 1, "max_loaded_loras": 3}
    inventory = make_inventory(tmp, adapters=4, engines=[spec], name=name)
    core = PolicyCore(inventory, _MostRecentFirst(), touch_budget=10.0)
    state = core.book.engines["h/e0"]
    for name in ("a0", "a1", "a2"):  # a0 the least recently used
        state.admit(name, core.sizes[name])
    core.touch_credit["h/e0"] = 3.0
    return core, state


def test_a_miss_learned_after_its_arrival_displaced_what_the_engines_own_lru_chose(tmp_path: Path) -> None:
    """vLLM loads a missing adapter itself when the request comes, evicting its least recently used: a request
    lorafleet learns of from its log line was served before any touch could steer that, so the book takes the
    engine's choice and sends nothing; one it knew of on arrival takes the policy's, by touches."""
    core, state = _full_engine(tmp_path)
    request = RequestEvent(1000.0, ADAPTER, "a3", tenant="t", base_model="m", seen=1002.0)
    _, late = core.serve(1002.0, request, "h/e0", known=False)
    assert [(d.action, d.adapter) for d in late] == [("evict", "a0"), ("load", "a3")]
    assert core.touch_credit["h/e0"] == 3.0  # no touch spent
    assert list(state.resident) == ["a1", "a2"] and "a3" in state.in_flight

    core, _ = _full_engine(tmp_path, name="known.yaml")
    _, known = core.serve(1000.0, request, "h/e0")
    assert [(d.action, d.adapter) for d in known] == [("touch", "a0"), ("touch", "a1"), ("evict", "a2"), ("load", "a3")]


def test_an_engine_that_unloads_on_request_follows_the_policy_whenever_it_learns(tmp_path: Path) -> None:
    core, _ = _full_engine(tmp_path, kind="sglang")
    request = RequestEvent(1000.0, ADAPTER, "a3", tenant="t", base_model="m", seen=1002.0)
    _, late = core.serve(1002.0, request, "h/e0", known=False)
    assert [(d.action, d.adapter) for d in late] == [("unload", "a2"), ("load", "a3")]


def test_live_a_miss_makes_room_as_the_engine_did_whether_learned_from_its_line_or_its_start_hint(
    tmp_path: Path,
) -> None:
    """The gateway mirrors a request's start to lorafleet as it forwards it: the engine takes it (vLLM loads the
    adapter and evicts its own least recently used) before any touch lorafleet would send could steer it, so the
    book takes the engine's victim and no touch is sent, as for a request learned from its line. Where lorafleet
    itself decides the load (a request known before the engine takes it), the policy's victim goes."""
    line = RequestEvent(1000.0, ADAPTER, "a3", tenant="t", base_model="m", seen=1002.0)
    core, state = _full_engine(tmp_path)
    session = Session(core)  # live: the driver makes the calls
    session.started = True
    calls = session.request(line)
    assert [(c.action, c.adapter) for c in calls] == [("load", "a3")] and "a0" not in state.resident

    core, state = _full_engine(tmp_path, name="hinted.yaml")
    session = Session(core)
    session.started = True
    calls, held = session.hint(dataclasses.replace(line, seen=None))
    assert [(c.action, c.adapter) for c in calls] == [("load", "a3")] and "a0" not in state.resident
    assert session.request(line, held=held) == [] and "a2" in state.resident

    core, state = _full_engine(tmp_path, name="known.yaml")
    session = Session(core)
    session.started = True
    calls = session.request(dataclasses.replace(line, seen=None))  # a log without durations: known first
    assert [(c.action, c.adapter) for c in calls] == [("touch", "a0"), ("touch", "a1"), ("load", "a3")]
    assert "a2" not in state.resident and "a0" in state.resident


def test_replay_sends_no_touch_for_a_demand_load_learned_from_its_line_or_its_start_hint(tmp_path: Path) -> None:
    """Every request of a log with durations is learned no earlier than the engine took it, from its line or
    from its start hint: its load made room as the engine would alone, so no touch steers a demand load."""
    inv = make_inventory(tmp_path, adapters=6, engines=[{"kind": "vllm", "max_loras": 1, "max_cpu_loras": 3}])
    draws = random.Random(3).choices(range(6), weights=[8, 4, 2, 1, 1, 1], k=300)
    events = [
        RequestEvent(1000.0 + i, ADAPTER, f"a{a}", tenant="t", base_model="m", seen=1000.5 + i)
        for i, a in enumerate(draws)
    ]
    assert simulate(inv, "lfu", events, visibility=LOG).touches == 0
    assert simulate(inv, "lfu", events, visibility=HINTS).touches == 0
    known = [dataclasses.replace(e, seen=None) for e in events]  # each known before its engine took it: steered
    assert simulate(inv, "lfu", known, visibility=HINTS).touches > 0


class _PrefetchAt(Policy):
    """Loads a1 ahead of demand at a set instant: a wakeup between two requests."""

    def __init__(self, at: float) -> None:
        self.at: float | None = at

    def next_wakeup(self) -> float | None:
        return self.at

    def tick(self, now: float) -> list[Decision]:
        self.at = None
        return self.core.load(now, "h/e0", "a1", PREFETCH, lambda: list(self.core.book["h/e0"].resident))


def test_replay_from_log_lines_carries_a_wakeups_decision_out_at_its_own_time(tmp_path: Path) -> None:
    """The engine gets a prefetch decided at a wakeup when it is decided, not at the next request's arrival."""
    inv = two_slot_inventory(tmp_path)
    events = [
        RequestEvent(1000.0, ADAPTER, "a0", tenant="t", base_model="m", seen=1000.5),
        RequestEvent(1005.5, ADAPTER, "a1", tenant="t", base_model="m", seen=1006.0),
    ]
    simulation = Simulation(inv, "lru", events)
    simulation.session.core.policy = policy = _PrefetchAt(1005.0)
    policy.bind(simulation.session.core)
    result = simulation.run()
    assert (result.hits, result.misses, result.late) == (1, 1, 0)


def test_replay_from_log_lines_keeps_an_adapter_in_use_until_its_request_ends(tmp_path: Path) -> None:
    """a0's request runs from 1000 to 1050: for a2 at 1020 the engine's LRU evicts a1, not a0, so a0's next
    request is a hit (by arrival alone a0 would have gone). Its end leaves a0 the most recent, and in use no more:
    a1 at 1055 evicts a2, the least recently used, and a2 at 1070 misses."""
    inv = make_inventory(tmp_path, adapters=4, engines=[{"kind": "vllm", "max_loras": 1, "max_cpu_loras": 2}])

    def replayed(spans: list[tuple[str, float, float]]) -> int:
        events = [RequestEvent(t, ADAPTER, a, tenant="t", base_model="m", seen=end) for a, t, end in spans]
        return simulate(inv, "lru", sorted(events, key=lambda e: e.seen or e.time), visibility=LOG).hits

    first = [("a0", 1000.0, 1050.0), ("a1", 1010.0, 1011.0), ("a2", 1020.0, 1021.0)]
    assert replayed([*first, ("a0", 1060.0, 1061.0)]) == 1
    assert replayed([*first, ("a1", 1055.0, 1056.0), ("a0", 1060.0, 1061.0), ("a2", 1070.0, 1071.0)]) == 1


def test_replay_with_hints_keeps_an_adapter_in_use_until_its_request_ends(tmp_path: Path) -> None:
    """Known on arrival, a request still runs until its line's time: the book keeps its adapter as the engine does
    (no victim while it runs, the most recent when it ends). a0 runs from 1000 to 1050: a2 at 1020 evicts a1, and
    a0 at 1060 is a hit; with the requests' ends dropped (no durations), a0 goes for a2 and misses."""
    inv = make_inventory(
        tmp_path, adapters=4, engines=[{"kind": "sglang", "max_loras_per_batch": 1, "max_loaded_loras": 2}]
    )
    spans = [("a0", 1000.0, 1050.0), ("a1", 1010.0, 1011.0), ("a2", 1020.0, 1021.0), ("a0", 1060.0, 1061.0)]
    events = [RequestEvent(t, ADAPTER, a, tenant="t", base_model="m", seen=end) for a, t, end in spans]
    assert simulate(inv, "lru", events, visibility=HINTS).hits == 1
    bare = [dataclasses.replace(e, seen=None) for e in events]
    assert simulate(inv, "lru", bare, visibility=HINTS).hits == 0


def crowded(tmp: Path) -> tuple[Inventory, list[RequestEvent]]:
    """One vLLM engine holding 3 of 8 adapters, 1 s requests every 0.1 s: some ten in use at once."""
    inv = make_inventory(tmp, adapters=8, engines=[{"kind": "vllm", "max_loras": 1, "max_cpu_loras": 3}])
    rng = random.Random(11)
    events = [
        RequestEvent(
            1000.0 + i * 0.1, ADAPTER, f"a{rng.randrange(8)}", tenant="t", base_model="m", seen=1001.0 + i * 0.1
        )
        for i in range(400)
    ]
    return inv, events


def test_the_engines_alone_serve_alike_whenever_lorafleet_learns_of_the_requests(tmp_path: Path) -> None:
    """Replay's engines are the same stand-ins whether lorafleet learns of each request from its line or from its
    start hint: what the engines do alone (lru, one engine: no routing to choose) does not depend on it, even with
    more adapters in use at once than the engine holds (each kept while its request runs, as vLLM does)."""
    inv, events = crowded(tmp_path)
    logged, hinted = (simulate(inv, "lru", events, visibility=v) for v in (LOG, HINTS))
    assert (hinted.hits, hinted.late, hinted.misses) == (logged.hits, logged.late, logged.misses)
    assert hinted.bypassed == logged.bypassed == 0 and 0 < logged.hits < logged.requests


def test_with_hints_the_book_holds_what_the_engine_took_past_its_slots_with_every_adapter_in_use(
    tmp_path: Path,
) -> None:
    """vLLM makes room for a request's adapter by evicting its least recently used one not in use; with every
    adapter it holds in use, it takes the new one past its slots, and evicts back at a later load once requests
    have ended (drive/standin.py). The book, told of each request by its start hint, holds what the engine holds
    at every step: a0 and a1 run, a2 comes (held past the two slots, not a load the engine did not keep), a2 and
    a0 end, a3 comes (both go)."""
    inv = make_inventory(
        tmp_path, adapters=4, engines=[{"kind": "vllm", "max_loras": 1, "max_cpu_loras": 2}], zero_load=True
    )
    spans = [("a0", 1000.0, 1005.0), ("a1", 1001.0, 1010.0), ("a2", 1002.0, 1003.0), ("a3", 1006.0, 1007.0)]
    core = PolicyCore(inv, LruPolicy())
    fleet = LateFleet(Session(core, answers=False, read_after_s=FOLLOW_POLL_S), hints=True)
    for adapter, start, end in spans:
        fleet.add(RequestEvent(start, ADAPTER, adapter, tenant="t", base_model="m", seen=end))
    state = core.book.engines["h/e0"]
    held: dict[float, list[str]] = {}
    for until in (1000.5, 1001.5, 1002.5, 1004.0, 1005.5, 1006.5, 1008.0, 1011.0):
        fleet.run(until)
        held[until] = sorted([*state.resident, *state.in_flight])
        assert held[until] == sorted(fleet.standins.holds("h/e0")), until
    assert held[1002.5] == ["a0", "a1", "a2"] and held[1006.5] == ["a1", "a3"]
    assert fleet.session.counts.bypassed == 0


def test_with_hints_an_experts_copy_serves_as_the_engines_do_with_more_adapters_in_use_than_slots(
    tmp_path: Path,
) -> None:
    """The copy of the fleet an expert decides on takes each hinted miss as the engine does, past its slots when
    every adapter is in use, with no violation of a budget counted (the engine's own doing): it hits what the
    live engines hit, to within a few requests of the running requests' ends, learned a poll late (before: 146 of
    400 against 381, every such miss a load the copy did not keep)."""
    inv, events = crowded(tmp_path)
    for expert in (LruPolicy, MarkovPolicy):
        policy = LeaderPolicy(experts=[(expert.name, expert)])
        sim = Simulation(inv, "lru", events, visibility=HINTS)
        sim.session = Session(PolicyCore(inv, policy), answers=False, read_after_s=FOLLOW_POLL_S)
        live = sim.run()
        copy = policy.shadows[0].session
        assert copy.sim is not None and copy.sim.violations == 0 and copy.counts.bypassed == 0
        assert abs(copy.counts.hits - live.hits) <= 8
        assert live.hits == simulate(inv, expert.name, events, visibility=HINTS).hits


def test_with_hints_a_prefetch_goes_out_on_an_engine_past_its_slots_where_it_adds_nothing_to_the_excess(
    tmp_path: Path,
) -> None:
    """u's a2 and a3 run for long; w's a4 and x's a0 come while they do: the engine (two slots) holds all four,
    two past its slots. Once a4 and a0 have ended, t's a0 (a hit) leads markov to prefetch a1, its learned next
    step: the engine loads it, making what room it can (a4 goes; it stays two past), and so may lorafleet, for
    the load adds nothing to the excess: t's a1 is a hit. Refused for want of room past the excess, it missed."""
    inv = make_inventory(
        tmp_path, adapters=5, engines=[{"kind": "vllm", "max_loras": 1, "max_cpu_loras": 2}], zero_load=True
    )
    spans = [("t", "a0", 990.0), ("t", "a1", 991.0), ("t", "a0", 992.0), ("t", "a1", 993.0)]
    spans += [("u", "a2", 1000.0, 1100.0), ("u", "a3", 1000.2, 1100.0), ("w", "a4", 1000.4, 1001.0)]
    spans += [("x", "a0", 1000.6, 1001.0), ("t", "a0", 1002.0), ("t", "a1", 1003.0)]
    outcomes: dict[tuple[str, float], str] = {}
    core = PolicyCore(inv, MarkovPolicy())
    fleet = LateFleet(
        Session(core, answers=False, read_after_s=FOLLOW_POLL_S),
        lambda event, engine, outcome, waited: outcomes.__setitem__((event.adapter or "", event.time), outcome),
        hints=True,
    )
    for tenant, adapter, start, *end in spans:
        seen = end[0] if end else start + 0.1
        fleet.add(RequestEvent(start, ADAPTER, adapter, tenant=tenant, base_model="m", seen=seen))
    fleet.run(1002.5)
    state = core.book.engines["h/e0"]
    assert sorted(state.resident) == sorted(fleet.standins.holds("h/e0")) == ["a0", "a1", "a2", "a3"]
    fleet.run()
    assert outcomes[("a0", 1002.0)] == outcomes[("a1", 1003.0)] == "hit"


def test_a_request_goes_where_its_adapter_is_though_no_line_has_told_of_it(tmp_path: Path) -> None:
    """The gateway sends a request where its adapter is, not where the lines read so far would place it: a0 came
    with a request still running on e0 (its line not written), b's line says e0 holds one adapter, and a0's next
    request goes to e0, a hit, rather than to e1, the engine the book finds least loaded (a second load there)."""
    inv = make_inventory(tmp_path, adapters=4, engines=[{"kind": "vllm", "max_loras": 1, "max_cpu_loras": 3}] * 2)

    def request(at: float, adapter: str, duration: float) -> RequestEvent:
        return RequestEvent(at, ADAPTER, adapter, tenant="t", base_model="m", seen=at + duration)

    events = [request(1000.0, "a0", 100.0), request(1001.0, "a1", 0.01), request(1002.0, "a0", 0.01)]
    for visibility in (LOG, HINTS):
        result = simulate(inv, "lru", events, visibility=visibility)
        assert (result.hits, result.misses, result.loads) == (1, 2, 2), visibility


def test_with_hints_a_request_goes_where_the_gateway_sends_it_and_its_line_tells_the_book(tmp_path: Path) -> None:
    """A hint names no engine: the book takes it on the placement rule's engine (both empty: e0) and sends its
    demand load there, while the gateway sends the request where the adapter's name hashes (a0: e1). e0 never
    knew a0, so that load is made (what the daemon's call does); e1 took the request and loaded a0 itself; the
    line names e1 and the book holds a0 there too. a4 hashes to e0: the book and the gateway agree, one load."""
    inv = make_inventory(tmp_path, adapters=6, engines=[{"kind": "vllm", "max_loras": 1, "max_cpu_loras": 3}] * 2)
    for adapter, holders in (("a0", {"h/e0", "h/e1"}), ("a4", {"h/e0"})):
        session = Session(PolicyCore(inv, LruPolicy()), answers=False, read_after_s=FOLLOW_POLL_S)
        fleet = LateFleet(session, hints=True)
        fleet.add(RequestEvent(1000.0, ADAPTER, adapter, tenant="t", base_model="m", seen=1001.0))
        fleet.run()
        engines = {key for key in ("h/e0", "h/e1") if adapter in fleet.standins.holds(key)}
        assert engines == holders, adapter
        assert {key for key, state in session.core.book.engines.items() if adapter in state.resident} == holders
        assert [outcome for _, outcome in fleet.outcomes] == ["miss"]  # served once, where the gateway sent it
        assert (session.counts.requests, session.counts.misses) == (1, 1)


def test_a_log_with_durations_counts_the_gpu_tier_as_one_without_them(tmp_path: Path) -> None:
    """Replayed on the stand-in engines (a log with durations), a hit outside the engine's GPU slots waits the copy
    into one and a hit inside counts as a GPU hit, as on the simulated engines (a log without): the cold time and
    the GPU hits of requests that do not overlap are the same either way."""
    inv = two_slot_inventory(tmp_path)  # one GPU slot, two in host memory
    timed = [
        RequestEvent(1000.0 + i, ADAPTER, f"a{(i // 2) % 2}", tenant="t", base_model="m", seen=1000.2 + i)
        for i in range(40)
    ]
    untimed = [dataclasses.replace(e, time=e.seen, seen=None) for e in timed]
    stand_ins, simulated = simulate(inv, "lru", timed), simulate(inv, "lru", untimed)
    assert 0 < stand_ins.gpu_hits < stand_ins.hits  # a0, a0, a1, a1, ...: hits both inside the slot and outside
    assert (stand_ins.hits, stand_ins.gpu_hits) == (simulated.hits, simulated.gpu_hits)
    assert stand_ins.cold_ms_paid == pytest.approx(simulated.cold_ms_paid)


def test_replay_from_log_lines_counts_prefetches_used_and_wasted_as_the_engines_did(tmp_path: Path) -> None:
    """Requests that overlap for seconds: the book, learning each at its end, counts prefetches used that loaded
    nothing (a running request had brought the adapter) and wasted that a request it had not read yet used.
    Replay reports what the stand-in engines did with each load ahead of demand — its use by the first request
    after it, the load time that saved, its eviction unused — not what the book believed."""
    inv = make_inventory(tmp_path, adapters=6, engines=[{"kind": "vllm", "max_loras": 1, "max_cpu_loras": 3}])
    rng, events, at = random.Random(5), [], 1000.0
    for _ in range(40):
        for step in ("a0", "a1", "a2", "a3"):
            adapter = step if rng.random() < 0.8 else rng.choice(["a4", "a5"])
            seen = at + rng.uniform(0.05, 2.0)
            events.append(RequestEvent(at, ADAPTER, adapter, tenant="t", base_model="m", seen=seen))
            at += rng.uniform(0.1, 0.8)
    sim = Simulation(inv, "markov", events)
    result, book, engines = sim.run(), sim.session.counts, sim.standins
    assert result.prefetch_loads > 0
    truth = (engines.prefetch_used, engines.wasted_prefetches, engines.cold_ms_avoided)
    assert (result.prefetch_used, result.wasted_prefetches, result.cold_ms_avoided) == truth
    assert (book.prefetch_used, book.wasted_prefetches) != truth[:2]  # the book's belief, here wrong both ways
    assert truth[0] + truth[1] <= result.prefetch_loads and truth[0] <= result.hits + result.late
