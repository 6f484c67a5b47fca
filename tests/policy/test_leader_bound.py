"""The lorafleet policy's guarantee (drive/leader.py), checked on traces hypothesis draws: against every expert
(its copy in the policy, and the policy replayed alone), the live engines lose at most the hysteresis per
stretch between changes of leader, plus one turnover of the slots per change, where nothing limits convergence
(evicting costs no touches: SGLang, or an unlimited budget); and each expert's own copy hits exactly as the expert
alone."""

from __future__ import annotations

import math
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lorafleet.drive.leader import LeaderPolicy
from lorafleet.policy.baselines import ArcPolicy, LfuPolicy, LruPolicy, MarkovPolicy
from lorafleet.policy.core import PolicyCore
from tests.policy.builders import make_inventory, run_session, stream
from tests.policy.test_leader import MruPolicy

Z, MARGIN = 2.0, 2.0  # the shipped hysteresis (LeaderPolicy.z, .margin): the guarantee is stated in them
EXPERTS = {"lru": LruPolicy, "lfu": LfuPolicy, "arc": ArcPolicy, "markov": MarkovPolicy, "mru": MruPolicy}

# A stretch of a trace: a loop over the first k adapters (recency wins, mru thrashes), a cycle longer than the
# slots (lru always misses, markov prefetches the next), a hot adapter with strays (frequency wins), or a scan.
SEGMENT = st.tuples(st.sampled_from(["loop", "cycle", "hot", "scan"]), st.integers(20, 160), st.integers(1, 12))


def _segment(shape: str, length: int, k: int, adapters: int) -> list[int]:
    k = 1 + (k - 1) % adapters
    if shape == "loop":
        return [i % k for i in range(length)]
    if shape == "cycle":
        return [(i + k) % adapters for i in range(length)]
    if shape == "hot":
        return [k - 1 if i % 3 else (i // 3) % adapters for i in range(length)]
    return [(i * 5 + k) % adapters for i in range(length)]


@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    segments=st.lists(SEGMENT, min_size=1, max_size=3),
    slots=st.integers(2, 5),
    extra=st.integers(1, 9),
    sglang=st.booleans(),
    order=st.permutations(list(EXPERTS)),
    gap_s=st.sampled_from([0.001, 0.05, 1.0]),
)
def test_the_live_engines_lose_to_any_expert_at_most_the_hysteresis_and_a_turnover_per_change(
    tmp_path: Path,
    segments: list[tuple[str, int, int]],
    slots: int,
    extra: int,
    sglang: bool,
    order: list[str],
    gap_s: float,
) -> None:
    adapters = slots + extra
    engine = (
        {"kind": "sglang", "max_loras_per_batch": 1, "max_loaded_loras": slots}
        if sglang
        else {"kind": "vllm", "max_loras": 1, "max_cpu_loras": slots}
    )
    inv = make_inventory(tmp_path, adapters=adapters, engines=[engine], zero_load=True)
    sequence = [a for shape, length, k in segments for a in _segment(shape, length, k, adapters)]
    events = stream(sequence, tenants=["t0"], gap_s=gap_s)
    policy = LeaderPolicy(experts=[(name, EXPERTS[name]) for name in order])
    live = run_session(PolicyCore(inv, policy, touch_budget=0.1 if sglang else math.inf), events)
    standings = policy.standings["m"]
    n = len(sequence)
    memory = 1 / (1 - standings.short.keep)
    assert n <= memory  # one window: a request's weight is at least 1/e of the newest one's
    # Per stretch under one leader: a challenger's lead is at most z·√n + margin in decayed requests (so at most
    # e times that in requests), plus the request a change of leader waits for.
    hysteresis = math.e * (Z * math.sqrt(n) + MARGIN) + 1
    bound = (standings.changes + 1) * hysteresis + standings.changes * (slots + 1)
    budget = 0.1 if sglang else math.inf
    for name in order:
        expert = policy.expert(name)
        assert expert is not None
        assert expert.counts.hits - live.hits <= bound, (name, expert.counts.hits, live.hits, standings.changes)
        # ... and against the expert replayed alone, which its copy is: a new leader's twin is matched to the
        # live engines, never its own copy, so the standings judge every expert as it fares alone
        alone = run_session(PolicyCore(inv, EXPERTS[name](), touch_budget=budget), events)
        assert alone.hits - live.hits <= bound, (name, alone.hits, live.hits, standings.changes)
        assert expert.counts.hits == alone.hits, (name, expert.counts.hits, alone.hits, standings.changes)
