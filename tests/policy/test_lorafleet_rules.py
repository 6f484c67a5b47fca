"""The lorafleet policy's newer rules, each pinned: following the better shadow expert."""

from __future__ import annotations

from pathlib import Path

from lorafleet.policy.core import PolicyCore
from lorafleet.policy.lorafleet import LorafleetPolicy
from tests.policy.fleet import make_inventory

ENGINE = [{"kind": "vllm", "max_loras": 2, "max_cpu_loras": 5}]


def core_with(tmp_path: Path) -> tuple[PolicyCore, LorafleetPolicy]:
    policy = LorafleetPolicy()
    core = PolicyCore(make_inventory(tmp_path, adapters=6, engines=ENGINE), policy)
    state = core.book["h/e0"]
    for name in ("a0", "a1", "a2", "a3", "a4"):
        state.admit(name, 1)
    for _ in range(50):  # a0 is by far the most popular, and the least recently used
        core.demand.observe("t", "a0", 1.0)
    return core, policy


def test_following_the_lru_expert_when_recency_has_been_serving_better(tmp_path: Path) -> None:
    core, policy = core_with(tmp_path)
    state = core.book["h/e0"]
    policy.evidence["h/e0"] = [5.0, 1.0]
    assert list(policy.victim_order(state, 2.0)) == list(state.resident)  # plain LRU: a0 first
    policy.evidence["h/e0"] = [1.0, 5.0]
    assert next(iter(policy.victim_order(state, 2.0))) != "a0"


def test_the_shadow_credits_lru_for_a_miss_it_would_have_hit(tmp_path: Path) -> None:
    _core, policy = core_with(tmp_path)
    for name in ("a5", "a1"):
        policy._shadow("h/e0", name, "hit")
    policy._shadow("h/e0", "a5", "miss")  # a5 is near the top of LRU's stack: LRU would have hit
    lru, value = policy.evidence["h/e0"]
    assert lru > 0 and lru > value - 2  # credited once to LRU
    before = policy.evidence["h/e0"][1]
    for name in ("b1", "b2", "b3", "b4", "b5", "b6"):
        policy._shadow("h/e0", name, "miss")  # pushes a1 out of LRU's reach (5 slots)
    policy._shadow("h/e0", "a1", "hit")  # we hit what LRU would have dropped: the value order is credited
    assert policy.evidence["h/e0"][1] > before * 0.9
