"""The eviction experts' rules: when a challenger is followed, how a regret pair is opened and settled, decay,
expiry, the request order the LRU expert keeps, and how the three choices (the steady or the fast side; the
steady side's memory; the fast side's quick memory or recency) nest."""

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


def test_the_steady_side_is_followed_by_default_with_its_blended_memory() -> None:
    e = EvictionExperts(4, 2.0)
    e.requested("old")
    e.requested("new")
    order = e.choose(["old", "new"], blended=["blend1", "x"], short=["short1", "y"], quick=["q1"], pins=set())
    assert list(order) == ["blend1", "x"]
    assert e.tempo.pending == ("q1", False)  # the fast side (quick popularity by default) would have evicted q1
    assert e.memory.pending == ("short1", False)  # the short memory alone would have evicted short1
    e.evicted("blend1")  # both realised choices open a pair
    assert len(e.tempo.pairs) == 1 and len(e.memory.pairs) == 1


def test_the_short_memory_is_followed_when_clearly_ahead() -> None:
    e = EvictionExperts(4, 2.0)
    e.memory.evidence[:] = [9.0, 0.0]
    order = e.choose(["old"], blended=["blend1"], short=["short1"], quick=["q1"], pins=set())
    assert list(order) == ["short1"]
    assert e.memory.pending == ("blend1", True)


def test_while_the_fast_side_is_followed_the_memories_are_not_judged() -> None:
    e = EvictionExperts(4, 2.0)
    e.tempo.evidence[:] = [9.0, 0.0]
    order = e.choose(["old", "new"], blended=["blend1"], short=["short1"], quick=["q1", "q2"], pins=set())
    assert list(order) == ["q1", "q2"]  # the fast side, by quick popularity (pace's default)
    assert e.tempo.pending == ("blend1", True) and e.memory.pending is None
    e.evicted("q1")
    assert len(e.tempo.pairs) == 1 and not e.memory.pairs


def test_recency_is_followed_on_the_fast_side_when_clearly_ahead_of_quick_popularity() -> None:
    e = EvictionExperts(4, 2.0)
    for name in ("old", "new"):
        e.requested(name)
    e.tempo.evidence[:] = [9.0, 0.0]
    e.pace.evidence[:] = [9.0, 0.0]
    order = e.choose(["new", "old"], blended=["blend1"], short=["short1"], quick=["q1"], pins=set())
    assert list(order) == ["old", "new"]  # least recently requested first


def test_the_fast_sides_choice_is_judged_even_while_the_steady_side_is_followed() -> None:
    e = EvictionExperts(4, 2.0)
    e.requested("old")
    e.requested("q1")
    order = e.choose(["old", "q1"], blended=["blend1"], short=["short1"], quick=["q1", "old"], pins=set())
    assert list(order) == ["blend1"]  # the steady side evicts; the fast side's choice is not made real ...
    assert len(e.pace.pairs) == 1  # ... yet its pair (quick's victim q1, recency's victim old) is open
    e.requested("old")  # recency's victim came first: quick popularity chose well
    assert e.pace.evidence == [0.0, 1.0]


def test_a_pair_judged_at_the_choice_is_opened_once_while_it_stays_open() -> None:
    r = Regret(4, 2.0, at_choice=True)
    for _ in range(3):
        assert list(r.choose(["old", "x"], ["cheap", "old"], {"pinned"})) == ["cheap", "old"]
    assert len(r.pairs) == 1 and r.pending is None
    pair = r.pairs[0]
    assert (pair.evicted, pair.spared, pair.by_challenger) == ("cheap", "old", False)
    r.requested("old")  # settled: the default's victim was spared well
    assert r.evidence == [0.0, 1.0]
    r.choose(["old"], ["cheap"], set())
    assert len(r.pairs) == 2  # the same two again, once the first pair is settled


def test_a_pair_judged_at_the_choice_skips_pins_and_needs_two_victims() -> None:
    r = Regret(4, 2.0, at_choice=True)
    assert list(r.choose(["pinned"], ["pinned", "cheap"], {"pinned"})) == ["cheap"]
    assert not r.pairs
    assert list(r.choose(["a"], ["pinned"], {"pinned"})) == []
    assert not r.pairs


def test_a_settled_pair_still_expires_cleanly() -> None:
    r = regret(slots=1, memory=1.0)  # one open pair at most
    r.choose(["spared0"], ["evicted0"], set())
    r.evicted("evicted0")
    r.requested("spared0")  # settled: spared0's list is gone, evicted0's still holds the pair
    r.choose(["spared1"], ["evicted1"], set())
    r.evicted("evicted1")  # the first pair expires: both of its names are looked up
    assert list(r.by_adapter) == ["evicted1", "spared1"]
