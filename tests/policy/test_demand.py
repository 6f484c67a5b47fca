"""The demand model's documented rules, each pinned: popularity halving on a request clock, the long memory,
workflow priors, evidence before prediction, gap quantiles, periods."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lorafleet.policy.demand import AgedCounts, DemandModel, GapHistory


def period_of(demand: DemandModel, adapter: str) -> float | None:
    rhythm = demand.rhythm(adapter)
    return None if rhythm is None else rhythm[0]


def test_aged_counts_halve_every_half_life_observations() -> None:
    counts = AgedCounts(half_life=10)
    counts.add("a")
    for _ in range(10):
        counts.add("b")
    # "a" was added 10 observations ago: its count is worth half of one fresh observation now.
    assert counts.counts["a"] / counts.weight == pytest.approx(0.5 / counts.step**0, rel=1e-9)


def test_aged_counts_rescale_keeps_ratios() -> None:
    counts = AgedCounts(half_life=0.01)  # weight grows by 2^100 per add: rescaled almost every time
    counts.add("a")
    counts.add("b")
    counts.add("a")
    assert math.isfinite(counts.weight) and counts.weight <= 1e80
    assert counts.counts["a"] > counts.counts["b"]


def test_popularity_halves_every_half_life_requests() -> None:
    demand = DemandModel(half_life=10)
    demand.observe("t", "a")
    first = demand.popularity["a"] / demand.weight
    for _ in range(10):
        demand.observe("t", "b")
    assert demand.popularity["a"] / demand.weight == pytest.approx(first / 2, rel=1e-9)
    assert demand.clock == 11


def test_share_blends_short_and_long_memory_equally_and_caps_at_one() -> None:
    demand = DemandModel(half_life=10)
    for _ in range(2000):
        demand.observe("t", "a")
    assert demand.share("a") == pytest.approx(1.0, abs=0.02)  # all traffic: share about 1, never above
    assert demand.share("a") <= 1.0
    for _ in range(100):  # a burst of something else: the short memory forgets "a", the long one does not
        demand.observe("t", "b")
    assert 0.35 < demand.share("a") < 0.65
    assert demand.share_weights()[0] > 0 and demand.share_weights()[1] > 0
    assert demand.share("never") == 0.0


def test_a_declared_workflow_predicts_from_the_first_request_and_fades() -> None:
    demand = DemandModel(workflows={"t": [["code", "review", "sql"]]})
    assert demand.next_after("t", "code") == [("review", 1.0)]
    assert demand.next_after("t", "review") == [("sql", 1.0)]
    assert demand.next_after("t", "sql") == [("code", 1.0)]  # a workflow that ends runs again, from its head
    assert demand.next_after("other", "code") == []  # another tenant's workflow is not this one's
    for _ in range(20):
        demand.observe("t", "code")
        demand.observe("t", "docs")
    ranked = demand.next_after("t", "code")
    assert ranked[0][0] == "docs" and ranked[0][1] > 0.8  # observations outweigh the prior
    assert sum(p for _, p in demand.next_after("t", "code", limit=5)) == pytest.approx(1.0)


def test_a_one_step_or_circular_workflow_predicts_no_repeat_of_its_own_step() -> None:
    demand = DemandModel(workflows={"t": [["solo"], ["plan", "tool", "plan"]]})
    assert demand.next_after("t", "solo") == []
    assert demand.next_after("t", "plan") == [("tool", 1.0)]  # the loop already leads back: no plan -> plan


def test_no_prediction_before_enough_evidence() -> None:
    demand = DemandModel(min_evidence=5)
    for _ in range(4):
        demand.observe("t", "a")
        demand.observe("t", "b")
    assert demand.next_after("t", "a") == []  # 4 observations of a -> b: not enough
    demand.observe("t", "a")
    demand.observe("t", "b")
    assert demand.next_after("t", "a")[0][0] == "b"


def test_transitions_are_per_tenant_and_skip_tenantless_requests() -> None:
    demand = DemandModel(min_evidence=1)
    demand.observe("t1", "a")
    demand.observe("t2", "x")
    demand.observe("t1", "b")
    demand.observe(None, "z")
    assert demand.next_after("t1", "a") == [("b", 1.0)]
    assert demand.next_after("t2", "x") == []
    assert (None, "z") not in demand.transitions


def test_tenant_mix_and_share() -> None:
    demand = DemandModel(half_life=1000)
    for adapter in ["a", "a", "a", "b"]:
        demand.observe("t", adapter)
    assert demand.tenant_mix("t", "a") == pytest.approx(0.75, rel=0.01)
    assert demand.tenant_mix("nobody", "a") == 0.0
    demand.observe("u", "c")
    assert demand.tenant_share("t") > demand.tenant_share("u") > 0


def test_gap_quantiles_need_three_gaps() -> None:
    demand = DemandModel()
    for t in (0.0, 1.0):
        demand.observe("t", "a", t)  # a repeat: the gap to the next step runs from the latest call
    demand.observe("t", "b", 2.0)  # gap after a: 1 s
    assert demand.gap_quantile("t", "a") is None
    for start in (10.0, 20.0):
        demand.observe("t", "a", start)
        demand.observe("t", "b", start + 3.0)
    assert demand.gap_quantile("t", "a", 0.0) == 1.0
    assert demand.gap_quantile("t", "a", 0.99) == 3.0
    assert demand.next_within("t", "a", 0.0, 2.0) == pytest.approx(1 / 3)  # gaps after a: 1, 3, 3


def test_gap_history_keeps_the_last_few_sorted() -> None:
    history = GapHistory(size=3)
    for gap in (5.0, 1.0, 3.0, 2.0):
        history.add(gap)
    assert history.sorted == [1.0, 2.0, 3.0] and len(history) == 3  # 5.0 was the oldest
    assert history.quantile(0.0) == 1.0 and history.quantile(0.99) == 3.0
    assert history.within(0.0, 1.5) == pytest.approx(1 / 3)  # of the three, one gap is at most 1.5 s
    assert history.within(10.0, 1.0) == 0.25  # later than ever seen


def test_a_regular_adapter_has_a_period_an_irregular_one_none() -> None:
    demand = DemandModel()
    for i in range(6):
        demand.observe("cron", "timer", i * 60.0)
        demand.observe("human", "chat", [0, 5, 100, 110, 400, 1000][i])
    assert period_of(demand, "timer") == 60.0
    assert period_of(demand, "chat") is None
    assert period_of(demand, "unknown") is None
    few = DemandModel()
    for i in range(4):  # three gaps: not enough to call it regular
        few.observe("cron", "timer", i * 60.0)
    assert period_of(few, "timer") is None
    assert demand.adapter_next_within("timer", 5 * 60.0 + 30, 40.0) == 1.0
    assert few.adapter_next_within("timer", 200.0, 100.0) == 0.0


def test_an_adapters_gaps_run_between_arrivals_not_the_lines_written_at_each_requests_end() -> None:
    """A timer every 60 s whose requests take 1-30 s: learned at each end, the lines are 32-107 s apart (no
    rhythm); the arrivals keep the period, and the next one is expected a period after the last arrival."""
    demand = DemandModel()
    for i, duration in enumerate([1.0, 25.0, 3.0, 30.0, 2.0, 20.0]):
        arrival = 100.0 + 60.0 * i
        demand.observe("cron", "timer", arrival + duration, arrival)
    assert period_of(demand, "timer") == 60.0
    assert demand.adapter_last["timer"] == 400.0
    assert demand.adapter_next_within("timer", 430.0, 25.0) == 0.0  # due at 460, not within 455
    assert demand.adapter_next_within("timer", 430.0, 35.0) == 1.0
    by_lines = DemandModel()
    for i, duration in enumerate([1.0, 25.0, 3.0, 30.0, 2.0, 20.0]):
        by_lines.observe("cron", "timer", 100.0 + 60.0 * i + duration)
    assert period_of(by_lines, "timer") is None


def test_overlapping_requests_learned_out_of_arrival_order_count_a_gap_of_zero_and_keep_the_latest_arrival() -> None:
    """Two requests of one adapter in flight together: the later arrival's line can come first. The gap between
    them counts as 0 s (a burst, no rhythm), and the adapter's last arrival stays the later one."""
    demand = DemandModel()
    demand.observe("t", "x", 10.0, 9.0)
    demand.observe("t", "x", 12.0, 5.0)  # arrived at 5 s, before the one learned first
    assert demand.adapter_last["x"] == 9.0
    assert demand.adapter_gaps["x"].sorted == [0.0]


def test_four_gaps_are_enough_for_a_period_and_for_the_chance_it_comes_within_a_window() -> None:
    """The two rules read the same evidence: where `period` first sees a rhythm, `adapter_next_within` does too."""
    demand = DemandModel()
    for i in range(5):  # four gaps of 60 s
        demand.observe("cron", "timer", i * 60.0)
    assert period_of(demand, "timer") == 60.0
    assert demand.adapter_next_within("timer", 4 * 60.0 + 30, 40.0) == 1.0


def test_the_fleet_arrival_gap_is_a_moving_average() -> None:
    demand = DemandModel()
    demand.observe("t", "a", 0.0)
    demand.observe("t", "a", 2.0)
    assert demand.arrival_gap == 2.0  # the first gap is taken as it is
    demand.observe("t", "a", 3.0)
    assert demand.arrival_gap == pytest.approx(2.0 + 0.01 * (1.0 - 2.0))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from("abcdef"), min_size=1, max_size=200), st.integers(1, 5))
def test_the_leading_successors_are_exactly_the_largest_counts(sequence: list[str], limit: int) -> None:
    model = DemandModel(half_life=7.0, min_evidence=1.0, workflows={"t": [["a", "b"], ["a", "c"], ["c", "d"]]})
    for step in sequence:
        model.observe("t", step)
    for adapter, row in ((k[1], r) for k, r in model.transitions.items()):
        total = sum(row.values())
        expected = sorted(row.values(), reverse=True)[:limit]
        got = model.next_after("t", adapter, limit=limit)
        assert [p for _, p in got] == pytest.approx([w / total for w in expected])
        assert len({a for a, _ in got}) == len(got)


def test_the_period_is_the_shortest_recent_gap_and_may_be_under_a_second() -> None:
    demand = DemandModel()
    for t in (0.0, 60.0, 121.0, 180.5, 240.5, 301.0):  # gaps 60, 61, 59.5, 60, 60.5
        demand.observe("cron", "timer", t)
    for i in range(6):
        demand.observe("poller", "fast", i * 0.5)
    assert period_of(demand, "timer") == 59.5
    assert period_of(demand, "fast") == 0.5


def test_a_period_allows_a_spread_of_half_the_median() -> None:
    demand = DemandModel()
    for t in (0.0, 8.0, 18.0, 28.0, 40.0, 50.0):  # gaps 8, 10, 10, 12, 10: spread 4 of median 10
        demand.observe("cron", "loose", t)
    assert period_of(demand, "loose") == 8.0


def fired(demand: DemandModel, calls: int = 3, apart: float = 0.4, every: float = 60.0, runs: int = 6) -> None:
    """A timer firing every `every` s from 100 s, making `calls` calls `apart` s apart each time (a batch job's
    run), in a fleet asked for something else every 0.1 s."""
    job = [100.0 + run * every + call * apart for run in range(runs) for call in range(calls)]
    busy = [i * 0.1 for i in range(int(job[-1] * 10) + 1)]
    for at, adapter in sorted([(t, "job") for t in job] + [(t, "chat") for t in busy]):
        demand.observe("cron" if adapter == "job" else "human", adapter, at)


def test_a_timer_making_several_calls_a_run_has_the_rhythm_of_its_runs_and_its_last_run_start() -> None:
    """Three calls 0.4 s apart every 60 s: between calls the gaps are 0.4 and 59.2 s, no rhythm; between the runs'
    starts, 60 s. The return is timed from the latest run's start (400 s), not its last call (400.8 s)."""
    alone = DemandModel()
    fired(alone)
    assert alone.rhythm("job") is None  # every request a run of its own
    grouped = DemandModel()
    grouped.run_horizon = 10.0  # ten requests' time at the fleet's rate: about a second
    fired(grouped)
    assert grouped.rhythm("job") == (pytest.approx(60.0), pytest.approx(400.0))
    assert grouped.adapter_last["job"] == pytest.approx(400.8)


def test_calls_are_one_run_only_while_closer_than_the_horizons_time() -> None:
    """The run's bound is the time `run_horizon` requests take at the fleet's rate: with it under the 0.4 s
    between the job's calls, each call is a run of its own (no rhythm)."""
    short = DemandModel()
    short.run_horizon = 2.0  # about 0.2 s
    fired(short)
    assert short.rhythm("job") is None
    assert len(short.run_gaps["job"]) == 16  # 18 calls, a run each (the last 16 gaps kept)


def test_calls_at_one_instant_are_one_run_even_before_the_fleets_rate_is_known() -> None:
    """Two calls at the same instant, the first requests seen (the fleet's mean gap still 0 s): a gap of 0 s never
    starts a run."""
    demand = DemandModel()
    demand.run_horizon = 5.0
    demand.observe("cron", "job", 10.0)
    demand.observe("cron", "job", 10.0)
    assert demand.arrival_gap == 0.0 and "job" not in demand.run_gaps
    assert demand.run_start["job"] == 10.0


def test_a_single_call_timer_has_the_same_rhythm_whether_calls_are_grouped_or_not() -> None:
    """Its gaps (about 60 s, the fleet's mean gap here) all exceed half that: each call is a run."""
    for horizon in (0.0, 0.5):
        demand = DemandModel()
        demand.run_horizon = horizon
        for t in (0.0, 60.0, 121.0, 180.5, 240.5, 301.0):
            demand.observe("cron", "timer", t)
        assert demand.rhythm("timer") == (59.5, 301.0)


def test_runs_of_calls_at_random_are_no_rhythm() -> None:
    """An adapter asked for in bursts at irregular times: its runs' starts are as irregular."""
    demand = DemandModel()
    demand.run_horizon = 5.0
    for start in (0.0, 30.0, 130.0, 150.0, 400.0, 420.0, 900.0):
        for call in range(3):
            demand.observe("human", "chat", start + call * 0.4)
    assert demand.rhythm("chat") is None


def test_the_long_memory_is_32_times_the_short_one() -> None:
    demand = DemandModel(half_life=50.0)
    assert demand.long_popularity.rate == pytest.approx(math.log(2) / (50.0 * 32))


# the second-order context -----------------------------------------------------------------------------------
def tool_cycle(rounds: int) -> list[str]:
    """A planner between tools; the next tool is set by the last one (t1 -> t2 -> t3 -> t1), not by the planner."""
    tools = ["t1", "t2", "t3"]
    return [a for i in range(rounds) for a in ("plan", tools[i % 3])]


def test_the_next_tool_follows_the_last_tool_not_the_planner_between() -> None:
    demand = DemandModel()
    for i, adapter in enumerate(tool_cycle(60)):  # ends on t3
        demand.observe("t", adapter, float(i))
    demand.observe("t", "plan", 200.0)
    first = dict(demand.next_after("t", "plan", limit=3))
    assert all(p == pytest.approx(1 / 3, abs=0.05) for p in first.values())  # the planner alone: any tool
    (best, p), *_ = demand.successors("t", "plan")
    assert best == "t1" and p > 0.7  # after t3 -> plan: t1
    demand.observe("t", "t1", 201.0)
    demand.observe("t", "plan", 202.0)
    assert demand.successors("t", "plan")[0][0] == "t2"


def test_a_context_is_weighed_against_the_first_order_by_its_evidence() -> None:
    """p = (n2·p2 + k·p1) / (n2 + k): the context's n2 moves against the first order's `context_prior` k."""
    demand = DemandModel(half_life=1e12, min_evidence=1.0, context_prior=2.0)  # no decay: plain counts
    for i, adapter in enumerate(["x", "a", "b", "y", "a", "c", "x", "a", "b", "x", "a"]):
        demand.observe("t", adapter, float(i))
    # a was followed by b, c, b (p1: b 2/3, c 1/3); after x -> a: b, b (n2 = 2, p2: b 1)
    got = dict(demand.successors("t", "a"))
    assert got["b"] == pytest.approx((2 * 1.0 + 2.0 * 2 / 3) / 4)
    assert got["c"] == pytest.approx((2 * 0.0 + 2.0 * 1 / 3) / 4)


def test_an_unseen_context_or_a_request_not_the_latest_predicts_as_the_first_order() -> None:
    demand = DemandModel(min_evidence=1.0)
    for i, adapter in enumerate(["x", "a", "b", "y", "a", "c", "z", "a"]):  # z -> a never seen before
        demand.observe("t", adapter, float(i))
    assert demand.successors("t", "a") == demand.next_after("t", "a", limit=3)
    assert demand.successors("t", "b") == demand.next_after("t", "b", limit=3)  # b is not the latest: no context
    assert demand.successors("nobody", "a") == []


def test_second_order_counts_survive_a_rescale() -> None:
    demand = DemandModel(half_life=0.05)  # the weight grows by 2^20 per request: rescaled every few requests
    for i, adapter in enumerate(tool_cycle(30)):
        demand.observe("t", adapter, float(i))
    assert demand.weight <= 1e80
    assert all(math.isfinite(v) and v > 0 for v in demand.transition2_totals.values())
    assert sum(p for _, p in demand.successors("t", "t3")) == pytest.approx(1.0)


def test_a_context_long_unseen_is_dropped_at_a_rescale() -> None:
    demand = DemandModel(half_life=1.0)  # rescaled every 266 requests; 30 half-lives are 30 requests
    for i, adapter in enumerate(["x", "a", "b"] * 5):
        demand.observe("t", adapter, float(i))
    assert ("t", "x", "a") in demand.transitions2
    for i, adapter in enumerate(["c", "d"] * 200):  # x -> a is not seen again
        demand.observe("t", adapter, 100.0 + i)
    assert ("t", "x", "a") not in demand.transitions2 and ("t", "x", "a") not in demand.transition2_seen
    assert ("t", "c", "d") in demand.transitions2  # the recent ones stay
    assert ("t", "a") in demand.transitions  # the first order keeps everything, as before


def test_a_tenants_share_is_its_aged_share_of_all_requests() -> None:
    demand = DemandModel(half_life=50)
    for i in range(2000):
        demand.observe("small" if i % 10 == 0 else "big", "a")
    assert demand.tenant_share("small") == pytest.approx(0.1, abs=0.03)  # one request in ten
    assert demand.tenant_share("big") == pytest.approx(0.9, abs=0.05)
    assert demand.tenant_share("nobody") == 0.0


def test_requests_at_one_instant_are_a_burst_not_a_period() -> None:
    demand = DemandModel()
    for _ in range(6):  # five gaps of 0 s: no rhythm to prefetch on
        demand.observe("t", "burst", 1000.0)
    assert period_of(demand, "burst") is None


def test_a_second_order_context_last_seen_more_than_30_half_lives_ago_is_dropped_at_the_rescale() -> None:
    """Contexts are kept while their aged weight is at least 2^-30 of a request's now: with a half-life of one
    request, the rescale at request 266 keeps the one last added at request 236 and drops the one of 235."""
    d = DemandModel(half_life=1.0)
    filler = ["p", "q"]
    for i in range(230):
        d.observe("f", filler[i % 2])
    for tenant, adapter in (("u", "x"), ("t", "x"), ("u", "y"), ("t", "y"), ("u", "z"), ("t", "z")):
        d.observe(tenant, adapter)  # requests 231-236: u's context (x, y) at 235, t's at 236
    assert d.clock == 236 and {("t", "x", "y"), ("u", "x", "y")} <= set(d.transitions2)
    for i in range(30):
        d.observe("f", filler[i % 2])
    assert d.clock == 266 and d.weight == 1.0  # rescaled at this request
    assert ("t", "x", "y") in d.transitions2 and ("u", "x", "y") not in d.transitions2
    assert ("u", "x", "y") not in d.transition2_totals and ("u", "x", "y") not in d.transition2_seen


def test_a_period_needs_the_spread_of_its_gaps_within_regularity_times_their_median() -> None:
    """Gaps 10, 10, 14, 16: median 14, 10th-90th percentile spread 6, within half of 14 — a period, the shortest
    gap; gaps 10, 10, 14, 20: spread 10, more than 7 — none (with the spread weighed against the smaller gap, or
    against the median doubled rather than halved, each came out the other way)."""
    for gaps, period in (((10.0, 10.0, 14.0, 16.0), 10.0), ((10.0, 10.0, 14.0, 20.0), None)):
        demand = DemandModel()
        now = 0.0
        demand.observe("t", "timer", now)
        for gap in gaps:
            now += gap
            demand.observe("t", "timer", now)
        assert period_of(demand, "timer") == period, gaps


def test_one_short_gap_among_ten_regular_ones_leaves_the_period_its_shortest_gap() -> None:
    """The spread is taken between the 10th and 90th percentiles, so one outlier among ten gaps does not break a
    period (spread 0 ≤ half of 10): the period is the shortest gap, the outlier (measured against the lowest gap
    itself, the spread of 8 would exceed 5: no period)."""
    demand = DemandModel()
    now = 0.0
    demand.observe("t", "timer", now)
    for gap in (2.0, *[10.0] * 9):
        now += gap
        demand.observe("t", "timer", now)
    assert period_of(demand, "timer") == 2.0


def test_a_tenants_mix_survives_the_rescale_that_leaves_its_activity_under_one_request() -> None:
    """A tenant's mix is each adapter's share of its own decayed traffic, whatever that traffic weighs: after the
    rescale at request 266 (half-life of one request) a tenant last seen at request 260 weighs 2^-6 of a request,
    and its one adapter is still all of its mix (any positive activity counts, not only a request's worth)."""
    d = DemandModel(half_life=1.0)
    for i in range(259):
        d.observe("f", ("p", "q")[i % 2])
    d.observe("t", "a")
    for i in range(6):
        d.observe("f", ("p", "q")[i % 2])
    assert d.clock == 266 and d.weight == 1.0  # rescaled at this request
    assert 0.0 < d.tenant_activity["t"] < 1.0
    assert d.tenant_mix("t", "a") == pytest.approx(1.0) and d.tenant_mix("t", "p") == 0.0


def test_past_max_tenants_the_least_recently_active_is_forgotten_whole_and_a_declared_one_never() -> None:
    """A log whose tenant field is a user id names a new tenant per request: what the model keeps per tenant is
    bounded. The tenant forgotten is the least recently active (a request makes a tenant the most recent), every
    table forgets it, and a tenant the inventory declares workflows for keeps its priors however idle."""
    model = DemandModel(half_life=50.0, workflows={"declared": [["a", "b"]]})
    model.max_tenants = 3

    def request(tenant: str, *adapters: str) -> tuple[str, set[str]] | None:
        forgotten = None
        for i, adapter in enumerate(adapters):
            forgotten = model.remember(tenant, adapter) or forgotten
            model.observe(tenant, adapter, now=float(len(model.tenants) * 10 + i))
        return forgotten

    assert request("declared", "a", "b") is None
    for tenant in ("t1", "t2", "t3"):
        assert request(tenant, "a", "b", "c", "a", "b", "c") is None
    assert request("t1", "a") is None  # t1 is the most recent now: t2 goes next
    assert request("t4", "c", "a") == ("t2", {"a", "b", "c"})
    tables = [model.tenant_activity, model.last, model.before, model.last_time, model.repeats]
    keyed = [model.tenant_adapter, model.transitions, model.transition_totals, model.transition_seen, model.leaders]
    keyed += [model.gaps, model.transitions2, model.transition2_totals, model.transition2_seen]
    assert all("t2" not in table for table in tables)
    assert all(key[0] != "t2" for table in keyed for key in table)
    assert all("t1" in table and "t3" in table for table in tables)  # the others as they were
    assert ("t3", "a") in model.transitions and ("t2", "a") not in model.transitions
    assert list(model.tenants) == ["t3", "t1", "t4"] and "declared" not in model.tenants
    assert [c for c, _ in model.next_after("declared", "a")] == ["b"]  # its prior, kept
