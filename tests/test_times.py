"""Time keys: the rollups' minute key is the UTC minute of the instant, whatever was asked before it."""

from __future__ import annotations

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lorafleet.times import minute_key, parse_span

instants = st.floats(min_value=0.0, max_value=4e9, allow_nan=False)


@given(st.lists(instants, min_size=1, max_size=40))
def test_the_minute_key_is_the_instants_utc_minute_in_any_order_of_asking(moments: list[float]) -> None:
    for moment in moments:  # the key of the last minute asked is kept: a new minute must never get the old key
        assert minute_key(moment) == time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime(moment))


def test_instants_either_side_of_a_minute_boundary_get_their_own_minutes() -> None:
    edge = 1_800_000_000.0  # a whole minute
    assert [minute_key(t) for t in (edge - 0.001, edge, edge - 0.001, edge + 59.999, edge + 60.0)] == [
        "2027-01-15T07:59Z",
        "2027-01-15T08:00Z",
        "2027-01-15T07:59Z",
        "2027-01-15T08:00Z",
        "2027-01-15T08:01Z",
    ]


@pytest.mark.parametrize(
    ("text", "seconds"), [("90s", 90.0), ("30m", 1800.0), ("1h30m", 5400.0), ("1.5h", 5400.0), ("7d", 604800.0)]
)
def test_spans(text: str, seconds: float) -> None:
    assert parse_span(text) == seconds


@pytest.mark.parametrize("text", ["", "0s", "30x", "30m1h", "1h1h", "9" * 30 + "d", "1001y"])
def test_bad_spans_say_so(text: str) -> None:
    with pytest.raises(ValueError, match=r"is not a span like|longer than a thousand years"):
        parse_span(text)


def test_a_span_past_a_thousand_years_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="longer than a thousand years"):
        parse_span("9" * 30 + "d")
