"""The measures every view reports, each defined once: hit ratio, touches per request, nearest-rank percentiles."""

from __future__ import annotations

from collections.abc import Sequence


def per_request(count: int, requests: int) -> float:
    """A count per adapter request (0 when there were none): touches are real 1-token requests on vLLM, so every
    view gives them per request, the unit the touch budget is set in."""
    return count / requests if requests else 0.0


def hit_ratio(hits: int, requests: int) -> float:
    """Hits over adapter requests (0 when there were none): the definition every table and shape uses."""
    return per_request(hits, requests)


def nearest_rank(ordered: Sequence[float], q: float) -> float:
    """The nearest-rank `q`th percentile of sorted values (0 for none): the smallest value with at least q% of
    the values at or below it."""
    if not ordered:
        return 0.0
    rank = max(1, min(len(ordered), int(-(-q * len(ordered) // 100))))
    return ordered[rank - 1]


__all__ = ["hit_ratio", "nearest_rank", "per_request"]
