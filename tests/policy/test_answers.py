"""How a live session takes its engines' answers: each call counted from its answer, and the load-time
calibration — the model's cold-load time, scaled per engine by a moving average of what that engine's loads
measured (a request's wait on a live load is estimated from it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lorafleet.drive.policies import make_policy
from lorafleet.drive.session import (
    BY_ENGINE_LRU,
    EVICTED,
    LOADED,
    NOT_REGISTERED,
    RELOADED,
    TOUCHED,
    UNLOADED,
    Call,
    Performed,
    Session,
)
from lorafleet.policy.core import EVICT, LOAD, TOUCH, UNLOAD, PolicyCore
from tests.policy.builders import TWO_VLLM, make_inventory, stream


def answer_load(session: Session, engine: str, adapter: str, answer: str, ms: float) -> None:
    session.core.book[engine].start_load(adapter, session.core.sizes[adapter])
    session.answered(1000.0, Call(LOAD, engine, adapter, "demand"), answer, True, ms)


def test_an_engines_measured_loads_scale_its_modelled_load_time_by_a_moving_average(tmp_path: Path) -> None:
    session = Session(PolicyCore(make_inventory(tmp_path, adapters=6, engines=TWO_VLLM), make_policy("lru")))
    model = session.model_ms("h/e0", "a1")
    assert model > 0 and session.cold_ms("h/e0", "a1") == model  # nothing measured yet: the model itself
    answer_load(session, "h/e0", "a0", LOADED, 3.0 * session.model_ms("h/e0", "a0"))
    assert session.cold_ms("h/e0", "a1") == pytest.approx(3.0 * model)  # the first measure sets the scale
    answer_load(session, "h/e0", "a2", LOADED, 1.0 * session.model_ms("h/e0", "a2"))
    assert session.cold_ms("h/e0", "a1") == pytest.approx((0.8 * 3.0 + 0.2 * 1.0) * model)  # then it moves by a fifth
    assert session.cold_ms("h/e1", "a1") == session.model_ms("h/e1", "a1")  # per engine


def test_a_reload_of_a_registered_name_measures_no_cold_load(tmp_path: Path) -> None:
    """vLLM answers a load of a name it still holds at once: that time says nothing of its cold loads."""
    session = Session(PolicyCore(make_inventory(tmp_path, adapters=6, engines=TWO_VLLM), make_policy("lru")))
    answer_load(session, "h/e0", "a0", RELOADED, 1.0)
    assert session.cold_ms("h/e0", "a1") == session.model_ms("h/e0", "a1")


def test_a_load_answered_after_a_reload_dropped_its_adapter_completes_in_the_book(tmp_path: Path) -> None:
    """The load of a5 was sent; the inventory reloaded without a5 before the engine answered. The answer still
    measures the load (at the size the book reserved) and frees nothing twice: a5 is resident, not in flight for
    good (which would hold its slot until a reconcile)."""
    session = Session(PolicyCore(make_inventory(tmp_path, adapters=6, engines=TWO_VLLM), make_policy("lru")))
    session.core.book["h/e0"].start_load("a5", session.core.sizes["a5"])
    session.replace_inventory(make_inventory(tmp_path, adapters=5, engines=TWO_VLLM, name="fewer.yaml"))
    assert "a5" not in session.core.sizes and "a5" in session.core.book["h/e0"].in_flight
    session.answered(1000.0, Call(LOAD, "h/e0", "a5", "demand"), LOADED, True, 50.0)
    state = session.core.book["h/e0"]
    assert "a5" in state.resident and not state.in_flight and session.counts.loads == 1


def test_a_live_session_counts_each_call_from_the_engines_answer(tmp_path: Path) -> None:
    """A touch or an unload answered as done counts as one; a failed call counts as failed only; an unload the
    engine answers "no such adapter" is done as asked (counted, journaled as unloaded, with the reason)."""
    session = Session(PolicyCore(make_inventory(tmp_path, adapters=6, engines=TWO_VLLM), make_policy("lru")))
    session.answered(1.0, Call(TOUCH, "h/e0", "a0", "keep"), TOUCHED, True, 2.0)
    session.answered(2.0, Call(UNLOAD, "h/e0", "a1", "prefetch", unused=True), UNLOADED, True, 3.0)
    session.answered(3.0, Call(TOUCH, "h/e0", "a3", "keep"), "failed", False, 4.0, "HTTP 500")
    session.answered(4.0, Call(UNLOAD, "h/e0", "a4", "demand"), NOT_REGISTERED, True, 1.0)
    counts = session.counts
    assert (counts.touches, counts.unloads, counts.failed) == (1, 2, 1)
    assert (counts.evictions, counts.wasted_prefetches) == (2, 1)
    last = session.take_answers()[-1]
    assert isinstance(last, Performed) and (last.answer, last.error) == (UNLOADED, "the engine no longer had it")


@pytest.mark.parametrize(
    ("engine", "eviction", "answer", "note"),
    [
        ({"kind": "vllm", "max_loras": 1, "max_cpu_loras": 2}, EVICT, EVICTED, BY_ENGINE_LRU),
        ({"kind": "sglang", "max_loras_per_batch": 1, "max_loaded_loras": 2}, UNLOAD, UNLOADED, None),
    ],
)
def test_a_simulated_session_journals_what_it_carried_out_as_done(
    tmp_path: Path, engine: dict[str, object], eviction: str, answer: str, note: str | None
) -> None:
    """Shadow mode and replay carry out touches and evictions themselves: each is answered done (ok), as the
    journal and `stats loads` show it — vLLM's eviction made by its own LRU (no call), SGLang's an unload — and
    none counts as failed."""
    inv = make_inventory(tmp_path, adapters=4, zero_load=True, engines=[engine])
    session = Session(PolicyCore(inv, make_policy("lfu"), touch_budget=1.0), simulate=True)
    for event in stream([0, 0, 1, 2, 0, 3]):  # a0 the most requested: lfu keeps it, on vLLM by a touch
        session.request(event)
    done = [a for a in session.take_answers() if isinstance(a, Performed)]
    assert done and all(a.ok for a in done)  # loads, touches and evictions alike
    evictions = [(a.call.action, a.answer, a.error) for a in done if a.call.action in (EVICT, UNLOAD)]
    assert evictions == [(eviction, answer, note)] * 2
    touched = [a.call.adapter for a in done if a.call.action == TOUCH]
    assert touched == (["a0"] if eviction == EVICT else [])  # vLLM: a0 touched so its LRU drops a1 instead
    assert session.counts.failed == 0 and session.counts.evictions == 2
