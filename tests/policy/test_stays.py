"""When each adapter was held on each simulated engine (drive/stays.py), against a plain list of intervals."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from lorafleet.drive.stays import INF, Stays

ops = st.lists(
    st.one_of(
        st.tuples(st.just("began"), st.integers(0, 30), st.just(0)),
        st.tuples(st.just("ended"), st.integers(0, 30), st.just(0)),
        st.tuples(st.just("add"), st.integers(0, 30), st.integers(-3, 12)),
    ),
    max_size=25,
)


class _Plain:
    """The stays as a plain list of [start, end) intervals, unmerged."""

    def __init__(self) -> None:
        self.spans: list[list[float]] = []

    def add(self, start: float, end: float) -> None:
        if end > start:
            self.spans.append([start, end])

    def ended(self, at: float) -> None:
        """Not held from `at` on: every stay cut there."""
        self.spans = [[start, min(end, at)] for start, end in self.spans if start < at]

    def held(self, at: float) -> bool:
        return any(start <= at < end for start, end in self.spans)


@settings(max_examples=300, deadline=None)
@given(ops)
def test_held_is_whether_an_instant_falls_in_a_stay(steps: list[tuple[str, int, int]]) -> None:
    stays, plain = Stays(keep_s=1e9), _Plain()
    for op, at, length in steps:
        if op == "began":
            stays.began("e", "a", at)
            plain.add(at, INF)
        elif op == "ended":
            stays.ended("e", "a", at)
            plain.ended(at)
        else:
            stays.add("e", "a", at, at + length)
            plain.add(at, at + length)
        for t in range(-1, 45):
            assert stays.held("e", "a", t + 0.5) == plain.held(t + 0.5), (steps, t)
            assert stays.held("e", "a", t) == plain.held(t), (steps, t)


def test_an_end_with_no_stay_going_on_changes_nothing_and_an_unknown_one_is_not_held() -> None:
    stays = Stays()
    stays.ended("e", "a", 5.0)  # never held there
    assert not stays.known("e", "a") and not stays.held("e", "a", 5.0)
    stays.add("e", "a", 1.0, 3.0)
    stays.ended("e", "a", 5.0)  # the stay had ended
    assert stays.held("e", "a", 2.0) and not stays.held("e", "a", 4.0)
    stays.began("e", "a", 6.0)
    stays.ended("e", "a", 6.0)  # over as it began: no stay at all
    assert not stays.held("e", "a", 6.0)
    assert stays.known("e", "a") and list(stays.engines("a")) == ["e"] and not stays.known("f", "a")


def test_stays_long_over_are_dropped_but_recent_ones_kept() -> None:
    stays = Stays(keep_s=100.0)
    for i in range(10):
        stays.add("e", "a", i * 10.0, i * 10.0 + 5.0)
    stays.add("e", "a", 1000.0, 1001.0)
    assert not stays.held("e", "a", 2.0)  # more than keep_s before the newest: forgotten
    stays.add("e", "a", 1010.0, 1011.0)
    assert stays.held("e", "a", 1000.5) and stays.held("e", "a", 1010.5)
    assert len(stays.on["a"]["e"]) == 4


def test_a_stay_going_on_across_the_cut_is_kept_whole() -> None:
    stays = Stays(keep_s=100.0)
    for start, end in ((0.0, 5.0), (850.0, 950.0), (960.0, 961.0), (970.0, 971.0), (980.0, 981.0)):
        stays.add("e", "a", start, end)
    stays.add("e", "a", 1000.0, 1001.0)  # the cut (901) falls inside 850-950
    assert stays.held("e", "a", 860.0) and stays.held("e", "a", 949.0)
    assert not stays.held("e", "a", 955.0) and not stays.held("e", "a", 2.0)
    assert stays.on["a"]["e"][:2] == [850.0, 950.0]


def test_until_told_how_far_back_judgements_look_only_the_latest_stay_is_kept() -> None:
    stays = Stays()
    for i in range(5):
        stays.add("e", "a", i * 10.0, i * 10.0 + 5.0)
    assert stays.on["a"]["e"] == [40.0, 45.0]
    stays.reach(20.0)  # requests of 20 s: keep 40 s
    for i in range(5, 10):
        stays.add("e", "a", i * 10.0, i * 10.0 + 5.0)
    assert stays.on["a"]["e"] == [50.0, 55.0, 60.0, 65.0, 70.0, 75.0, 80.0, 85.0, 90.0, 95.0]
    stays.reach(5.0)  # never less than was asked before
    assert stays.keep_s == 40.0


def test_a_stay_that_ends_inside_another_merges_with_it_into_one() -> None:
    """The record stays one sorted run of bounds, whichever way two stays overlap."""
    stays = Stays(keep_s=1e9)
    stays.add("e", "a", 0.0, 10.0)
    stays.add("e", "a", -5.0, 5.0)  # ends inside the first
    assert stays.on["a"]["e"] == [-5.0, 10.0]
    stays.add("e", "a", 8.0, 20.0)  # starts inside it
    stays.add("e", "a", 30.0, 40.0)
    stays.add("e", "a", 15.0, 35.0)  # bridges two
    assert stays.on["a"]["e"] == [-5.0, 40.0]


def test_a_stay_long_over_is_dropped_even_where_the_next_one_is_recent() -> None:
    stays = Stays(keep_s=100.0)
    stays.add("e", "a", 0.0, 5.0)
    stays.add("e", "a", 1000.0, 1001.0)  # 0-5 ended more than keep_s before: forgotten
    assert stays.on["a"]["e"] == [1000.0, 1001.0] and not stays.held("e", "a", 2.0)
