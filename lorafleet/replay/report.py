"""The stable `replay --json` shape."""

from __future__ import annotations

from typing import Any

from lorafleet.logs.records import LogTally
from lorafleet.replay.simulator import PolicyResult, headroom_captured


def replay_as_dict(results: list[PolicyResult], tally: LogTally) -> dict[str, Any]:
    by_name = {r.policy: r for r in results}
    lru, oracle = by_name.get("lru"), by_name.get("oracle")
    return {
        "policies": [
            {
                "policy": r.policy,
                "requests": r.requests,
                "hits": r.hits,
                "late": r.late,
                "misses": r.misses,
                "hit_ratio": round(r.hit_ratio, 6),
                "gpu_hits": r.gpu_hits,
                "cold_ms_total": round(r.cold_ms_total, 3),
                "cold_ms_p50": round(r.cold_ms_percentile(50), 3),
                "cold_ms_p95": round(r.cold_ms_percentile(95), 3),
                "cold_ms_p99": round(r.cold_ms_percentile(99), 3),
                "loads": r.loads,
                "prefetch_loads": r.prefetch_loads,
                "prefetch_used": r.prefetch_used,
                "wasted_prefetches": r.wasted_prefetches,
                "budget_violations": r.budget_violations,
                "loader_utilization": round(r.loader_utilization, 6),
                "unserved": r.unserved,
                "headroom_captured": (
                    None if lru is None or oracle is None else _round(headroom_captured(r, lru, oracle))
                ),
            }
            for r in results
        ],
        "log": {
            "lines": tally.lines,
            "adapter_requests": tally.adapter_requests,
            "base_requests": tally.base_requests,
            "unknown_requests": tally.unknown_requests,
            "bad_lines": tally.bad_lines,
            "bad_reasons": dict(sorted(tally.bad_reasons.items())),
        },
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)
