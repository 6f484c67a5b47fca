"""The eviction experts' rules: when a challenger is followed, how a regret pair is opened and settled, decay,
expiry, the request order the LRU expert keeps, and how the two choices (recency or value; value's memory) nest."""

from __future__ import annotations

import pytest

from lorafleet.policy.experts import EvictionExperts, Regret


def regret(slots: int = 4, memory: float = 2.0) -> Regret:
    return Regret(slots, memory)


@pytest.mark.parametrize(
    ("challenger", "default", "follow"),
    [(5.0, 1.0, True), (3.0, 1.0, False), (1.0, 5.0, False), (0.0, 0.0, False), (1.0, 0.0, False), (2.0, 0.0, True)],
)
def test_the_challenger_is_followed_only_when_clearly_ahead(challenger: float, default: float, follow: bool) -> None:
    r = regret()
    r.evidence[:] = [challenger, default]
    assert r.follow_challenger() is follow  # ahead by more than one standard deviation of the settled count


def settle(challenger_followed: bool, first: str) -> list[float]:
    r = regret()
    if challenger_followed:
        r.evidence[:] = [9.0, 0.0]
    order = r.choose(["old", "x"], ["cheap", "old"], set())
    assert list(order) == (["old", "x"] if challenger_followed else ["cheap", "old"])
    r.evidence[:] = [0.0, 0.0]
    r.evicted("old" if challenger_followed else "cheap")
    r.requested(first)
    return r.evidence


def test_the_default_chose_wrong_when_its_victim_comes_back_first() -> None:
    assert settle(challenger_followed=False, first="cheap") == [1.0, 0.0]


def test_the_default_chose_well_when_the_adapter_it_spared_comes_first() -> None:
    assert settle(challenger_followed=False, first="old") == [0.0, 1.0]


def test_the_challenger_chose_wrong_when_its_victim_comes_back_first() -> None:
    assert settle(challenger_followed=True, first="old") == [0.0, 1.0]


def test_the_challenger_chose_well_when_the_adapter_it_spared_comes_first() -> None:
    assert settle(challenger_followed=True, first="cheap") == [1.0, 0.0]


def test_a_pair_settles_once_and_only_for_its_two_adapters() -> None:
    r = regret()
    r.choose(["old"], ["cheap"], set())
    r.evicted("cheap")
    r.requested("other")
    assert r.evidence == [0.0, 0.0]
    r.requested("cheap")
    r.requested("old")  # already settled: no second point
    r.requested("cheap")
    assert sum(r.evidence) == pytest.approx(1.0 * r.keep * r.keep)


def test_no_pair_when_the_experts_agree_or_the_victims_were_not_theirs() -> None:
    r = regret()
    r.choose(["same"], ["same"], set())
    r.evicted("same")
    r.choose(["old"], ["cheap"], set())
    r.forget_choice()  # a prefetch displaced something instead
    r.evicted("cheap")
    r.evicted("later")  # only the first victim after a choice counts
    for name in ("same", "old", "cheap", "later"):
        r.requested(name)
    assert r.evidence == [0.0, 0.0]
    assert not r.pairs


def test_pinned_adapters_are_never_the_other_experts_victim() -> None:
    r = regret()
    r.choose(["pinned", "old"], ["cheap"], {"pinned"})
    assert r.pending == ("old", False)


def test_points_decay_per_request_over_memory_turnovers() -> None:
    r = regret(slots=4, memory=2.0)
    r.evidence[:] = [8.0, 4.0]
    r.requested("a")
    assert r.evidence == [pytest.approx(8.0 * (1 - 1 / 8)), pytest.approx(4.0 * (1 - 1 / 8))]


def test_open_pairs_expire_after_memory_turnovers_of_evictions() -> None:
    r = regret(slots=1, memory=2.0)  # at most two open pairs
    for i in range(3):
        r.choose([f"spared{i}"], [f"evicted{i}"], set())
        r.evicted(f"evicted{i}")
    assert len(r.pairs) == 2 and "evicted0" not in r.by_adapter and "spared0" not in r.by_adapter
    r.requested("evicted0")  # expired: no point
    assert r.evidence == [0.0, 0.0]
    r.requested("evicted2")
    assert r.evidence[0] == pytest.approx(1.0)


def test_the_lru_expert_orders_by_request_and_puts_unseen_residents_first() -> None:
    e = EvictionExperts(4, 2.0)
    for name in ("b", "a", "c"):
        e.requested(name)
    e.loaded("p")  # a prefetch: recent by its load
    e.requested("b")
    assert e.by_recency(["a", "b", "c", "p", "restored"]) == ["restored", "a", "c", "p", "b"]
    e.evicted("c")
    assert e.by_recency(["a", "b", "p"]) == ["a", "p", "b"]


def test_value_is_followed_by_default_with_its_blended_memory() -> None:
    e = EvictionExperts(4, 2.0)
    e.requested("old")
    e.requested("new")
    order = e.choose(["old", "new"], blended=["blend1", "x"], short=["short1", "y"], pins=set())
    assert list(order) == ["blend1", "x"]
    assert e.value.pending == ("old", False)  # recency would have evicted the oldest
    assert e.memory.pending == ("short1", False)  # the short memory alone would have evicted short1
    e.evicted("blend1")  # both choices open a pair
    assert len(e.value.pairs) == 1 and len(e.memory.pairs) == 1


def test_the_short_memory_is_followed_when_clearly_ahead() -> None:
    e = EvictionExperts(4, 2.0)
    e.memory.evidence[:] = [9.0, 0.0]
    order = e.choose(["old"], blended=["blend1"], short=["short1"], pins=set())
    assert list(order) == ["short1"]
    assert e.memory.pending == ("blend1", True)


def test_while_recency_is_followed_the_memories_are_not_judged() -> None:
    e = EvictionExperts(4, 2.0)
    e.value.evidence[:] = [9.0, 0.0]
    order = e.choose(["old", "new"], blended=["blend1"], short=["short1"], pins=set())
    assert list(order) == ["old", "new"]
    assert e.value.pending == ("blend1", True) and e.memory.pending is None
    e.evicted("old")
    assert len(e.value.pairs) == 1 and not e.memory.pairs


def test_a_settled_pair_still_expires_cleanly() -> None:
    r = regret(slots=1, memory=1.0)  # one open pair at most
    r.choose(["spared0"], ["evicted0"], set())
    r.evicted("evicted0")
    r.requested("spared0")  # settled: spared0's list is gone, evicted0's still holds the pair
    r.choose(["spared1"], ["evicted1"], set())
    r.evicted("evicted1")  # the first pair expires: both of its names are looked up
    assert list(r.by_adapter) == ["evicted1", "spared1"]
