"""Placement: can-serve, the engine order (resident, loading, least loaded, pool order) and pin limits."""

from __future__ import annotations

from pathlib import Path

from lorafleet.kinds import KINDS, SGLANG, VLLM, equivalent_key, slot_keys
from lorafleet.policy.placement import (
    can_pin,
    choose_engine,
    pin_limit,
    pin_limit_for,
    rank_engines,
    serving_pools,
    unservable_reason,
    why_not,
)
from lorafleet.policy.residency import Budget, ResidencyBook
from tests.policy.builders import make_inventory

ENGINES = [
    {"kind": "vllm", "max_loras": 2, "max_cpu_loras": 4},
    {"kind": "vllm", "max_loras": 2, "max_cpu_loras": 4, "max_lora_rank": 16},
    {"kind": "sglang", "max_loras_per_batch": 3},
]


def test_pools_honour_rank_and_byte_budget(tmp_path: Path) -> None:
    inv = make_inventory(tmp_path, adapters=4, engines=ENGINES)  # ranks 8, 16, 32, 64
    pools = serving_pools(inv)
    assert pools["a0"] == ["h/e0", "h/e1", "h/e2"]
    assert pools["a2"] == ["h/e0", "h/e2"]  # rank 32 > e1's 16
    assert "max_lora_rank 16" in (why_not(inv.adapters["a2"], inv.engine("h/e1")) or "")
    tight = make_inventory(tmp_path, adapters=1, engines=[{"kind": "vllm", "lora_budget_mb": 0.001}], name="tight.yaml")
    assert serving_pools(tight)["a0"] == []
    assert "lora_budget_mb" in unservable_reason(tight, tight.adapters["a0"])


def test_engine_order_resident_then_loading_then_least_loaded(tmp_path: Path) -> None:
    inv = make_inventory(tmp_path, adapters=4, engines=ENGINES)
    book = ResidencyBook.from_inventory(inv)
    pool = ["h/e0", "h/e1", "h/e2"]
    assert rank_engines("a0", pool, book.engines) == pool  # all empty: pool order
    book["h/e0"].admit("a1", 1)
    assert rank_engines("a0", pool, book.engines) == ["h/e1", "h/e2", "h/e0"]  # least loaded first
    book["h/e2"].start_load("a0", 1)
    assert rank_engines("a0", pool, book.engines)[0] == "h/e2"  # loading beats empty
    book["h/e1"].admit("a0", 1)
    assert rank_engines("a0", pool, book.engines)[0] == "h/e1"  # resident beats loading
    assert choose_engine("a0", pool, book.engines) == "h/e1"
    load = {"h/e0": 0, "h/e1": 9, "h/e2": 5}
    assert rank_engines("a3", pool, book.engines, load.__getitem__) == ["h/e0", "h/e2", "h/e1"]
    assert choose_engine("a3", [], book.engines) is None


def test_the_least_loaded_engine_is_the_fewest_loads_in_flight_then_the_fewest_held_then_the_first(
    tmp_path: Path,
) -> None:
    """What choose_engine writes out for the replay's hot path is rank_engines' first, case by case."""
    inv = make_inventory(tmp_path, adapters=6, engines=[ENGINES[0], ENGINES[0], ENGINES[0]])
    book = ResidencyBook.from_inventory(inv)
    pool = ["h/e0", "h/e1", "h/e2"]
    assert choose_engine("a5", pool, book.engines) == "h/e0"  # all alike: the first
    book["h/e0"].admit("a1", 1)
    book["h/e0"].admit("a2", 1)
    book["h/e1"].admit("a3", 1)
    book["h/e2"].admit("a4", 1)
    assert choose_engine("a5", pool, book.engines) == "h/e1"  # fewest held, the first of the two
    book["h/e1"].start_load("a0", 1)
    assert choose_engine("a5", pool, book.engines) == "h/e2"  # a load in flight weighs more than one held
    book["h/e2"].start_load("a1", 1)
    assert choose_engine("a5", pool, book.engines) == "h/e0"  # none in flight there, though it holds the most
    for adapter in ("a5", "a4", "a3"):
        assert choose_engine(adapter, pool, book.engines) == rank_engines(adapter, pool, book.engines)[0]


def test_pin_limit_is_the_kinds_and_keeps_a_host_slot(tmp_path: Path) -> None:
    inv = make_inventory(tmp_path, adapters=4, engines=ENGINES)
    book = ResidencyBook.from_inventory(inv)
    assert pin_limit(book["h/e0"]) == 1  # vLLM: 2 GPU slots - 1
    assert pin_limit(book["h/e2"]) == 2  # SGLang: 3 per batch - 1, no host cap
    state = book["h/e0"]
    state.admit("a0", 1)
    state.pin("a0")
    assert can_pin(state, "a0") and not can_pin(state, "a1")
    assert pin_limit_for(SGLANG, Budget(8, 4, None)) == 3  # 7 by the GPU slots, but one of 4 host slots stays free
    assert pin_limit_for(SGLANG, Budget(8, None, None)) == 7
    assert pin_limit_for(VLLM, Budget(1, 4, None)) == 0  # one GPU slot: nothing may be pinned
    assert pin_limit_for(SGLANG, Budget(4, 1, None)) == 0  # one host slot: nothing either


def test_kind_profiles_are_the_one_table() -> None:
    assert set(KINDS) == {"vllm", "sglang"}
    assert VLLM.load_fills_gpu and not SGLANG.load_fills_gpu
    assert SGLANG.engine_pins and not VLLM.engine_pins
    assert SGLANG.unload_frees and not VLLM.unload_frees
    assert VLLM.loads_on_request and not SGLANG.loads_on_request
    assert slot_keys() == ("max_loras", "max_cpu_loras", "max_loras_per_batch", "max_loaded_loras")
    assert equivalent_key("max_loras", SGLANG) == "max_loras_per_batch"
    assert equivalent_key("max_loaded_loras", VLLM) == "max_cpu_loras"
    assert VLLM.flag("max_cpu_loras") == "--max-cpu-loras"
    assert VLLM.max_pinned(1) == 0 and SGLANG.max_pinned(8) == 7


def test_an_engine_holding_the_adapter_ranks_before_one_loading_it_whatever_the_pool_order(tmp_path: Path) -> None:
    inv = make_inventory(tmp_path, adapters=4, engines=ENGINES)
    book = ResidencyBook.from_inventory(inv)
    pool = ["h/e0", "h/e1", "h/e2"]
    book["h/e0"].start_load("a0", 1)  # loading on the first of the pool ...
    book["h/e2"].admit("a0", 1)  # ... resident on the last
    assert rank_engines("a0", pool, book.engines) == ["h/e2", "h/e0", "h/e1"]
    assert choose_engine("a0", pool, book.engines) == "h/e2"  # rank_engines' first is choose_engine's
