"""Planning residency: budgets hold, pins first, reasons for what cannot be placed, near the brute-force optimum."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lorafleet.plan.planner import plan_residency
from lorafleet.policy.placement import pin_limit
from lorafleet.policy.residency import ResidencyBook
from tests.policy.builders import make_inventory

SPECS = [
    [{"kind": "vllm", "max_loras": 1, "max_cpu_loras": 2}],
    [
        {"kind": "vllm", "max_loras": 2, "max_cpu_loras": 3, "lora_budget_mb": 3},
        {"kind": "sglang", "max_loras_per_batch": 2, "max_loaded_loras": 2},
    ],
    [
        {"kind": "vllm", "max_loras": 1, "max_cpu_loras": 2, "max_lora_rank": 16},
        {"kind": "vllm", "max_loras": 2, "max_cpu_loras": 2},
    ],
]


def check_budgets(inv, planned) -> None:  # type: ignore[no-untyped-def]
    book = ResidencyBook.from_inventory(inv)
    for p in planned.placements:
        state = book[p.engine]
        state.admit(p.adapter, inv.adapters[p.adapter].size_bytes)  # raises if a budget would break
        if p.pinned:
            state.pin(p.adapter)
    for state in book.engines.values():
        assert state.violations() == 0
        assert len(state.pins) <= pin_limit(state)


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    spec=st.integers(0, len(SPECS) - 1), adapters=st.integers(1, 8), seed=st.integers(0, 10_000), pinned=st.booleans()
)
def test_budgets_never_exceeded_and_pins_placed_first(
    tmp_path: Path, spec: int, adapters: int, seed: int, pinned: bool
) -> None:
    tenants = {"t": "{pinned: [a0]}"} if pinned else None
    inv = make_inventory(
        tmp_path, adapters=adapters, engines=SPECS[spec], tenants=tenants, name=f"i{spec}{adapters}{pinned}.yaml"
    )
    rng = random.Random(seed)
    rates = {a: rng.random() * 10 for a in inv.adapters}
    planned = plan_residency(inv, rates, ["a0"] if pinned else [], max_replicas=3)
    check_budgets(inv, planned)
    book = ResidencyBook.from_inventory(inv)
    if pinned and any(pin_limit(state) > 0 for state in book.engines.values()):  # every engine serves a0 (rank 8)
        assert planned.placements[0].adapter == "a0" and planned.placements[0].pinned
    else:  # no pin fits (one GPU slot on vLLM): a0 is placed as any adapter is, unpinned
        assert not any(p.pinned for p in planned.placements)
    assert plan_residency(inv, rates, ["a0"] if pinned else [], max_replicas=3) == planned  # deterministic


def brute_force(inv, rates) -> float:  # type: ignore[no-untyped-def]
    """The best share of demand any assignment (each adapter on one engine, or nowhere) can keep warm."""
    engines = [e.key for e in inv.engines] + [None]
    ids = list(inv.adapters)
    best = 0.0
    for choice in itertools.product(engines, repeat=len(ids)):
        book = ResidencyBook.from_inventory(inv)
        value = 0.0
        ok = True
        for adapter, key in zip(ids, choice, strict=True):
            if key is None:
                continue
            engine = inv.engine(key)
            state = book[key]
            a = inv.adapters[adapter]
            if (
                engine.base_model != a.base_model
                or (engine.max_lora_rank or a.rank) < a.rank
                or not state.has_room(a.size_bytes)
            ):
                ok = False
                break
            state.admit(adapter, a.size_bytes)
            value += rates[adapter]
        if ok:
            best = max(best, value)
    return best / sum(rates.values())


@pytest.mark.parametrize("seed", range(12))
def test_the_plan_is_within_95_percent_of_the_brute_force_optimum(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    spec = SPECS[seed % len(SPECS)]
    inv = make_inventory(
        tmp_path, adapters=rng.randint(3, 6), engines=spec, ranks=[8, 16, 32, 64], name=f"b{seed}.yaml"
    )
    rates = {a: rng.paretovariate(1.2) for a in inv.adapters}
    planned = plan_residency(inv, rates, max_replicas=1)
    assert planned.expected_hit_ratio >= 0.95 * brute_force(inv, rates) - 1e-9


def test_unplaceable_adapters_say_why(tmp_path: Path) -> None:
    inv = make_inventory(
        tmp_path,
        adapters=4,
        ranks=[8, 128, 8, 8],
        engines=[{"kind": "vllm", "max_loras": 1, "max_cpu_loras": 2, "max_lora_rank": 64}],
    )
    planned = plan_residency(inv, {"a0": 5.0, "a1": 9.0, "a2": 3.0, "a3": 1.0})
    reasons = dict(planned.unplaced)
    assert "above h/e0's max_lora_rank 64" in reasons["a1"]
    assert reasons["a3"].startswith("budget exhausted")
    assert {p.adapter for p in planned.placements} == {"a0", "a2"}  # the busiest that fit
    assert planned.expected_hit_ratio == pytest.approx(8.0 / 18.0)


def test_a_copy_is_made_only_while_it_is_worth_more_than_an_average_adapter(tmp_path: Path) -> None:
    engines = [{"kind": "vllm", "max_loras": 1, "max_cpu_loras": 3}] * 3
    inv = make_inventory(tmp_path, adapters=3, engines=engines)
    planned = plan_residency(inv, {"a0": 100.0, "a1": 1.0, "a2": 1.0}, max_replicas=3)
    copies = [p.engine for p in planned.placements if p.adapter == "a0"]
    # mean rate 34: a second copy is worth 50, a third 25 — so two copies, on different engines.
    assert len(copies) == 2 and len(set(copies)) == 2
    flat = plan_residency(inv, {"a0": 1.0, "a1": 1.0, "a2": 1.0}, max_replicas=3)
    assert len(flat.placements) == 3  # equal demand: nobody earns a copy
    # No more copies than engines, however many are allowed (a huge --replicas once ran for ever).
    assert plan_residency(inv, {"a0": 1e30, "a1": 1.0, "a2": 1.0}, max_replicas=10**20) == plan_residency(
        inv, {"a0": 1e30, "a1": 1.0, "a2": 1.0}, max_replicas=3
    )


def test_demand_over_the_window_and_per_tenant_warm_share(tmp_path: Path) -> None:
    from lorafleet.plan.window import demand_from_events, tenant_hit_ratios
    from lorafleet.policy.events import ADAPTER, RequestEvent

    inv = make_inventory(tmp_path, adapters=3, engines=[{"kind": "vllm", "max_loras": 1, "max_cpu_loras": 1}])
    events = [RequestEvent(0.0, ADAPTER, "a2", tenant="old")]  # outside a 1-hour window ending at t=7200
    events += [RequestEvent(3600.0 + i, ADAPTER, "a0", tenant="x") for i in range(120)]  # 120 in two minutes
    events += [RequestEvent(7200.0, ADAPTER, "a1", tenant="y")]
    demand = demand_from_events(events, window_s=3600.0)
    assert demand.requests == 121 and "a2" not in demand.rates
    assert demand.peaks["a0"] == 1.0  # 60 in its busiest minute
    planned = plan_residency(inv, demand.rates)
    assert [p.adapter for p in planned.placements] == ["a0"]  # one slot: the busiest
    window = [e for e in events if e.time >= 3600.0]
    assert tenant_hit_ratios(planned, window) == {"x": 1.0, "y": 0.0}


def test_the_window_ends_at_the_logs_last_line_of_any_kind_for_the_demand_and_the_tenants_alike() -> None:
    """One window for all the plan reads: a log whose last hours are base-model lines plans on those hours (no
    adapter demand), not on the last adapter requests; and the rates are over the time the lines span."""
    from lorafleet.plan.window import demand_from_events, window_of
    from lorafleet.policy.events import ADAPTER, BASE, RequestEvent

    old = [RequestEvent(float(i), ADAPTER, "a0", tenant="x") for i in range(10)]
    tail = [RequestEvent(5000.0, BASE, None, tenant="x")]
    assert window_of(old + tail, 3600.0) == tail
    quiet = demand_from_events(old + tail, window_s=3600.0)
    assert quiet.requests == 0 and quiet.rates == {}
    minute = [RequestEvent(float(i), ADAPTER, "a0") for i in range(60)] + [RequestEvent(599.0, BASE, None)]
    spread = demand_from_events(minute, window_s=3600.0)
    assert spread.requests == 60 and spread.rates == {"a0": 0.1}  # 60 requests over the 600 s the lines span
    assert spread.covered_s == 599.0


def test_each_tenants_expected_hit_ratio_counts_its_own_requests(tmp_path: Path) -> None:
    """Two tenants share an adapter: each is judged by its own requests, not by an even split of the adapter's."""
    from lorafleet.plan.window import tenant_hit_ratios
    from lorafleet.policy.events import ADAPTER, RequestEvent
    from lorafleet.policy.placement import Placement, PlannedResidency

    shared = [RequestEvent(float(i), ADAPTER, "a0", tenant="x") for i in range(9)]
    shared += [RequestEvent(10.0, ADAPTER, "a0", tenant="y")] + [RequestEvent(11.0 + i, ADAPTER, "a1", tenant="y")
                                                                 for i in range(3)]  # fmt: skip
    shared += [RequestEvent(20.0, ADAPTER, "a1")]  # no tenant in the log
    planned = PlannedResidency((Placement("a0", "h/e0", False),), (), 0.0)
    assert tenant_hit_ratios(planned, shared) == {"-": 0.0, "x": 1.0, "y": 0.25}


# --- single rules of placement, each pinned --------------------------------------------------------------------

KIB32 = 32768 / 1048576  # lora_budget_mb holding exactly 32 KiB


def test_an_adapter_exactly_as_large_as_the_bytes_left_fits(tmp_path: Path) -> None:
    engines = [{"kind": "vllm", "max_loras": 1, "max_cpu_loras": 4, "lora_budget_mb": KIB32}]
    inv = make_inventory(tmp_path, adapters=3, ranks=[32, 8, 8], engines=engines)  # a0 is 32 KiB
    planned = plan_residency(inv, {"a0": 9.0, "a1": 1.0, "a2": 1.0})
    assert [p.adapter for p in planned.placements] == ["a0"]


def test_a_pin_goes_to_the_engine_with_the_most_room(tmp_path: Path) -> None:
    engines = [{"kind": "vllm", "max_loras": 2, "max_cpu_loras": n} for n in (3, 6, 4)]
    inv = make_inventory(tmp_path, adapters=2, engines=engines)
    planned = plan_residency(inv, {"a0": 1.0, "a1": 1.0}, ["a0"])
    assert planned.placements[0] == type(planned.placements[0])("a0", "h/e1", True)


def test_an_engine_a_pin_left_one_slot_still_takes_an_adapter(tmp_path: Path) -> None:
    engines = [{"kind": "vllm", "max_loras": 2, "max_cpu_loras": 3}]
    inv = make_inventory(tmp_path, adapters=3, engines=engines)
    planned = plan_residency(inv, {"a0": 1.0, "a1": 5.0, "a2": 1.0}, ["a0"])
    assert [(p.adapter, p.pinned) for p in planned.placements] == [("a0", True), ("a1", False), ("a2", False)]


def test_the_expected_hit_ratio_holds_below_one_request_per_second(tmp_path: Path) -> None:
    inv = make_inventory(tmp_path, adapters=2, engines=[{"kind": "vllm", "max_loras": 1, "max_cpu_loras": 1}])
    planned = plan_residency(inv, {"a0": 0.3, "a1": 0.1})
    assert planned.expected_hit_ratio == pytest.approx(0.75)


def test_room_made_by_moving_an_adapter_aside_counts_its_bytes(tmp_path: Path) -> None:
    # e0 takes any rank but holds 32 KiB; e1 takes rank <= 16 only. a0 (rank 8) is placed first on e0 (most
    # room), so a1 (rank 32, 32 KiB, only e0 can serve it) needs a0 moved to e1 — the bytes freed must count.
    engines = [
        {"kind": "vllm", "max_loras": 1, "max_cpu_loras": 2, "lora_budget_mb": KIB32 + 8192 / 1048576 / 2},
        {"kind": "vllm", "max_loras": 1, "max_cpu_loras": 1, "max_lora_rank": 16},
    ]
    inv = make_inventory(tmp_path, adapters=2, ranks=[8, 32], engines=engines)
    planned = plan_residency(inv, {"a0": 5.0, "a1": 1.0})
    assert sorted((p.adapter, p.engine, p.pinned) for p in planned.placements) == [
        ("a0", "h/e1", False),
        ("a1", "h/e0", False),
    ]
    assert planned.unplaced == ()


def test_a_move_aside_that_would_not_make_room_changes_nothing(tmp_path: Path) -> None:
    # e0 (2 slots, 40 KiB) holds a0 (8 KiB) and a2 (16 KiB); a1 (32 KiB) only fits e0. Moving a0 to e1 frees a
    # slot but leaves 24 KiB: not enough, so the move is undone (a0 back, unpinned) and a1 is reported.
    engines = [
        {"kind": "vllm", "max_loras": 1, "max_cpu_loras": 2, "lora_budget_mb": 40960 / 1048576},
        {"kind": "vllm", "max_loras": 1, "max_cpu_loras": 1, "max_lora_rank": 16},
    ]
    inv = make_inventory(tmp_path, adapters=3, ranks=[8, 32, 16], engines=engines)
    planned = plan_residency(inv, {"a0": 5.0, "a1": 1.0, "a2": 4.0})
    assert sorted((p.adapter, p.engine, p.pinned) for p in planned.placements) == [
        ("a0", "h/e0", False),
        ("a2", "h/e0", False),
    ]
    assert "a1" in dict(planned.unplaced)


def test_an_engine_filled_through_another_pool_keeps_its_last_slot_for_this_one(tmp_path: Path) -> None:
    # x and z can go anywhere, y (rank 32) only on e0. After x and y, e0 has one slot left; z still sees it.
    engines = [
        {"kind": "vllm", "max_loras": 1, "max_cpu_loras": 3},
        {"kind": "vllm", "max_loras": 1, "max_cpu_loras": 1, "max_lora_rank": 16},
    ]
    inv = make_inventory(tmp_path, adapters=3, ranks=[8, 32, 8], engines=engines)
    planned = plan_residency(inv, {"a0": 9.0, "a1": 8.0, "a2": 7.0})
    assert [(p.adapter, p.engine) for p in planned.placements] == [("a0", "h/e0"), ("a1", "h/e0"), ("a2", "h/e0")]


def test_a_copy_goes_to_another_host_first(tmp_path: Path) -> None:
    from lorafleet.inventory import load_inventory

    engine = "kind: vllm, max_loras: 1, max_cpu_loras: 3, base_model: m, max_lora_rank: 64"
    path = tmp_path / "two-hosts.yaml"
    path.write_text(
        "base_models:\n  m: {hidden_size: 64, intermediate_size: 128, num_layers: 2, num_attention_heads: 4}\n"
        "hosts:\n"
        "  - name: h1\n    provider: onprem\n    engines:\n"
        f"      - {{name: e0, url: http://127.0.0.1:20000, {engine}}}\n"
        f"      - {{name: e1, url: http://127.0.0.1:20001, {engine}}}\n"
        "  - name: h2\n    provider: onprem\n    engines:\n"
        f"      - {{name: e2, url: http://127.0.0.1:20002, {engine.replace('max_cpu_loras: 3', 'max_cpu_loras: 2')}}}\n"
        "adapters:\n" + "".join(f"  - {{id: a{i}, base_model: m, path: /a/a{i}, rank: 8}}\n" for i in range(3))
    )
    inv = load_inventory(path)
    planned = plan_residency(inv, {"a0": 100.0, "a1": 1.0, "a2": 1.0}, max_replicas=2)
    hosts = sorted(p.engine.split("/")[0] for p in planned.placements if p.adapter == "a0")
    assert hosts == ["h1", "h2"]  # the second copy on h2, though h1's other engine has more room


def test_no_demand_at_all_plans_nothing_expected(tmp_path: Path) -> None:
    inv = make_inventory(tmp_path, adapters=2)
    assert plan_residency(inv, {}).expected_hit_ratio == 1.0  # nothing asked, nothing missed
    assert plan_residency(inv, {"a0": 0.0, "a1": 0.0}).expected_hit_ratio == 1.0


# --- what moves, copies and pins leave; the launch flags and the sizing's fleets --------------------------------
def test_a_move_aside_gives_back_one_slot_so_no_copy_overfills_the_engine_it_left(tmp_path: Path) -> None:
    # a0 (rank 8, busiest) takes e0 (wide, first in pool order); a1 (rank 64) fits only e0, so a0 moves aside to
    # e1 (narrow). a0 then earns a copy (50 > the mean 33.7), but neither engine has room left for one.
    engines = [
        {"kind": "vllm", "max_loras": 1, "max_cpu_loras": 1},
        {"kind": "vllm", "max_loras": 1, "max_cpu_loras": 1, "max_lora_rank": 16},
    ]
    inv = make_inventory(tmp_path, adapters=3, ranks=[8, 64, 64], engines=engines)
    planned = plan_residency(inv, {"a0": 100.0, "a1": 1.0, "a2": 0.0}, max_replicas=2)
    assert sorted((p.adapter, p.engine) for p in planned.placements) == [("a0", "h/e1"), ("a1", "h/e0")]
    assert [a for a, _ in planned.unplaced] == ["a2"]


def test_copies_are_never_pinned_and_pins_stop_at_the_pin_limit_exactly(tmp_path: Path) -> None:
    engines = [{"kind": "vllm", "max_loras": 2, "max_cpu_loras": 4}] * 2
    inv = make_inventory(tmp_path, adapters=6, engines=engines)
    copied = plan_residency(inv, {"a0": 100.0}, max_replicas=2)
    assert sorted((p.engine, p.pinned) for p in copied.placements if p.adapter == "a0") == [
        ("h/e0", False),
        ("h/e1", False),
    ]
    three = [{"kind": "vllm", "max_loras": 3, "max_cpu_loras": 4}] * 2
    inv = make_inventory(tmp_path, adapters=6, engines=three, name="three.yaml")
    limit = pin_limit(ResidencyBook.from_inventory(inv)["h/e0"])  # vLLM leaves a GPU slot unpinned: 2 here
    assert limit == 2
    pins = [f"a{i}" for i in range(2 * limit + 1)]
    pinned = plan_residency(inv, {}, pins=pins)
    assert sum(p.pinned for p in pinned.placements) == 2 * limit
    # A pin past the limit is placed once, unpinned, where there is room: not reported unplaced, not copied.
    assert [p.pinned for p in pinned.placements if p.adapter == pins[-1]] == [False]
    assert pinned.unplaced == ()
    full = make_inventory(tmp_path, adapters=3, engines=engines[:1], name="full.yaml")  # 4 slots, 1 pin
    crowded = plan_residency(full, {"a1": 5.0, "a2": 4.0}, pins=["a0", "a1", "a2"], max_replicas=1)
    assert sorted((p.adapter, p.pinned) for p in crowded.placements) == [("a0", True), ("a1", False), ("a2", False)]
    assert crowded.unplaced == ()


def test_the_launch_flags_hold_the_plans_adapters_in_host_memory_and_the_engines_own_gpu_slots(tmp_path: Path) -> None:
    from lorafleet.inventory import sizing
    from lorafleet.plan.flags import recommend_flags
    from lorafleet.policy.placement import Placement, PlannedResidency
    from lorafleet.units import GIB

    engines = [
        {"kind": "vllm", "max_loras": 2, "max_cpu_loras": 8},
        {"kind": "sglang", "max_loras_per_batch": 3, "max_loaded_loras": 8, "max_lora_rank": 24},
    ]
    inv = make_inventory(tmp_path, adapters=5, ranks=[8, 16, 24], engines=engines)
    plan = PlannedResidency(tuple(Placement(f"a{i}", "h/e0", False) for i in range(5)), (), 1.0)
    vllm, sglang = recommend_flags(inv, plan, None)
    # Five planned adapters in host memory, the engine's own two GPU slots, rank 24 rounded up to vLLM's 32.
    assert vllm.flags == {"--max-loras": 2, "--max-cpu-loras": 5, "--max-lora-rank": 32}
    # Nothing planned: its GPU slots, and its own max_lora_rank (SGLang takes any rank; a power of two here).
    assert sglang.flags == {"--max-loras-per-batch": 3, "--max-loaded-loras": 3, "--max-lora-rank": 32}
    assert vllm.fits is None and vllm.free_bytes is None
    assert vllm.reserved_bytes == 2 * sizing.estimate_bytes(inv.base_models["m"], 32, sizing.KNOWN_MODULES)
    sized, _ = recommend_flags(inv, plan, None, slots=8)
    assert sized.flags["--max-cpu-loras"] == 8 and sized.flags["--max-loras"] == 2
    exact = (vllm.reserved_bytes + 0.5) / GIB  # free memory of exactly what the slots reserve: it fits
    assert recommend_flags(inv, plan, exact)[0].fits is True
    assert recommend_flags(inv, plan, (vllm.reserved_bytes - 1024) / GIB)[0].fits is False


def test_the_sizing_fleets_cap_gpu_slots_to_the_host_slots_and_stop_at_the_adapter_count(tmp_path: Path) -> None:
    from lorafleet.plan.flags import sizing_points, with_slots

    inv = make_inventory(tmp_path, adapters=4, engines=[{"kind": "vllm", "max_loras": 2, "max_cpu_loras": 3}])
    one = with_slots(inv, 1)
    assert [(e.gpu_slots, e.host_slots) for e in one.engines] == [(1, 1)]
    assert [(e.gpu_slots, e.host_slots) for e in with_slots(inv, 8).engines] == [(2, 8)]
    seen: list[int] = []
    points = sizing_points(inv, (1, 2, 4, 8), lambda fleet: seen.append(fleet.engines[0].host_slots) or 0.5)
    assert seen == [1, 2, 4] and points == [(1, 0.5), (2, 0.5), (4, 0.5)]  # 8 slots for 4 adapters add nothing


def test_plan_reads_the_logs_named_or_says_which_is_missing_and_writes_into_new_folders(tmp_path: Path) -> None:
    import json

    from lorafleet.errors import InputError
    from lorafleet.plan.planfile import write_plan
    from lorafleet.plan.report import demand_for

    inv = make_inventory(tmp_path, adapters=2)  # no gateway.logs in it
    log = tmp_path / "access.jsonl"
    log.write_text("".join(json.dumps({"ts": 1.8e9 + i, "model": "a0"}) + "\n" for i in range(3)))
    demand, events = demand_for(inv, (str(log),), 3600.0)
    assert demand.requests == 3 and len(events) == 3
    with pytest.raises(InputError, match="no access log to plan from"):
        demand_for(inv, (), 3600.0)
    missing = tmp_path / "gone.jsonl"
    with pytest.raises(InputError, match=f"^access log {missing} not found$"):
        demand_for(inv, (str(log), str(missing)), 3600.0)
    deep = tmp_path / "plans" / "2026" / "plan.yaml"
    write_plan(deep, "version: 1\n", force=False)
    assert deep.read_text() == "version: 1\n"
