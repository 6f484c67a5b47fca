"""The residency book keeps budgets, pins and in-flight loads sacred."""

from __future__ import annotations

import pytest

from lorafleet.policy.residency import Budget, BudgetError, EngineResidency, ResidencyBook


def engine(host_slots: int | None = 3, budget_bytes: int | None = None, gpu_slots: int = 1) -> EngineResidency:
    return EngineResidency("h/e", "vllm", "m", Budget(gpu_slots, host_slots, budget_bytes))


def test_in_flight_loads_reserve_their_slot_and_bytes() -> None:
    e = engine(host_slots=2, budget_bytes=100)
    e.start_load("a", 60)
    assert not e.has_room(50)  # bytes: 60 in flight + 50 > 100
    assert e.has_room(40)
    e.start_load("b", 40)
    assert not e.has_room(1)  # slots
    with pytest.raises(BudgetError):
        e.start_load("c", 1)
    e.finish_load("a")
    assert list(e.resident) == ["a"] and e.used_bytes == 100 and e.violations() == 0


def test_victims_skip_pinned_and_in_flight_and_cover_bytes() -> None:
    e = engine(host_slots=4, budget_bytes=100)
    for name, size in (("a", 30), ("b", 30), ("c", 30)):
        e.start_load(name, size)
        e.finish_load(name)
    e.pins.add("a")
    e.start_load("d", 10)  # in flight: 100 bytes used
    assert e.victims_for(50, ["a", "d", "b", "c"]) == ["b", "c"]
    assert e.victims_for(50, ["a", "d", "b"]) is None
    assert e.victims_for(101, ["b", "c"]) is None  # can never fit


def test_evicting_a_pin_or_a_loading_adapter_is_refused() -> None:
    e = engine()
    e.start_load("a", 1)
    with pytest.raises(BudgetError):
        e.evict("a")
    e.finish_load("a")
    e.pins.add("a")
    with pytest.raises(BudgetError):
        e.evict("a")


def test_lru_order_and_prefetch_use() -> None:
    e = engine(host_slots=4)
    for name in "abc":
        e.start_load(name, 1)
        e.finish_load(name, prefetched=name == "b")
    assert e.touch("b") is True and e.touch("b") is False
    assert list(e.resident) == ["a", "c", "b"]
    e.start_load("d", 1)
    e.finish_load("d", prefetched=True)
    assert e.evict("d") is True  # loaded ahead, never used: waste


def test_gpu_tier_is_lru_within_its_slots() -> None:
    e = engine(host_slots=3, gpu_slots=2)
    for name in "abc":
        e.start_load(name, 1)
        e.finish_load(name)  # vLLM: a load takes a GPU slot at once
    assert list(e.gpu) == ["b", "c"]
    assert e.use_gpu("b") is True and e.use_gpu("a") is False
    assert list(e.gpu) == ["b", "a"]


def test_restart_forgets_everything() -> None:
    e = engine()
    e.start_load("a", 5)
    e.finish_load("a")
    e.start_load("b", 5)
    e.forget_all()
    assert e.used_slots == 0 and e.used_bytes == 0 and not e.gpu


def test_admit_evicts_victims_then_holds_adapter_most_recent() -> None:
    e = engine(host_slots=2)
    e.admit("a", 1)
    e.admit("b", 1)
    e.admit("a", 1)  # already held: only touched
    assert list(e.resident) == ["b", "a"]
    e.admit("c", 1, victims=["b"])
    assert list(e.resident) == ["a", "c"] and e.violations() == 0


def test_snapshot_restore_round_trip_keeps_order_and_pins() -> None:
    e = engine(host_slots=3, gpu_slots=2)
    for name in ("a", "b", "c"):
        e.admit(name, 10)
    e.pin("b")
    copy = engine(host_slots=3, gpu_slots=2)
    copy.restore(e.snapshot())
    assert copy.snapshot() == e.snapshot() == [("a", 10, False), ("b", 10, True), ("c", 10, False)]


def test_restore_into_a_smaller_budget_keeps_the_most_recent() -> None:
    small = engine(host_slots=2, budget_bytes=25)
    small.restore([("a", 10, False), ("b", 20, False), ("c", 5, False)])
    assert list(small.resident) == ["b", "c"] and small.violations() == 0


def test_pin_needs_a_held_adapter_and_unpin_releases() -> None:
    e = engine()
    with pytest.raises(BudgetError):
        e.pin("ghost")
    e.admit("a", 1)
    e.pin("a")
    with pytest.raises(BudgetError):
        e.evict("a")
    e.unpin("a")
    e.evict("a")
    assert e.snapshot() == []


def test_load_fills_gpu_comes_from_the_kind_profile() -> None:
    vllm = EngineResidency("h/v", "vllm", "m", Budget(1, 2, None))
    sglang = EngineResidency("h/s", "sglang", "m", Budget(2, None, None))
    vllm.admit("a", 1)
    sglang.admit("a", 1)
    assert list(vllm.gpu) == ["a"] and list(sglang.gpu) == []


def test_a_vllm_engine_evicts_a_chosen_victim_only_after_the_older_ones_are_touched() -> None:
    e = engine(host_slots=4)
    for name in ("a", "b", "c", "d"):
        e.admit(name, 1)
    assert e.keep_for(["a"]) == []  # already the engine's own choice: nothing to send
    assert e.keep_for(["c"]) == ["a", "b"]  # touch the two older ones, then the engine drops c
    assert e.keep_for(["b", "d"]) == ["a", "c"]
    for kept in e.keep_for(["c"]):
        e.keep(kept)
    assert list(e.resident) == ["c", "d", "a", "b"]  # c is now the engine's least recently used


def test_an_sglang_engine_unloads_its_victims_without_touches() -> None:
    s = EngineResidency("h/s", "sglang", "m", Budget(2, 4, None))
    for name in ("a", "b", "c"):
        s.admit(name, 1)
    assert s.keep_for(["c"]) == []


def test_an_admitted_or_restored_adapter_is_not_an_unused_prefetch() -> None:
    e = engine(host_slots=3)
    e.admit("a", 1)
    e.restore([("b", 1, False)])
    assert e.evict("a") is False and e.evict("b") is False  # evicting them is not prefetch waste


def test_an_adapters_share_of_a_budget_is_a_slots_or_its_bytes_whichever_is_more() -> None:
    assert Budget(2, 8, None).share(10**9) == 1 / 8  # no byte budget: every adapter takes one slot's share
    assert Budget(2, 8, 1000).share(100) == 1 / 8  # its bytes are less than a slot's share
    assert Budget(2, 8, 1000).share(500) == 0.5  # ... or more
    assert Budget(1, None, 1000).share(50) == 1.0  # SGLang without a host cap: its GPU slots


def test_a_match_takes_the_other_engines_contents_pins_recency_gpu_tier_and_unused_prefetches() -> None:
    mine, theirs = engine(host_slots=4, gpu_slots=2), engine(host_slots=4, gpu_slots=2)
    for name in ("p", "x", "y"):
        mine.admit(name, 10)
    mine.pin("p")
    for name in ("c", "y", "b"):
        theirs.start_load(name, 20)
        theirs.finish_load(name, prefetched=name == "b")
    theirs.pin("b")
    theirs.touch("c")  # recency there: y, b, c
    dropped, adopted = mine.match(theirs)
    assert dropped == ["p", "x"] and adopted == ["c", "b"]  # a pin is the other engine's to keep, or not
    assert list(mine.resident) == ["y", "b", "c"] and mine.pins == {"b"}
    assert mine.used_bytes == 10 + 20 + 20 and mine.sizes["c"] == 20 and mine.violations() == 0
    assert list(mine.gpu) == list(theirs.gpu) and mine.prefetched == {"b"}
    assert mine.keep_for(["c"]) == ["y", "b"]  # recency is theirs
    assert mine.used_at == {"y": 1, "b": 2, "c": 3} and mine.stamp == 3  # the next use is the newest
    mine.start_load("z", 1)
    with pytest.raises(BudgetError):
        mine.match(theirs)  # never with a load of its own in flight (its place in its loader is not theirs)


def test_a_match_takes_the_other_engines_loads_in_flight_first_placed_by_the_requests_that_wait_on_them() -> None:
    mine, theirs = engine(host_slots=3), engine(host_slots=4)
    for name in ("x", "y"):
        mine.admit(name, 1)
    for name in ("b", "c"):
        theirs.admit(name, 1)
    theirs.start_load("w", 5)  # a request waits on it, after b's and before c's last use
    theirs.start_load("p", 7)  # a prefetch nobody asked for yet
    theirs.touch("b")
    theirs.note_use("w")
    theirs.touch("c")
    dropped, adopted = mine.match(theirs)
    assert dropped == ["x", "y"] and adopted == ["c"]  # b does not fit: the loads in flight are reserved first
    assert mine.in_flight == {"w": 5, "p": 7} and list(mine.resident) == ["c"] and mine.used_bytes == 13
    assert sorted(mine.used_at, key=mine.used_at.__getitem__) == ["w", "c"] and mine.stamp == 2
    mine.finish_load("p")
    mine.finish_load("w")
    assert list(mine.resident) == ["w", "c", "p"]  # w by its request, p most recent by its load, as on theirs


def test_a_match_adopts_the_most_recent_while_room_lasts() -> None:
    mine, theirs = engine(host_slots=2), engine(host_slots=3)
    for name in ("a", "b", "c"):
        theirs.admit(name, 1)
    mine.admit("p", 1)
    dropped, adopted = mine.match(theirs)
    assert dropped == ["p"] and adopted == ["c", "b"] and list(mine.resident) == ["b", "c"]


def test_a_pinned_adapter_held_here_and_loading_there_stays_held_here() -> None:
    mine, theirs = engine(host_slots=3), engine(host_slots=3)
    mine.admit("p", 1)
    mine.pin("p")
    theirs.start_load("p", 1)
    theirs.pin("p")
    dropped, adopted = mine.match(theirs)
    assert dropped == [] and adopted == [] and list(mine.resident) == ["p"] and not mine.in_flight


def test_an_adapter_in_use_is_no_victim_and_needs_no_touch() -> None:
    """The engine touches a running request's adapter at every step: it is never its least recently used, so the
    book neither picks it as a victim nor spends a touch to keep it."""
    mine = engine(host_slots=3)
    for name in ("a", "b", "c"):
        mine.admit(name, 1)
    mine.running["a"] = 1
    assert mine.victims_for(1, ["a", "b", "c"]) == ["b"]
    assert mine.keep_for(["c"]) == ["b"]  # a, older still, stays on the engine untouched


def test_an_engine_runs_past_its_slots_only_by_its_own_load_and_a_later_load_never_adds_to_the_excess() -> None:
    """With every adapter in use the engine takes a request's adapter past its slots (`overrun`); anything else
    needs room. Past its budget, a load needs room for itself alone and takes as much of the excess as the order
    gives (the engine's next load evicts what it can); one that would add to the excess is refused."""
    e = engine(host_slots=2)
    for name in ("a", "b"):
        e.start_load(name, 10)
        e.finish_load(name)
        e.run(name)
    assert e.victims_for(10, e.resident) is None  # both in use: no room for a load of lorafleet's
    with pytest.raises(BudgetError):
        e.start_load("c", 10)
    assert e.victims_for(10, e.resident, overrun=True) == []  # the engine's own: past its slots
    e.start_load("c", 10, overrun=True)
    e.finish_load("c")
    e.run("c")
    assert e.excess() == (1, 0) and e.violations() == 1
    assert e.victims_for(10, e.resident) is None  # all three still in use: no victim at all
    e.ran("a")
    assert e.victims_for(10, e.resident) == ["a"]  # room for d alone: the excess stays, not grown
    e.ran("b")
    assert e.victims_for(10, e.resident) == ["a", "b"]  # and back within the slots as far as the order goes
    assert e.victims_for(10, ["b"]) == ["b"] and e.victims_for(10, []) is None


def test_a_load_recorded_on_an_engine_past_its_slots_keeps_the_excess_as_it_was() -> None:
    """A load that already happened (warm, another process's load the daemon notices) on an engine past its
    slots: the victims make room for it alone (`victims_for`) and the book holds it, as far past its slots as
    before (a BudgetError here stopped the daemon's notice of another process's load). Within the budget the
    rule is unchanged: a load recorded without room is refused."""
    e = engine(host_slots=2)
    for name in ("a", "b"):
        e.admit(name, 10)
        e.run(name)
    e.start_load("c", 10, overrun=True)
    e.finish_load("c")
    e.run("c")
    e.ran("a")
    victims = e.victims_for(10, e.resident)
    assert victims == ["a"]
    e.admit("d", 10, victims)
    assert list(e.resident) == ["b", "c", "d"] and e.excess() == (1, 0)
    within = engine(host_slots=1)
    within.admit("a", 10)
    with pytest.raises(BudgetError):
        within.admit("b", 10)


def test_an_engine_full_to_its_last_slot_or_byte_is_not_past_its_budget() -> None:
    """Past its budget means more than its slots or bytes (requests in use hold it there), not exactly at them:
    the leader's copies are matched to a live engine only while it is within its budget."""
    e = engine(host_slots=3, budget_bytes=100)
    for name, size in (("a", 60), ("b", 40)):
        e.start_load(name, size)
        e.finish_load(name)
    assert e.used_bytes == 100 and not e.past_budget()
    e.start_load("c", 1, overrun=True)
    assert e.past_budget()
    s = engine(host_slots=2)
    for name in ("a", "b"):
        s.start_load(name, 1)
    assert s.used_slots == 2 and not s.past_budget()
    s.start_load("c", 1, overrun=True)
    assert s.past_budget()


def test_an_engine_leaves_the_book_before_and_after_its_holder_index_is_built() -> None:
    """A reload drops engines from a book whose index may not exist yet: both ways the engine is gone, and an
    index forgets what it held."""

    def book() -> ResidencyBook:
        b = ResidencyBook({k: EngineResidency(k, "vllm", "m", Budget(1, 2, None)) for k in ("h/e0", "h/e1")})
        b.engines["h/e0"].admit("a", 1)
        return b

    plain = book()
    del plain.engines["h/e0"]
    assert list(plain.engines) == ["h/e1"]
    indexed = book()
    index = indexed.indexed()
    assert index.resident == {"a": {"h/e0"}}
    del indexed.engines["h/e0"]
    assert list(indexed.engines) == ["h/e1"] and index.resident == {}


def test_an_engines_pickled_state_leaves_the_books_index_out() -> None:
    """What a daemon's memory freezes is the engine's own state: the book's holder index is rebuilt when next
    needed, never written with it."""
    import pickle

    book = ResidencyBook({"h/e": EngineResidency("h/e", "vllm", "m", Budget(1, 2, None))})
    book.engines["h/e"].admit("a", 1)
    index = book.indexed()
    state = book.engines["h/e"].__getstate__()
    assert "index" not in state and state["resident"] == {"a": None}
    back = pickle.loads(pickle.dumps(book))
    assert back.engines["h/e"].index is None and back.indexed() is not index
    assert back.indexed().resident == {"a": {"h/e"}}


def test_past_its_bytes_a_load_needs_room_for_itself_alone_to_the_byte() -> None:
    """120 bytes held of 100 (a request's own load took it past): a load of 50 whose one free victim frees
    exactly 50 leaves the excess at 20, as it was — allowed; one byte more would add to it — refused."""
    e = engine(budget_bytes=100)
    for name in ("a", "b"):
        e.start_load(name, 50)
        e.finish_load(name)
        e.run(name)
    e.start_load("c", 20, overrun=True)
    e.finish_load("c")
    e.run("c")
    assert e.excess() == (0, 20)
    e.ran("a")
    assert e.victims_for(50, e.resident) == ["a"]
    assert e.victims_for(51, e.resident) is None


def test_the_engines_own_victim_is_its_oldest_resident_neither_pinned_nor_in_use() -> None:
    e = engine(host_slots=3)
    for name in ("a", "b", "c"):
        e.admit(name, 1)
    assert e.own_victim() == "a" and e.evictable("a")
    e.pins.add("a")
    e.run("b")
    assert e.own_victim() == "c"
    assert not e.evictable("a") and not e.evictable("b") and not e.evictable("x")
    e.run("c")
    assert e.own_victim() is None
    assert e.victims_for(1, ["a", "b", "c"]) is None  # the same rule: nothing can go
