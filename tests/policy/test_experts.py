"""The eviction experts' rules: when recency is followed, how a regret pair is opened and settled, decay, expiry
and the request order the LRU expert keeps."""

from __future__ import annotations

import pytest

from lorafleet.policy.experts import EvictionExperts


def experts(slots: int = 4, memory: float = 2.0) -> EvictionExperts:
    return EvictionExperts(slots, memory)


@pytest.mark.parametrize(
    ("lru", "value", "follow"),
    [(5.0, 1.0, True), (3.0, 1.0, False), (1.0, 5.0, False), (0.0, 0.0, False), (1.0, 0.0, False), (2.0, 0.0, True)],
)
def test_recency_is_followed_only_when_clearly_ahead(lru: float, value: float, follow: bool) -> None:
    e = experts()
    e.evidence[:] = [lru, value]
    assert e.follow_lru() is follow  # ahead by more than one standard deviation of the settled count


def settle(chose_lru: bool, first: str) -> list[float]:
    e = experts()
    if chose_lru:
        e.evidence[:] = [9.0, 0.0]
    order = e.choose(["old", "x"], iter(["cheap", "old"]), set())
    assert list(order) == (["old", "x"] if chose_lru else ["cheap", "old"])
    e.evidence[:] = [0.0, 0.0]
    e.evicted("old" if chose_lru else "cheap")
    e.requested(first)
    return e.evidence


def test_value_chose_wrong_when_its_victim_comes_back_first() -> None:
    assert settle(chose_lru=False, first="cheap") == [1.0, 0.0]


def test_value_chose_well_when_the_adapter_it_spared_comes_first() -> None:
    assert settle(chose_lru=False, first="old") == [0.0, 1.0]


def test_lru_chose_wrong_when_its_victim_comes_back_first() -> None:
    assert settle(chose_lru=True, first="old") == [0.0, 1.0]


def test_lru_chose_well_when_the_adapter_it_spared_comes_first() -> None:
    assert settle(chose_lru=True, first="cheap") == [1.0, 0.0]


def test_a_pair_settles_once_and_only_for_its_two_adapters() -> None:
    e = experts()
    e.choose(["old"], iter(["cheap"]), set())
    e.evicted("cheap")
    e.requested("other")
    assert e.evidence == [0.0, 0.0]
    e.requested("cheap")
    e.requested("old")  # already settled: no second point
    e.requested("cheap")
    assert sum(e.evidence) == pytest.approx(1.0 * e.keep * e.keep)


def test_no_pair_when_the_experts_agree_or_the_victims_were_not_theirs() -> None:
    e = experts()
    e.choose(["same"], iter(["same"]), set())
    e.evicted("same")
    e.choose(["old"], iter(["cheap"]), set())
    e.forget_choice()  # a prefetch displaced something instead
    e.evicted("cheap")
    e.evicted("later")  # only the first victim after a choice counts
    for name in ("same", "old", "cheap", "later"):
        e.requested(name)
    assert e.evidence == [0.0, 0.0]
    assert not e.pairs


def test_pinned_adapters_are_never_the_other_experts_victim() -> None:
    e = experts()
    e.choose(["pinned", "old"], iter(["cheap"]), {"pinned"})
    assert e.pending == ("old", False)


def test_points_decay_per_request_over_memory_turnovers() -> None:
    e = experts(slots=4, memory=2.0)
    e.evidence[:] = [8.0, 4.0]
    e.requested("a")
    assert e.evidence == [pytest.approx(8.0 * (1 - 1 / 8)), pytest.approx(4.0 * (1 - 1 / 8))]


def test_open_pairs_expire_after_memory_turnovers_of_evictions() -> None:
    e = experts(slots=1, memory=2.0)  # at most two open pairs
    for i in range(3):
        e.choose([f"spared{i}"], iter([f"evicted{i}"]), set())
        e.evicted(f"evicted{i}")
    assert len(e.pairs) == 2 and "evicted0" not in e.by_adapter and "spared0" not in e.by_adapter
    e.requested("evicted0")  # expired: no point
    assert e.evidence == [0.0, 0.0]
    e.requested("evicted2")
    assert e.evidence[0] == pytest.approx(1.0)


def test_the_lru_expert_orders_by_request_and_puts_unseen_residents_first() -> None:
    e = experts()
    for name in ("b", "a", "c"):
        e.requested(name)
    e.loaded("p")  # a prefetch: recent by its load
    e.requested("b")
    assert e.by_recency(["a", "b", "c", "p", "restored"]) == ["restored", "a", "c", "p", "b"]
    e.evicted("c")
    assert e.by_recency(["a", "b", "p"]) == ["a", "p", "b"]
