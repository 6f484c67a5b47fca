"""Engines that keep their own LRU (drive/standin.py): what replay's log-only visibility serves requests from."""

from __future__ import annotations

from pathlib import Path

import pytest

from lorafleet.drive.standin import StandInEngines
from lorafleet.policy.core import HIT, LATE, MISS, Policy, PolicyCore
from tests.policy.builders import make_inventory


def standins(tmp: Path, kind: str = "vllm") -> tuple[StandInEngines, PolicyCore]:
    spec: dict[str, object] = {"kind": kind, "max_loras": 1, "max_cpu_loras": 2}
    if kind == "sglang":
        spec = {"kind": kind, "max_loras_per_batch": 1, "max_loaded_loras": 2}
    core = PolicyCore(make_inventory(tmp, adapters=4, engines=[spec], name=f"{kind}.yaml"), Policy())
    return StandInEngines(core.book.engines, core.load_ms, core.sizes), core


def served(engines: StandInEngines, at: float, adapter: str) -> tuple[str, float]:
    """A request that ends as it arrives: its outcome and wait."""
    answer = engines.arrive(at, "h/e0", adapter)
    engines.end("h/e0", adapter)
    return answer


def test_a_request_loads_its_adapter_itself_and_the_least_recently_used_goes(tmp_path: Path) -> None:
    engines, core = standins(tmp_path)
    cold = core.load_ms["h/e0"].cold_ms(core.sizes["a0"])
    outcome, waited = served(engines, 1000.0, "a0")
    assert outcome == MISS and waited == pytest.approx(cold)
    outcome, waited = served(engines, 1000.0 + cold / 2000.0, "a0")
    assert outcome == LATE and waited == pytest.approx(cold / 2)  # its load is half done
    served(engines, 1010.0, "a1")
    copy = core.load_ms["h/e0"].copy_ms(core.sizes["a0"])
    assert served(engines, 1020.0, "a0") == (HIT, copy)  # a0 now the most recent; a1 had its one GPU slot
    served(engines, 1030.0, "a2")  # two slots: a1, the least recently used, goes
    assert engines.holds("h/e0") == ["a0", "a2"]


def test_a_touch_or_prefetch_is_a_use_and_loads_what_is_absent(tmp_path: Path) -> None:
    engines, _ = standins(tmp_path)
    served(engines, 1000.0, "a0")
    served(engines, 1010.0, "a1")
    assert engines.use(1020.0, "h/e0", "a0") is False  # held: made most recent, nothing read
    assert engines.use(1030.0, "h/e0", "a2") is True  # absent: loaded, the least recently used (a1) out
    assert engines.holds("h/e0") == ["a0", "a2"]


def test_loads_wait_for_the_engines_one_loader(tmp_path: Path) -> None:
    engines, core = standins(tmp_path)
    engines.use(1000.0, "h/e0", "a0")
    first = engines.ready_at("h/e0", "a0")
    engines.use(1000.0, "h/e0", "a1")
    assert (
        first is not None
        and engines.ready_at("h/e0", "a1") == first + core.load_ms["h/e0"].cold_ms(core.sizes["a1"]) / 1000.0
    )


def test_only_an_engine_that_holds_pins_keeps_them_past_its_lru(tmp_path: Path) -> None:
    for kind, kept in (("sglang", True), ("vllm", False)):
        engines, _ = standins(tmp_path, kind)
        engines.use(1000.0, "h/e0", "a0", pin=True)
        served(engines, 1010.0, "a1")
        served(engines, 1020.0, "a2")
        assert ("a0" in engines.holds("h/e0")) is kept, kind
        engines.unload("h/e0", "a0")
        assert "a0" not in engines.holds("h/e0")


def test_a_request_arriving_the_instant_its_load_completes_is_a_hit(tmp_path: Path) -> None:
    """As in the session, where a completion at a request's instant is taken first (Session.advance)."""
    engines, _ = standins(tmp_path)
    engines.use(1000.0, "h/e0", "a0")
    ready = engines.ready_at("h/e0", "a0")
    assert ready is not None and ready > 1000.0
    assert served(engines, ready, "a0") == (HIT, 0.0)


def test_an_adapter_in_use_is_never_the_one_evicted_and_its_requests_end_makes_it_most_recent(tmp_path: Path) -> None:
    """vLLM touches the adapters of every step's batch: one whose request still runs is never its least recently
    used, and it is the most recent when that request ends (a long request arrived first, ended last)."""
    engines, _ = standins(tmp_path)
    engines.arrive(1000.0, "h/e0", "a0")  # a long request: runs until 1050
    served(engines, 1010.0, "a1")
    served(engines, 1020.0, "a2")  # two slots: a1 goes, not a0 (in use), though a0 arrived first
    assert engines.holds("h/e0") == ["a0", "a2"]
    engines.arrive(1030.0, "h/e0", "a2")
    engines.end("h/e0", "a2")
    engines.end("h/e0", "a0")  # the long request ends last: a0 the most recent
    assert engines.holds("h/e0") == ["a2", "a0"]
    served(engines, 1060.0, "a3")  # and a2, the least recently used now, goes
    assert engines.holds("h/e0") == ["a0", "a3"]


def test_the_gateway_sends_a_request_where_its_adapter_is_else_where_its_name_hashes(tmp_path: Path) -> None:
    """A holder first (one with it loaded before one loading it, then pool order); an adapter held nowhere goes
    where its name hashes, whatever the engines hold, load or run: the same engine every time, the adapters
    spread over the pool."""
    spec = {"kind": "vllm", "max_loras": 1, "max_cpu_loras": 1}
    core = PolicyCore(make_inventory(tmp_path, adapters=12, engines=[spec, spec]), Policy())
    engines = StandInEngines(core.book.engines, core.load_ms, core.sizes)
    pool = ["h/e0", "h/e1"]
    hashed = {f"a{i}": engines.route(f"a{i}", pool, 1000.0) for i in range(12)}
    assert set(hashed.values()) == set(pool)  # spread over both
    a, b = next(n for n in hashed if hashed[n] == "h/e0"), next(n for n in hashed if hashed[n] == "h/e1")
    engines.arrive(1000.0, "h/e0", b)  # b loading on e0, where it does not hash
    assert engines.route(b, pool, 1000.0) == "h/e0"  # held (loading) there
    engines.arrive(1000.0, "h/e1", a)  # e1 busy loading and running a, e0 running b
    assert engines.route(a, pool, 1000.0) == "h/e1"
    others = [n for n in hashed if n not in (a, b)]
    assert all(engines.route(n, pool, 1000.0) == hashed[n] for n in others)  # as before, whatever is held
    engines.use(1010.0, "h/e1", b)  # b on both, loading on e1: the one with it loaded
    assert engines.route(b, pool, 1010.0) == "h/e0"
    assert engines.route(b, pool, 1020.0) == "h/e0"  # both loaded: pool order
    engines.end("h/e0", b)
    engines.unload("h/e0", b)
    assert engines.route(b, pool, 1020.0) == "h/e1"  # gone from e0: where it is left
    assert engines.route(others[0], [], 1020.0) is None  # held nowhere, no engine can serve it


def test_an_engine_that_lost_the_adapter_is_no_holder_and_one_with_it_loaded_comes_before_one_loading_it(
    tmp_path: Path,
) -> None:
    spec = {"kind": "vllm", "max_loras": 1, "max_cpu_loras": 1}
    core = PolicyCore(make_inventory(tmp_path, adapters=12, engines=[spec, spec]), Policy())
    engines = StandInEngines(core.book.engines, core.load_ms, core.sizes)
    pool = ["h/e0", "h/e1"]
    b, c = [f"a{i}" for i in range(12) if engines.route(f"a{i}", pool, 1000.0) == "h/e1"][:2]
    engines.use(1000.0, "h/e0", b)
    assert engines.route(b, pool, 1000.0) == "h/e0"
    engines.use(1000.0, "h/e0", c)  # one slot: b evicted from e0
    assert engines.route(b, pool, 1000.0) == "h/e1"  # held nowhere: where it hashes
    engines.use(1000.0, "h/e1", b)
    engines.use(1100.0, "h/e0", b)  # loaded on e1 by now, loading on e0, the first in pool order
    assert engines.route(b, pool, 1100.0) == "h/e1"


def test_a_name_stays_registered_past_its_eviction_and_leaves_with_an_unload(tmp_path: Path) -> None:
    """vLLM keeps an adapter's name once loaded (a load call for it is answered "already loaded") though its cache
    evicted it; an unload forgets the name."""
    engines, _ = standins(tmp_path)
    assert not engines.registered("h/e0", "a0")
    served(engines, 1000.0, "a0")
    served(engines, 1010.0, "a1")
    served(engines, 1020.0, "a2")  # two slots: a0 evicted
    assert "a0" not in engines.holds("h/e0") and engines.registered("h/e0", "a0")
    engines.use(1030.0, "h/e0", "a3")  # a load call's: registered too
    assert engines.registered("h/e0", "a3")
    engines.unload("h/e0", "a3")
    assert not engines.registered("h/e0", "a3")


def test_an_engine_evicts_its_least_recently_used_past_its_bytes_and_holds_exactly_its_budget(tmp_path: Path) -> None:
    """Bytes bind as slots do: full to its last byte it evicts nothing; past it, its least recently used go
    until it fits; an unload frees what the adapter took."""
    from lorafleet.inventory.model import LoadModel
    from lorafleet.policy.residency import Budget, EngineResidency

    state = EngineResidency("h/e0", "vllm", "m", Budget(1, 8, 100))
    engines = StandInEngines({"h/e0": state}, {"h/e0": LoadModel()}, {"a": 40, "b": 60, "c": 30, "d": 10})
    served(engines, 1000.0, "a")
    served(engines, 1010.0, "b")
    assert engines.holds("h/e0") == ["a", "b"]  # 100 of 100
    served(engines, 1020.0, "c")
    assert engines.holds("h/e0") == ["b", "c"]  # 130: a (40) goes, and b stays
    engines.unload("h/e0", "b")
    served(engines, 1030.0, "a")
    served(engines, 1040.0, "d")
    assert engines.holds("h/e0") == ["c", "a", "d"]  # 80: room for both
    assert engines.last_done == engines.ready_at("h/e0", "d")  # the latest load's end


def test_only_a_load_that_says_so_pins_on_an_engine_that_holds_pins(tmp_path: Path) -> None:
    """A touch or a prefetch without a pin is a use like a request's: the adapter can go with the LRU."""
    engines, _ = standins(tmp_path, "sglang")
    engines.use(1000.0, "h/e0", "a0")
    served(engines, 1010.0, "a1")
    served(engines, 1020.0, "a2")
    assert engines.holds("h/e0") == ["a1", "a2"]


def test_the_gateway_takes_an_engine_whose_load_ends_at_that_instant_as_holding_it(tmp_path: Path) -> None:
    """Done at the request's instant is loaded (as a request then is a hit): pool order decides between it and an
    engine that finished earlier."""
    spec = {"kind": "vllm", "max_loras": 1, "max_cpu_loras": 2}
    core = PolicyCore(make_inventory(tmp_path, adapters=2, engines=[spec, spec]), Policy())
    engines = StandInEngines(core.book.engines, core.load_ms, core.sizes)
    engines.use(1000.0, "h/e1", "a0")
    engines.use(1000.5, "h/e0", "a0")
    done = engines.ready_at("h/e0", "a0")
    assert done is not None and done > (engines.ready_at("h/e1", "a0") or 0.0)
    assert engines.route("a0", ["h/e0", "h/e1"], done) == "h/e0"
    assert engines.route("a0", ["h/e0", "h/e1"], done - 0.001) == "h/e1"


def test_a_hit_outside_the_gpu_slots_waits_the_copy_into_one_and_a_hit_inside_waits_nothing(tmp_path: Path) -> None:
    """The book's GPU tier rule (`use_gpu_slot`), on the engine alone: a request takes a slot, least recently used
    out; a touch (a 1-token request) takes one; a load takes one only on a kind whose load fills a slot (vLLM);
    an adapter evicted from host memory leaves its slot."""
    engines, core = standins(tmp_path)
    copy = core.load_ms["h/e0"].copy_ms(core.sizes["a0"])
    served(engines, 1000.0, "a0")  # a miss: its request's batch takes the one GPU slot
    assert served(engines, 1010.0, "a0") == (HIT, 0.0) and engines.gpu_hits == 1
    served(engines, 1020.0, "a1")  # a1 takes the slot
    assert served(engines, 1030.0, "a0") == (HIT, copy) and engines.gpu_hits == 1
    engines.use(1040.0, "h/e0", "a1", request=True)  # a touch of a1: the slot is a1's again
    assert served(engines, 1050.0, "a0") == (HIT, copy)
    engines.use(1060.0, "h/e0", "a1")  # a vLLM load fills a slot: a1's
    assert served(engines, 1070.0, "a0") == (HIT, copy) and engines.gpu_hits == 1
    sglang, core = standins(tmp_path, "sglang")
    served(sglang, 1000.0, "a0")
    sglang.use(1010.0, "h/e0", "a1")  # an SGLang load does not: a0 keeps the slot
    assert served(sglang, 1020.0, "a0") == (HIT, 0.0)
    sglang.use(1025.0, "h/e0", "a1")  # most recent in host memory: a0 is the least recently used there
    sglang.use(1030.0, "h/e0", "a2")  # two host slots: a0 goes from host memory, and from its GPU slot
    assert sglang.holds("h/e0") == ["a1", "a2"] and not sglang.engines["h/e0"].gpu
    served(sglang, 1040.0, "a1")
    sglang.unload("h/e0", "a1")  # an unload frees its GPU slot too
    assert not sglang.engines["h/e0"].gpu
    served(sglang, 1050.0, "a0")
    sglang.use(1060.0, "h/e0", "a2", request=True)  # a touch is a request on any kind: a2 takes the slot
    assert served(sglang, 1070.0, "a0") == (HIT, core.load_ms["h/e0"].copy_ms(core.sizes["a0"]))


def test_an_adapter_another_process_loaded_is_held_while_it_fits_and_evicts_nothing(tmp_path: Path) -> None:
    """What a reconcile finds another process loaded, the book adopts while it has room (it evicts nothing for
    it): the stand-ins take it the same way, most recent, ready at once."""
    engines, _ = standins(tmp_path)  # two host slots
    served(engines, 1000.0, "a0")
    ready = engines.ready_at("h/e0", "a0")
    assert engines.adopt(1005.0, "h/e0", "a0") is False  # held already: left as it was
    assert engines.ready_at("h/e0", "a0") == ready
    assert engines.adopt(1010.0, "h/e0", "a1") is True
    assert engines.holds("h/e0") == ["a0", "a1"] and engines.ready_at("h/e0", "a1") == 1010.0
    assert engines.registered("h/e0", "a1")
    assert engines.adopt(1020.0, "h/e0", "a2") is False  # full: a0 and a1 stay, a2 is not taken
    assert engines.holds("h/e0") == ["a0", "a1"]


def test_a_load_takes_its_gpu_slot_when_it_is_done_not_when_it_is_asked_for(tmp_path: Path) -> None:
    """As the book's `finish_load`: a1's request came at 1002 to an engine with one GPU slot, a0's; a0's request a
    few ms later, while a1 still loaded, found a0 in the slot. Once a1's load was done, its batch had the slot:
    a0's next request waited the copy. An adapter evicted before its load was done takes no slot for it."""
    engines, core = standins(tmp_path)
    cold = core.load_ms["h/e0"].cold_ms(core.sizes["a1"]) / 1000.0
    served(engines, 1000.0, "a0")
    served(engines, 1002.0, "a1")  # a miss: loading until 1002 + cold
    assert served(engines, 1002.0 + cold / 2, "a0") == (HIT, 0.0)
    assert served(engines, 1002.0 + 2 * cold, "a0")[1] > 0.0  # a1 took the slot as its load was done
    engines.use(1010.0, "h/e0", "a2")  # loading until 1010 + cold; two host slots: a1 goes
    engines.unload("h/e0", "a2")  # gone before its load was done
    assert served(engines, 1011.0, "a0") == (HIT, 0.0)  # a0 kept the slot: a2's load took none


def test_an_adapter_adopted_on_vllm_takes_a_gpu_slot_as_the_book_admits_it(tmp_path: Path) -> None:
    """vLLM's reconcile adopts what runs, in a GPU slot (the book's `admit` fills one where a load does); SGLang's
    adopts what is registered, in host memory only."""
    engines, _ = standins(tmp_path)
    served(engines, 1000.0, "a0")
    engines.adopt(1010.0, "h/e0", "a1")
    assert served(engines, 1011.0, "a1") == (HIT, 0.0)
    sglang, core = standins(tmp_path, "sglang")
    served(sglang, 1000.0, "a0")
    sglang.adopt(1010.0, "h/e0", "a1")
    assert served(sglang, 1011.0, "a1") == (HIT, core.load_ms["h/e0"].copy_ms(core.sizes["a1"]))


def test_a_request_that_waited_on_a_load_takes_a_gpu_slot_when_it_is_done_where_loads_fill_none(
    tmp_path: Path,
) -> None:
    """SGLang's load fills no GPU slot, but a request that came while it loaded runs with the adapter once it is
    done (the book's `finish_load`: a waiting request's batch): the next request finds it in its slot."""
    engines, core = standins(tmp_path, "sglang")
    engines.use(1000.0, "h/e0", "a0")
    ready = engines.ready_at("h/e0", "a0")
    assert ready is not None and served(engines, (1000.0 + ready) / 2, "a0")[0] == LATE
    assert served(engines, ready + 1.0, "a0") == (HIT, 0.0)
    engines.use(1100.0, "h/e0", "a1")  # no request waited on it: no slot
    assert served(engines, 1101.0, "a1") == (HIT, core.load_ms["h/e0"].copy_ms(core.sizes["a1"]))


def test_a_starting_point_counts_its_bytes_and_pins_only_where_the_engine_holds_pins(tmp_path: Path) -> None:
    """Held from the start, adapters take their bytes of the budget: a load past it evicts the least recently
    used. vLLM holds no pins of its own: one the book pinned is evicted there like any other."""
    spec = {"kind": "vllm", "max_loras": 2, "max_cpu_loras": 8, "lora_budget_mb": 0.1}
    core = PolicyCore(make_inventory(tmp_path, adapters=4, engines=[spec], name="bytes.yaml"), Policy())
    engines = StandInEngines(core.book.engines, core.load_ms, core.sizes)
    sizes, budget = core.sizes, 0.1 * 1024 * 1024
    assert sizes["a0"] + sizes["a1"] + sizes["a2"] <= budget < sum(sizes.values())  # a3 fits only if a0 goes
    engines.hold("h/e0", [("a0", 0.0), ("a1", 0.0), ("a2", 0.0)], pins={"a0"})
    assert engines.engines["h/e0"].used_bytes == sizes["a0"] + sizes["a1"] + sizes["a2"]
    served(engines, 1000.0, "a3")
    assert engines.holds("h/e0") == ["a2", "a3"]  # a0 (pinned by the book) and a1 went, least recent first


def test_a_load_ahead_of_demand_is_used_by_the_first_request_after_it_and_wasted_if_let_go_unused(
    tmp_path: Path,
) -> None:
    """A prefetch that loads: the first request after it uses it (a hit avoids its whole load time; a second
    request uses nothing); one still loading when its request comes is used too, avoiding what it did not
    wait; one let go before any request came was wasted. A touch is no use of it, nor is a demand load one."""
    engines, core = standins(tmp_path)
    cold = core.load_ms["h/e0"].cold_ms(core.sizes["a0"])
    assert engines.use(1000.0, "h/e0", "a0", ahead=True)
    served(engines, 1010.0, "a0")
    served(engines, 1020.0, "a0")
    assert (engines.prefetch_used, engines.cold_ms_avoided) == (1, pytest.approx(cold))
    engines.use(1030.0, "h/e0", "a1", ahead=True)
    cold1 = core.load_ms["h/e0"].cold_ms(core.sizes["a1"])
    outcome, waited = served(engines, 1030.0 + cold1 / 4000.0, "a1")  # a quarter of its load done
    assert outcome == LATE and waited == pytest.approx(0.75 * cold1) and engines.prefetch_used == 2
    assert engines.cold_ms_avoided == pytest.approx(cold + cold1 / 4)
    engines.use(1040.0, "h/e0", "a2", ahead=True)  # two slots: a0 out (used), a1 kept
    engines.use(1041.0, "h/e0", "a2", request=True)  # a touch of it uses nothing
    engines.use(1042.0, "h/e0", "a3")  # a demand load: a1, the least recently used, out
    served(engines, 1050.0, "a3")
    assert engines.wasted_prefetches == 0
    engines.use(1060.0, "h/e0", "a0")  # a2 out: never used
    assert (engines.prefetch_used, engines.wasted_prefetches) == (2, 1)


def test_a_load_ahead_of_an_adapter_the_engine_holds_loads_nothing_and_no_request_uses_it(tmp_path: Path) -> None:
    """A prefetch of an adapter the engine already holds (a request still running brought it, which the book has
    not read yet) loads nothing: the request after it used no prefetch and avoided nothing, and its eviction
    wastes none. The same for a starting point given as loaded ahead (`hold`): its first request uses it."""
    engines, _ = standins(tmp_path)
    served(engines, 1000.0, "a0")
    assert not engines.use(1010.0, "h/e0", "a0", ahead=True)
    served(engines, 1020.0, "a0")
    served(engines, 1030.0, "a1")
    served(engines, 1040.0, "a2")  # a0 out
    assert (engines.prefetch_used, engines.cold_ms_avoided, engines.wasted_prefetches) == (0, 0.0, 0)
    engines.hold("h/e0", [("a3", 1000.0)], ahead={"a3"})
    served(engines, 1050.0, "a3")
    assert engines.prefetch_used == 1


def test_a_hit_on_a_prefetch_outside_the_gpu_slots_avoided_its_load_less_the_copy_it_waited(tmp_path: Path) -> None:
    """One GPU slot: a0 prefetched, then a1 takes the slot; a0's request is a hit that waits the copy into it, and
    so avoided the load time less that copy (as the session counts it), not the whole load."""
    engines, core = standins(tmp_path)
    cold = core.load_ms["h/e0"].cold_ms(core.sizes["a0"])
    engines.use(1000.0, "h/e0", "a0", ahead=True)
    served(engines, 1010.0, "a1")
    outcome, waited = served(engines, 1020.0, "a0")
    assert outcome == HIT and waited > 0 and waited == pytest.approx(core.load_ms["h/e0"].copy_ms(core.sizes["a0"]))
    assert engines.cold_ms_avoided == pytest.approx(cold - waited)
