"""The predictor's touches go to the steers that gain most: an eviction (or a prefetch's displacement) on an engine
that evicts its own least recently used is steered by touches only where it gains, per touch, at least the worth
of a touch lately times how empty the engine's touch credit is (`LorafleetPolicy._worth_touches`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lorafleet.policy.core import DEMAND, EVICT, LOAD, TOUCH, PolicyCore, credit_cap
from lorafleet.policy.predictive import LorafleetPolicy
from tests.policy.builders import make_inventory

E = "h/e0"
NOW = 2.0


def fleet(tmp_path: Path, engine: dict[str, object] | None = None) -> tuple[PolicyCore, LorafleetPolicy, float]:
    """One engine holding a0..a4 (a0 the least recently used), a0 by far the most popular, a1..a4 never asked for;
    a full touch credit. Returns what evicting a1 (the policy's choice) rather than a0 (the engine's own victim)
    gains in the chance of a request within the horizon."""
    engine = engine or {"kind": "vllm", "max_loras": 2, "max_cpu_loras": 5}
    policy = LorafleetPolicy()
    core = PolicyCore(make_inventory(tmp_path, adapters=6, engines=[engine]), policy)
    state = core.book[E]
    for name in ("a0", "a1", "a2", "a3", "a4"):
        state.admit(name, 1)
    for _ in range(50):
        core.demand.observe("t", "a0", 1.0)
    core.touch_credit[E] = credit_cap(state)
    gain = policy.score("a0", NOW) - policy.score("a1", NOW)
    assert gain > 0.1
    return core, policy, gain


def first_victim(core: PolicyCore, policy: LorafleetPolicy) -> str:
    return next(iter(policy.victim_order(core.book[E], NOW)))


def test_a_full_credit_pays_for_any_steer_that_gains(tmp_path: Path) -> None:
    core, policy, gain = fleet(tmp_path)
    policy.touch_worth[E] = 10 * gain  # steers have been worth far more per touch lately
    assert first_victim(core, policy) == "a1"


def test_with_little_credit_only_a_steer_worth_more_than_touches_lately_is_paid(tmp_path: Path) -> None:
    core, policy, gain = fleet(tmp_path)
    core.touch_credit[E] = 1.0  # one touch of five banked: a steer must gain 4/5 of the worth of a touch lately
    policy.touch_worth[E] = 2 * gain
    assert first_victim(core, policy) == "a0"  # the engine's own victim: no touch
    policy.touch_worth[E] = 1.1 * gain  # 4/5 of it (after this steer's part in the average) is under the gain
    assert first_victim(core, policy) == "a1"
    core.touch_credit[E] = 0.99  # not a whole touch to spend
    policy.touch_worth[E] = 0.0
    assert first_victim(core, policy) == "a0"


def test_the_worth_of_a_touch_follows_the_steers_offered_per_touch(tmp_path: Path) -> None:
    core, policy, gain = fleet(tmp_path)
    policy.touch_worth[E] = 0.5
    first_victim(core, policy)
    assert policy.touch_worth[E] == pytest.approx(0.5 + policy.touch_pace * (gain - 0.5))  # one touch: a0's
    core.demand.observe("t", "a1", 1.5)  # now a2 goes first by value: two touches (a0 and a1)
    deeper = (policy.score("a0", NOW) - policy.score("a2", NOW)) / 2
    policy.touch_worth[E] = 0.5
    assert first_victim(core, policy) == "a2"
    assert policy.touch_worth[E] == pytest.approx(0.5 + policy.touch_pace * (deeper - 0.5))


def test_a_steer_that_gains_nothing_is_not_paid_from_a_part_filled_credit(tmp_path: Path) -> None:
    core, policy, _ = fleet(tmp_path)
    for _ in range(60):  # a1 is now worth more than a0: a steer to it would lose
        core.demand.observe("t", "a1", 1.5)
    experts = policy.experts[E]
    experts.tempo.evidence[:] = [5.0, 1.0]  # the fast side, by recency: a1 and a3 never asked for on the engine
    experts.pace.evidence[:] = [5.0, 1.0]
    for name in ("a0", "a2", "a4"):
        experts.requested(name)
    core.touch_credit[E] = 2.0
    policy.touch_worth[E] = 0.01
    assert first_victim(core, policy) == "a0"
    core.touch_credit[E] = credit_cap(core.book[E])
    assert first_victim(core, policy) == "a1"  # a full credit follows the expert's order all the same


def test_an_unpaid_steer_leaves_the_eviction_to_the_engine_and_to_no_experts_judgement(tmp_path: Path) -> None:
    core, policy, gain = fleet(tmp_path)
    core.touch_credit[E] = 1.0
    policy.touch_worth[E] = 10 * gain
    experts = policy.experts[E]
    assert list(policy.victim_order(core.book[E], NOW)) == ["a0", "a1", "a2", "a3", "a4"]  # the engine's own order
    assert experts.tempo.pending is None and experts.memory.pending is None


def displaced(core: PolicyCore, policy: LorafleetPolicy) -> list[tuple[str, str]]:
    return [(d.action, d.adapter) for d in policy._prefetch(NOW, E, "a5", None) if d.action != LOAD]


def test_a_prefetch_displaces_the_engines_own_victim_where_a_steer_is_not_worth_its_touches(tmp_path: Path) -> None:
    core, policy, gain = fleet(tmp_path)
    core.demand.observe("u", "a5", 1.5)
    policy.displace_margin = 1e9  # a5 is worth whatever it displaces
    core.touch_credit[E] = 1.0
    policy.touch_worth[E] = 10 * gain
    assert displaced(core, policy) == [(EVICT, "a0")]


def test_a_prefetch_steered_where_the_steer_is_worth_its_touches(tmp_path: Path) -> None:
    core, policy, gain = fleet(tmp_path)
    core.demand.observe("u", "a5", 1.5)
    policy.displace_margin = 1e9
    core.touch_credit[E] = 1.0
    policy.touch_worth[E] = 0.1 * gain
    assert displaced(core, policy) == [(TOUCH, "a0"), (EVICT, "a1")]


def test_no_prefetch_where_the_steer_is_not_worth_its_touches_and_the_engines_own_victim_is_worth_more(
    tmp_path: Path,
) -> None:
    core, policy, gain = fleet(tmp_path)
    core.demand.observe("u", "a5", 1.5)  # worth more than a1..a4, far less than a0
    core.touch_credit[E] = 1.0
    policy.touch_worth[E] = 10 * gain
    assert displaced(core, policy) == []
    assert not core.book[E].holds("a5") and core.book[E].holds("a0")


@pytest.mark.parametrize(
    "engine",
    [
        {"kind": "sglang", "max_loras_per_batch": 2, "max_loaded_loras": 5},  # unloads what it is told to
        {"kind": "vllm", "max_loras": 2, "max_cpu_loras": 5, "lora_budget_mb": 100},  # a byte budget
    ],
    ids=["sglang", "bytes"],
)
def test_where_no_touch_steers_an_eviction_the_order_is_the_policys_own(
    tmp_path: Path, engine: dict[str, object]
) -> None:
    core, policy, _ = fleet(tmp_path, engine)
    core.touch_credit[E] = 0.0  # no touch to spend: on vLLM the engine's own victim, a0, would go
    assert first_victim(core, policy) == "a1"


def test_a_steer_is_charged_only_the_touches_it_adds_to_what_the_engines_own_eviction_takes(tmp_path: Path) -> None:
    core, policy, _ = fleet(tmp_path)
    state = core.book[E]
    state.pins.add("a0")  # pinned: touched before any eviction; the engine's own victim is a1
    for _ in range(5):
        core.demand.observe("t", "a1", 1.5)  # a2 goes first by value: touching a0 and a1, one more than a1 takes
    gain = policy.score("a1", NOW) - policy.score("a2", NOW)
    policy.touch_worth[E] = 0.5
    assert first_victim(core, policy) == "a2"
    assert policy.touch_worth[E] == pytest.approx(0.5 + policy.touch_pace * (gain - 0.5))


def test_a_prefetch_never_displaces_the_adapter_just_asked_for(tmp_path: Path) -> None:
    core, policy, gain = fleet(tmp_path)
    core.demand.observe("u", "a5", 1.5)
    policy.displace_margin = 1e9
    core.touch_credit[E] = 1.0
    policy.touch_worth[E] = 10 * gain  # no steer: the engine's own victim, a0, would go, but a0 was just asked for
    assert [d for d in policy._prefetch(NOW, E, "a5", "a0") if d.action == EVICT] == []
    assert core.book[E].holds("a0")


def test_the_first_steer_judged_sets_the_worth_of_a_touch(tmp_path: Path) -> None:
    core, policy, gain = fleet(tmp_path)
    core.touch_credit[E] = 1.0
    assert first_victim(core, policy) == "a1"  # judged against its own gain: 4/5 of it
    assert policy.touch_worth[E] == pytest.approx(gain)


def demand_load(core: PolicyCore, policy: LorafleetPolicy) -> list[tuple[str, str]]:
    state = core.book[E]
    decisions = core.load(NOW, E, "a5", DEMAND, lambda: policy.victim_order(state, NOW), complete=True)
    return [(d.action, d.adapter) for d in decisions if d.action != LOAD]


@pytest.mark.parametrize(("worth", "paid"), [(0.1, True), (10.0, False)])
def test_the_steer_judged_is_the_one_the_credit_pays_for(tmp_path: Path, worth: float, paid: bool) -> None:
    """The order's first choice, a2, takes two touches (a0 and a1), more than the one the credit holds: the core
    pays for its preference within reach, a1, one touch; that is the steer judged."""
    core, policy, _ = fleet(tmp_path)
    for _ in range(10):
        core.demand.observe("t", "a1", 1.5)  # a1 between a0 and the never-asked a2..a4
    assert next(iter(policy.victim_order(core.book[E], NOW))) == "a2"  # a full credit: the order's own choice
    core.touch_credit[E] = 1.0
    one_touch = policy.score("a0", NOW) - policy.score("a1", NOW)
    policy.touch_worth[E] = worth * one_touch
    assert demand_load(core, policy) == ([(TOUCH, "a0"), (EVICT, "a1")] if paid else [(EVICT, "a0")])
    assert policy.touch_worth[E] == pytest.approx((worth + policy.touch_pace * (1 - worth)) * one_touch)


def test_no_steer_is_judged_where_the_order_chooses_the_engines_own_victim(tmp_path: Path) -> None:
    core, policy, _ = fleet(tmp_path)
    for name in ("a1", "a2", "a3", "a4"):
        for _ in range(60):
            core.demand.observe("t", name, 1.5)  # every other resident worth more than a0, the oldest
    core.touch_credit[E] = 1.0
    assert first_victim(core, policy) == "a0"
    assert E not in policy.touch_worth  # nothing to pay, nothing judged
