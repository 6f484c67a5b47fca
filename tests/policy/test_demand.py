"""The demand model's documented rules, each pinned: popularity halving on a request clock, the long memory,
workflow priors, evidence before prediction, gap quantiles, periods."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lorafleet.policy.demand import AgedCounts, DemandModel, GapHistory


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
    assert demand.period("timer") == 60.0
    assert demand.period("chat") is None
    assert demand.period("unknown") is None
    few = DemandModel()
    for i in range(4):  # three gaps: not enough to call it regular
        few.observe("cron", "timer", i * 60.0)
    assert few.period("timer") is None
    assert demand.adapter_next_within("timer", 5 * 60.0 + 30, 40.0) == 1.0
    assert few.adapter_next_within("timer", 200.0, 100.0) == 0.0


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
    assert demand.period("timer") == 59.5
    assert demand.period("fast") == 0.5


def test_a_period_allows_a_spread_of_half_the_median() -> None:
    demand = DemandModel()
    for t in (0.0, 8.0, 18.0, 28.0, 40.0, 50.0):  # gaps 8, 10, 10, 12, 10: spread 4 of median 10
        demand.observe("cron", "loose", t)
    assert demand.period("loose") == 8.0


def test_the_long_memory_is_32_times_the_short_one() -> None:
    demand = DemandModel(half_life=50.0)
    assert demand.long_popularity.rate == pytest.approx(math.log(2) / (50.0 * 32))
