"""A core on a new inventory (a reload): what it keeps of each engine that stayed, and what it drops."""

from __future__ import annotations

from pathlib import Path

from lorafleet.drive.policies import make_policy
from lorafleet.policy.core import PolicyCore
from tests.policy.builders import TWO_VLLM, make_inventory


def test_a_reload_keeps_what_each_engine_that_stayed_had_and_drops_the_engine_that_left(tmp_path: Path) -> None:
    core = PolicyCore(make_inventory(tmp_path, adapters=6, engines=TWO_VLLM), make_policy("lru"))
    for engine in ("h/e0", "h/e1"):
        core.book[engine].admit("a0", core.sizes["a0"])
        core.book[engine].start_load("a1", core.sizes["a1"])
        core.touch_credit[engine] = 3.0
        core.loading_reason[(engine, "a1")] = "prefetch"
        core.claimed.add((engine, "a1"))
        core.unavailable.add((engine, "a5"))
    one = make_inventory(tmp_path, adapters=6, engines=TWO_VLLM[:1], name="one.yaml")  # h/e1 left the fleet
    new = core.rebuilt(one)
    assert list(new.book.engines) == ["h/e0"]
    assert new.book["h/e0"] is core.book["h/e0"]  # the same budget: its book, as it was
    assert new.touch_credit == {"h/e0": 3.0}
    assert new.loading_reason == {("h/e0", "a1"): "prefetch"}
    assert new.claimed == {("h/e0", "a1")} and new.unavailable == {("h/e0", "a5")}
    assert new.demand is core.demand and new.policy is core.policy and new.policy.core is new  # bound anew


def test_an_engine_whose_budget_changed_starts_an_empty_book(tmp_path: Path) -> None:
    core = PolicyCore(make_inventory(tmp_path, adapters=6, engines=TWO_VLLM), make_policy("lru"))
    core.book["h/e0"].admit("a0", core.sizes["a0"])
    core.book["h/e1"].admit("a0", core.sizes["a0"])
    bigger = [TWO_VLLM[0], {"kind": "vllm", "max_loras": 1, "max_cpu_loras": 6}]
    new = core.rebuilt(make_inventory(tmp_path, adapters=6, engines=bigger, name="bigger.yaml"))
    assert new.book["h/e0"] is core.book["h/e0"]
    assert new.book["h/e1"] is not core.book["h/e1"] and not new.book["h/e1"].resident


def test_the_baselines_keep_what_they_learned_on_the_engines_that_stayed(tmp_path: Path) -> None:
    """A reload, or pods found or gone on Kubernetes, rebinds every policy: lfu's and wtinylfu's counts and arc's
    lists are what they learned, not a fresh start (under autoscaling they never knew more than minutes)."""
    from lorafleet.policy.baselines import capacity
    from lorafleet.policy.events import ADAPTER, RequestEvent

    inventory = make_inventory(tmp_path, adapters=6, engines=TWO_VLLM)
    three = [*TWO_VLLM, {"kind": "vllm", "max_loras": 1, "max_cpu_loras": 4}]
    cores = {name: PolicyCore(inventory, make_policy(name)) for name in ("lfu", "arc", "wtinylfu")}
    for core in cores.values():
        for adapter in ("a0", "a0", "a1"):
            event = RequestEvent(1.0, ADAPTER, adapter, "t")
            core.on_request(1.0, event, "h/e0")
    grown = make_inventory(tmp_path, adapters=6, engines=three, name="three.yaml")  # a pod came
    rebuilt = {name: core.rebuilt(grown) for name, core in cores.items()}
    lfu, arc, tiny = (rebuilt[n].policy for n in ("lfu", "arc", "wtinylfu"))
    slots = sum(capacity(state) for state in rebuilt["lfu"].book.engines.values())
    assert (lfu.counts.get("a0"), lfu.counts.get("a1")) == (2.0, 1.0)  # type: ignore[attr-defined]
    assert (tiny.counts.get("a0"), tiny.counts.get("a1")) == (2.0, 1.0)  # type: ignore[attr-defined]
    assert lfu.counts.period == 10 * slots > 10 * 8  # type: ignore[attr-defined]  # the period follows the fleet
    assert list(arc.lists["h/e0"].t2) == ["a0"] and list(arc.lists["h/e0"].t1) == ["a1"]  # type: ignore[attr-defined]
    assert not arc.lists["h/e2"].t1 and not arc.lists["h/e2"].t2  # type: ignore[attr-defined]  # a new engine: fresh
