"""Replay correctness: lru matches a plain LRU cache; budgets hold; each request classified once; oracle bounds."""

from __future__ import annotations

import random
from collections import OrderedDict
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lorafleet.drive.policies import ONLINE_POLICIES, POLICY_NAMES
from lorafleet.replay.driver import HINTS, Simulation, replay, simulate
from tests.policy.builders import make_inventory, stream


def plain_lru_hits(sequence: list[int], capacity: int) -> int:
    """An independent LRU cache: a hit when the key is cached, else insert and evict the oldest."""
    cache: OrderedDict[int, None] = OrderedDict()
    hits = 0
    for key in sequence:
        if key in cache:
            hits += 1
            cache.move_to_end(key)
        else:
            cache[key] = None
            if len(cache) > capacity:
                cache.popitem(last=False)
    return hits


def plain_min_hits(sequence: list[int], capacity: int) -> int:
    """Belady's MIN, written independently: a hit when the key is cached, else insert it (a request is served
    by loading its adapter: no bypass) and, when over capacity, drop the other cached key whose next use is
    furthest ahead (never used again: furthest of all)."""
    upcoming: dict[int, list[int]] = {}
    for i in reversed(range(len(sequence))):
        upcoming.setdefault(sequence[i], []).append(i)  # each key's next uses, soonest last
    cache: set[int] = set()
    hits = 0
    for key in sequence:
        upcoming[key].pop()
        if key in cache:
            hits += 1
            continue
        cache.add(key)
        if len(cache) > capacity:
            others = cache - {key}
            cache.remove(max(others, key=lambda k: upcoming[k][-1] if upcoming[k] else len(sequence)))
    return hits


MIN_ENGINES = {
    "sglang": lambda capacity: {"kind": "sglang", "max_loras_per_batch": 1, "max_loaded_loras": capacity},
    "vllm": lambda capacity: {"kind": "vllm", "max_loras": 1, "max_cpu_loras": capacity},
}


@pytest.mark.parametrize("kind", sorted(MIN_ENGINES))
@pytest.mark.parametrize("seed", range(8))
def test_belady_equals_a_plain_min_cache(kind: str, seed: int, tmp_path: Path) -> None:
    """`belady` is Belady's MIN, exactly, where evictions are free (an SGLang unload, or vLLM's LRU steered by
    as many touches as it takes) and each request is known as it arrives. It loads nothing ahead, and no eviction
    order beats it."""
    rng = random.Random(seed)
    adapters = rng.randint(3, 12)
    capacity = rng.randint(1, min(6, adapters - 1))
    inv = make_inventory(tmp_path, adapters=adapters, zero_load=True, engines=[MIN_ENGINES[kind](capacity)])
    sequence = [min(int(rng.paretovariate(1.1)) - 1, adapters - 1) for _ in range(rng.randint(50, 400))]
    events = stream(sequence)
    belady = Simulation(inv, "belady", events, touch_budget=1e9, visibility=HINTS).run()  # known on arrival
    assert belady.hits + belady.late == plain_min_hits(sequence, capacity)
    assert belady.prefetch_loads == 0
    for other in ("lru", "lfu", "arc", "wtinylfu"):  # the demand-only policies: no order evicts better
        result = Simulation(inv, other, events, touch_budget=1e9, visibility=HINTS).run()
        assert belady.hits + belady.late >= result.hits + result.late, other


def test_belady_keeps_what_comes_back_soonest(tmp_path: Path) -> None:
    """A cycle one longer than the slots: LRU always evicts the next one needed (no hit), MIN every other time
    keeps it; the oracle, loading ahead, misses nothing."""
    inv = make_inventory(
        tmp_path,
        adapters=3,
        zero_load=True,
        engines=[{"kind": "sglang", "max_loras_per_batch": 1, "max_loaded_loras": 2}],
    )
    results = {r.policy: r for r in replay(inv, stream([0, 1, 2] * 10), ["lru", "belady", "oracle"])}
    assert [(results[p].hits, results[p].prefetch_loads) for p in ("lru", "belady", "oracle")] == [
        (0, 0),
        (14, 0),
        (30, 30),
    ]


@pytest.mark.parametrize("seed", range(12))
def test_lru_equals_a_plain_lru_cache(seed: int, tmp_path: Path) -> None:
    rng = random.Random(seed)
    adapters = rng.randint(2, 12)
    capacity = rng.randint(1, 6)
    inv = make_inventory(
        tmp_path,
        adapters=adapters,
        zero_load=True,
        engines=[{"kind": "vllm", "max_loras": 1, "max_cpu_loras": capacity}],
    )
    sequence = [min(int(rng.paretovariate(1.2)) - 1, adapters - 1) for _ in range(rng.randint(50, 400))]
    result = Simulation(inv, "lru", stream(sequence)).run()
    assert result.hits + result.late == plain_lru_hits(sequence, capacity)
    assert result.requests == len(sequence)


ENGINE_SPECS = st.sampled_from(
    [
        [{"kind": "vllm", "max_loras": 1, "max_cpu_loras": 2}],
        [{"kind": "vllm", "max_loras": 2, "max_cpu_loras": 4, "lora_budget_mb": 3}],
        [{"kind": "sglang", "max_loras_per_batch": 2, "max_loaded_loras": 3}],
        [
            {"kind": "vllm", "max_loras": 1, "max_cpu_loras": 2},
            {"kind": "sglang", "max_loras_per_batch": 2, "max_loaded_loras": 2, "lora_budget_mb": 2},
        ],
    ]
)


# derandomize: the same examples on every run, so CI is never flaky.
@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    engines=ENGINE_SPECS,
    adapters=st.integers(min_value=1, max_value=9),
    sequence=st.lists(st.integers(min_value=0, max_value=8), min_size=1, max_size=120),
    gaps=st.lists(st.sampled_from([0.001, 0.01, 0.05, 0.2, 1.0, 5.0]), min_size=1, max_size=8),
    zero_load=st.booleans(),
    pinned=st.booleans(),
)
def test_budgets_classification_and_the_oracle_bound(
    tmp_path: Path, engines, adapters: int, sequence: list[int], gaps: list[float], zero_load: bool, pinned: bool
) -> None:
    tenants = {"t0": "{pinned: [a0], workflows: [[a0, a1]]}"} if pinned and adapters > 1 else None
    inv = make_inventory(tmp_path, adapters=adapters, engines=engines, zero_load=zero_load, tenants=tenants)
    sequence = [a % adapters for a in sequence]
    events = stream(sequence, tenants=["t0", "t1"])
    events = [
        e.__class__(
            time=1000.0 + sum(gaps[j % len(gaps)] for j in range(i)),
            kind=e.kind,
            adapter=e.adapter,
            base_model=e.base_model,
            tenant=e.tenant,
        )
        for i, e in enumerate(events)
    ]
    results = {r.policy: r for r in replay(inv, events, list(POLICY_NAMES))}
    for r in results.values():
        assert r.budget_violations == 0
        assert r.hits + r.late + r.misses == r.requests == len(sequence)
        assert len(r.cold_ms) == r.requests  # every request's wait recorded exactly once
        assert all(ms >= 0 for ms in r.cold_ms)
        assert 0.0 <= r.loader_utilization <= 1.0 + 1e-9  # a serial loader is never busy more than the span
    oracle = results["oracle"].hit_ratio
    for name in POLICY_NAMES[:-1]:
        assert oracle >= results[name].hit_ratio, (name, results[name].hit_ratio, oracle)


@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    engines=ENGINE_SPECS,
    adapters=st.integers(min_value=1, max_value=9),
    sequence=st.lists(st.integers(min_value=0, max_value=8), min_size=1, max_size=80),
    gaps=st.lists(st.sampled_from([0.001, 0.05, 0.2, 1.0, 5.0]), min_size=1, max_size=6),
    durations=st.lists(st.sampled_from([0.0, 0.01, 0.3, 2.0, 8.0]), min_size=1, max_size=6),
    pinned=st.booleans(),
)
def test_log_lines_learned_late_are_classified_once_within_budget_and_under_the_oracle(
    tmp_path: Path, engines, adapters: int, sequence: list[int], gaps: list[float], durations: list[float], pinned: bool
) -> None:
    """Replay of a log with durations (the session as the daemon runs it, against engines keeping their own LRU):
    every request served once, its wait recorded once, no engine past its budget, the oracle above every policy."""
    tenants = {"t0": "{pinned: [a0], workflows: [[a0, a1]]}"} if pinned and adapters > 1 else None
    inv = make_inventory(tmp_path, adapters=adapters, engines=engines, tenants=tenants)
    sequence = [a % adapters for a in sequence]
    events = []
    for i, e in enumerate(stream(sequence, tenants=["t0", "t1"])):
        arrival = 1000.0 + sum(gaps[j % len(gaps)] for j in range(i))
        seen = arrival + durations[i % len(durations)]
        events.append(e.__class__(arrival, e.kind, e.adapter, tenant=e.tenant, base_model=e.base_model, seen=seen))
    events.sort(key=lambda e: e.seen)  # a log is in order of the requests' ends
    results = {r.policy: r for r in replay(inv, events, list(POLICY_NAMES))}
    for r in results.values():
        assert r.hits + r.late + r.misses == r.requests == len(sequence)
        assert len(r.cold_ms) == r.requests and all(ms >= 0 for ms in r.cold_ms)
        assert 0.0 <= r.loader_utilization <= 1.0 + 1e-9
    for name in ONLINE_POLICIES:  # learning from log lines: engines that keep their own LRU stand in
        simulation = Simulation(inv, name, sorted(events, key=lambda e: e.time))
        simulation.run()
        standins = simulation.standins
        assert standins is not None
        for key, engine in standins.engines.items():
            budget = engine.budget
            assert budget.host_slots is None or len(engine.held) <= budget.host_slots, (name, key)
            assert budget.budget_bytes is None or engine.used_bytes <= budget.budget_bytes, (name, key)
    assert Simulation(inv, "belady", events).standins is None  # it sees the future: each request as it arrives
    for name in POLICY_NAMES[:-1]:
        assert results["oracle"].hit_ratio >= results[name].hit_ratio, name


def test_a_request_waiting_on_a_load_is_late_and_waits_the_remainder(tmp_path: Path) -> None:
    inv = make_inventory(tmp_path, adapters=2)
    load_ms = inv.engines[0].load.cold_ms(inv.adapters["a0"].size_bytes)
    events = stream([0, 0], gap_s=load_ms / 4000.0)  # second request a quarter into the first load
    r = Simulation(inv, "lru", events).run()
    assert (r.misses, r.late, r.hits) == (1, 1, 0)
    assert r.cold_ms[0] == pytest.approx(load_ms * 0.75) or r.cold_ms[1] == pytest.approx(load_ms * 0.75)
    assert sorted(r.cold_ms) == pytest.approx(sorted([load_ms, load_ms * 0.75]))


def test_adapters_above_every_engine_rank_are_unserved_not_loaded(tmp_path: Path) -> None:
    inv = make_inventory(
        tmp_path,
        adapters=2,
        ranks=[8, 64],
        engines=[{"kind": "vllm", "max_loras": 1, "max_cpu_loras": 2, "max_lora_rank": 16}],
    )
    r = Simulation(inv, "lru", stream([0, 1, 1])).run()
    assert (r.requests, r.unserved, r.loads) == (1, 2, 1)


def test_workflow_prefetch_turns_chain_steps_into_hits(tmp_path: Path) -> None:
    tenants = {"t": "{workflows: [[a0, a1, a2]]}"}
    inv = make_inventory(
        tmp_path, adapters=6, tenants=tenants, engines=[{"kind": "vllm", "max_loras": 1, "max_cpu_loras": 2}]
    )
    chain = [0, 1, 2, 3, 4, 5] * 20  # a0→a1→a2 as declared, then three others
    events = stream(chain, gap_s=2.0)
    results = {r.policy: r for r in replay(inv, events, ["lru", "lorafleet"])}
    assert results["lru"].hits == 0
    assert results["lorafleet"].hits > 0.4 * len(chain)
    assert results["lorafleet"].budget_violations == 0


def test_prefetch_keeps_no_needless_copies_across_a_pool(tmp_path: Path) -> None:
    """Engine-less traffic on two engines with room for everything: lorafleet must not fall behind lru by
    prefetching copies of adapters already resident on the other engine."""
    tenants = {"t0": "{workflows: [[a0, a1, a2]]}", "t1": "{workflows: [[a3, a4, a5]]}"}
    engines = [
        {"kind": "vllm", "max_loras": 1, "max_cpu_loras": 3},
        {"kind": "sglang", "max_loras_per_batch": 2, "max_loaded_loras": 3},
    ]
    inv = make_inventory(tmp_path, adapters=6, engines=engines, tenants=tenants)
    rng = random.Random(3)
    sequence = [a for _ in range(60) for a in rng.choice([[0, 1, 2], [3, 4, 5]])]
    results = {r.policy: r for r in replay(inv, stream(sequence, gap_s=2.0), ["lru", "lorafleet"])}
    assert results["lorafleet"].hit_ratio >= results["lru"].hit_ratio


def test_lru_orders_recency_by_request_time_not_load_completion(tmp_path: Path) -> None:
    """a0 is asked for again while a1's load is queued: by request time a1 is the older, so a2 evicts a1 and
    a0's next request hits (ordering by completion would evict a0)."""
    inv = make_inventory(tmp_path, adapters=3, engines=[{"kind": "vllm", "max_loras": 1, "max_cpu_loras": 2}])
    load_s = inv.engines[0].load.cold_ms(inv.adapters["a0"].size_bytes) / 1000
    times = [0.0, 0.5 * load_s, 0.6 * load_s, 5 * load_s, 7 * load_s]
    events = [
        e.__class__(time=1000 + t, kind=e.kind, adapter=e.adapter, base_model="m", tenant="t")
        for t, e in zip(times, stream([0, 1, 0, 2, 0]), strict=True)
    ]
    r = Simulation(inv, "lru", events).run()
    assert (r.misses, r.late, r.hits) == (3, 1, 1)


def test_lru_equals_a_plain_lru_cache_with_tied_timestamps(tmp_path: Path) -> None:
    rng = random.Random(99)
    inv = make_inventory(
        tmp_path, adapters=8, zero_load=True, engines=[{"kind": "vllm", "max_loras": 1, "max_cpu_loras": 3}]
    )
    sequence = [rng.randrange(8) for _ in range(300)]
    events = [
        e.__class__(time=1000.0 + i // 4, kind=e.kind, adapter=e.adapter, base_model="m", tenant="t")
        for i, e in enumerate(stream(sequence))
    ]  # four requests share each timestamp, in log order
    r = Simulation(inv, "lru", events).run()
    assert r.hits + r.late == plain_lru_hits(sequence, 3)


def test_oracle_is_a_bound_under_loader_overload(tmp_path: Path) -> None:
    """Belady with prefetch alone loses here (queued demand loads hold every slot; lorafleet's pinned preload
    wins), so the oracle counts every online policy's schedule among its own and stays a bound."""
    tenants = {"t0": "{pinned: [a0], workflows: [[a0, a1]]}"}
    inv = make_inventory(
        tmp_path,
        adapters=9,
        tenants=tenants,
        engines=[{"kind": "sglang", "max_loras_per_batch": 2, "max_loaded_loras": 3}],
    )
    sequence = [0, 3, 4, 5, 3, 6, 2, 4, 8, 1, 4, 1, 4, 5, 2, 0, 4, 5, 3, 1] * 3
    events = stream(sequence, tenants=["t0", "t1"], gap_s=0.001)  # arrivals 15x faster than one load
    results = {r.policy: r for r in replay(inv, events, ["lorafleet", "oracle"])}
    assert results["oracle"].hits >= results["lorafleet"].hits
    alone = simulate(inv, "oracle", events)  # without the others computed first: the same bound
    assert (alone.hits, alone.cold_ms_total) == (results["oracle"].hits, results["oracle"].cold_ms_total)


def test_touches_are_what_a_policy_costs_on_vllm_and_lru_needs_none(tmp_path: Path) -> None:
    vllm = make_inventory(tmp_path, adapters=6, engines=[{"kind": "vllm", "max_loras": 1, "max_cpu_loras": 3}])
    sglang = make_inventory(
        tmp_path,
        adapters=6,
        engines=[{"kind": "sglang", "max_loras_per_batch": 2, "max_loaded_loras": 3}],
        name="s.yaml",
    )
    rng = random.Random(5)
    events = stream([min(int(rng.paretovariate(1.0)) - 1, 5) for _ in range(400)], gap_s=1.0)
    on_vllm = {r.policy: r for r in replay(vllm, events, ["lru", "lfu"])}
    on_sglang = {r.policy: r for r in replay(sglang, events, ["lru", "lfu"])}
    assert on_vllm["lru"].touches == 0 and on_vllm["lru"].evictions > 0
    assert on_vllm["lfu"].touches > 0  # lfu keeps frequent adapters the engine's LRU would drop
    assert on_sglang["lfu"].touches == 0 and on_sglang["lfu"].unloads == on_sglang["lfu"].evictions > 0


@pytest.mark.plain_core
def test_the_budget_check_counts_what_the_engine_holds_not_what_the_book_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lorafleet.policy.residency import EngineResidency

    inv = make_inventory(tmp_path, adapters=5, engines=[{"kind": "vllm", "max_loras": 1, "max_cpu_loras": 2}])
    events = stream([0, 1, 2, 3, 4], gap_s=1.0)
    assert Simulation(inv, "lru", events).run().budget_violations == 0
    monkeypatch.setattr(EngineResidency, "has_room", lambda self, size: True)  # a book that lets anything in
    assert Simulation(inv, "lru", events).run().budget_violations > 0


def test_the_engines_alone_figure_covers_the_window_from_its_first_instant_to_just_before_its_end(
    tmp_path: Path,
) -> None:
    """`stats` compares the journal's [since, until) with lru over the same requests: one at `since` is in the
    window, one at `until` is the next window's."""
    import json

    from lorafleet.inventory import load_inventory
    from lorafleet.replay.driver import lru_hit_ratio

    make_inventory(tmp_path, adapters=2)
    logs = "gateway:\n  logs:\n    - {path: access.jsonl, format: jsonl, fields: {time: ts, adapter: model}}\n"
    (tmp_path / "inv.yaml").write_text((tmp_path / "inv.yaml").read_text() + logs)
    inv = load_inventory(tmp_path / "inv.yaml")
    since, until = 1_800_000_000.0, 1_800_000_060.0
    rows = [(since, "a0"), (since + 1, "a0"), (until - 1, "a1"), (until, "a1")]
    (tmp_path / "access.jsonl").write_text("".join(json.dumps({"ts": t, "model": m}) + "\n" for t, m in rows))
    assert lru_hit_ratio(inv, since, since + 30) == 0.5  # a0 at `since` (cold), then again (warm)
    assert lru_hit_ratio(inv, until - 30, until) == 0.0  # a1 once (cold); its second request is past the end
    assert lru_hit_ratio(inv, until + 1, until + 60) is None  # no request then
