"""A start hint names no engine, so the book takes its request where the placement rule sends it; its log line
names where the gateway really sent it. The line is the record of truth (`Session._rerouted`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from lorafleet.drive.leader import LeaderPolicy
from lorafleet.drive.session import LOADED, UNLOADED, Held, Session
from lorafleet.policy.baselines import LruPolicy, MarkovPolicy
from lorafleet.policy.core import LOAD, PolicyCore
from lorafleet.policy.events import ADAPTER, RequestEvent
from tests.policy.builders import TWO_VLLM, make_inventory

E0, E1 = "h/e0", "h/e1"


def hinted(session: Session, adapter: str, at: float) -> tuple[list, Held]:
    return session.hint(RequestEvent(at, ADAPTER, adapter, tenant="t", base_model="m"))


def line_of(held: Held, engine: str | None, end: float) -> RequestEvent:
    assert held.hint is not None
    return dataclasses.replace(held.hint, engine=engine, seen=end)


def test_a_hinted_request_its_line_puts_on_another_engine_ran_there(tmp_path: Path) -> None:
    inv = make_inventory(tmp_path, adapters=4, engines=TWO_VLLM)
    core = PolicyCore(inv, LruPolicy())
    session = Session(core)  # live: the calls are the driver's
    session.start(1000.0)
    calls, held = hinted(session, "a0", 1000.0)
    assert held.engine == E0  # both empty: the placement rule's first engine
    assert [(c.action, c.engine) for c in calls] == [(LOAD, E0)]  # sent at the hint: a load made, kept in the book
    session.request(line_of(held, E1, 1001.0), held=held)
    e0, e1 = core.book.engines[E0], core.book.engines[E1]
    assert "a0" in e1.resident and list(e1.resident)[-1] == "a0"  # the engine that served it holds it, most recent
    assert "a0" not in e0.running and "a0" not in e1.running  # it runs nowhere any more
    assert held.rerouted == E1
    assert (session.counts.requests, session.counts.misses, session.counts.hits) == (1, 1, 0)
    assert session.counts.prefetch_used == 0  # no prefetch anywhere: none used


def test_a_rerouted_request_leaves_the_books_engine_recency_as_its_hint_left_it(tmp_path: Path) -> None:
    """The request ran on the engine its line names: the one the book took it on never touched its adapter at
    the request's end, so a later request's adapter stays the more recent there."""
    inv = make_inventory(tmp_path, adapters=4, engines=TWO_VLLM)
    core = PolicyCore(inv, LruPolicy())
    session = Session(core)
    session.start(1000.0)
    e0 = core.book.engines[E0]
    for adapter in ("a0", "a1"):
        e0.admit(adapter, core.sizes[adapter])
    _, held = hinted(session, "a0", 1000.0)
    _, other = hinted(session, "a1", 1000.5)
    assert held.engine == other.engine == E0 and list(e0.resident) == ["a0", "a1"]
    session.request(line_of(held, E1, 1001.0), held=held)
    assert held.rerouted == E1 and list(e0.resident) == ["a0", "a1"]


def test_a_hinted_hit_on_the_books_engine_counts_as_the_engine_it_ran_on_served_it(tmp_path: Path) -> None:
    """e0 holds a0 and e1 does not: the book takes the hint on e0 (its holder), a hit there; the line says e1
    served it, which had to load it: a miss. And the other way round, a hit where the engine that ran it held it."""
    inv = make_inventory(tmp_path, adapters=4, engines=TWO_VLLM)
    core = PolicyCore(inv, LruPolicy())
    session = Session(core)
    session.start(1000.0)
    core.book.engines[E0].admit("a0", core.sizes["a0"])
    _, held = hinted(session, "a0", 1000.0)
    assert held.engine == E0 and held.counts.hits == 1
    session.request(line_of(held, E1, 1001.0), held=held)
    assert (session.counts.requests, session.counts.hits, session.counts.misses) == (1, 0, 1)
    assert session.counts.cold_ms_paid == session.cold_ms(E1, "a0")  # one cold load waited, on e1
    _, again = hinted(session, "a0", 1002.0)  # both hold a0 now: the book takes it where its line said, e1
    assert again.engine == E1
    session.request(line_of(again, E0, 1003.0), held=again)  # the gateway sent it to e0 this time, which held it
    assert again.rerouted == E0
    assert (session.counts.requests, session.counts.hits, session.counts.misses) == (2, 1, 1)


def test_a_hint_goes_where_the_adapters_last_line_said_the_gateway_sent_it(tmp_path: Path) -> None:
    """A gateway that hashes adapters to engines sends each adapter to one engine: once a line has said which,
    the book takes the adapter's next hint there, rather than on its own placement rule's choice (a holder, else
    the least loaded engine), whatever it holds where."""
    inv = make_inventory(tmp_path, adapters=4, engines=TWO_VLLM)
    core = PolicyCore(inv, LruPolicy())
    session = Session(core)
    session.start(1000.0)
    _, held = hinted(session, "a0", 1000.0)
    assert held.engine == E0  # nothing known: the placement rule's (both empty: the first)
    session.request(line_of(held, E1, 1001.0), held=held)
    for i, engine in enumerate((E1, E1, E0)):
        _, again = hinted(session, "a0", 1002.0 + 2 * i)
        assert again.engine == engine  # where the last line said it went, e0 holding it too
        session.request(line_of(again, E0 if i == 1 else E1, 1003.0 + 2 * i), held=again)
    assert core.routes == {"a0": E1}
    # a line learned without a hint teaches it as well
    session.request(RequestEvent(1010.0, ADAPTER, "a2", tenant="t", base_model="m", engine=E1, seen=1011.0))
    _, other = hinted(session, "a2", 1012.0)
    assert other.engine == E1 and core.routes["a2"] == E1


def test_a_line_that_names_the_books_engine_or_none_changes_nothing(tmp_path: Path) -> None:
    inv = make_inventory(tmp_path, adapters=4, engines=TWO_VLLM)
    for engine in (E0, None):
        core = PolicyCore(inv, LruPolicy())
        session = Session(core)
        session.start(1000.0)
        _, held = hinted(session, "a0", 1000.0)
        session.request(line_of(held, engine, 1001.0), held=held)
        assert held.rerouted is None
        assert "a0" not in core.book.engines[E1].resident and core.book.engines[E0].holds("a0")
        assert (session.counts.requests, session.counts.misses) == (1, 1)


def test_every_experts_copy_takes_the_engine_the_line_names(tmp_path: Path) -> None:
    inv = make_inventory(tmp_path, adapters=4, engines=TWO_VLLM)
    leader = LeaderPolicy(experts=[("markov", MarkovPolicy), ("lru", LruPolicy)])
    core = PolicyCore(inv, leader)
    session = Session(core, simulate=True, answers=False)
    session.start(1000.0)
    _, held = hinted(session, "a1", 1000.0)
    session.request(line_of(held, E1, 1001.0), held=held)
    session.advance(1010.0)
    assert "a1" in core.book.engines[E1].resident
    for shadow in leader.shadows:
        assert "a1" in shadow.session.core.book.engines[E1].resident, shadow.name


def test_simulated_the_engine_that_ran_it_holds_it_and_the_request_waits_once(tmp_path: Path) -> None:
    """In shadow mode the hint's load on e0 is simulated and the request was taken to wait on it; rerouted, it
    waited e1's load instead, once, and e1's simulated engine holds the adapter as the book does."""
    inv = make_inventory(tmp_path, adapters=4, engines=TWO_VLLM)
    core = PolicyCore(inv, LruPolicy())
    session = Session(core, simulate=True, answers=False)
    session.start(1000.0)
    _, held = hinted(session, "a0", 1000.0)
    session.request(line_of(held, E1, 1000.001), held=held)  # before the simulated load on e0 is done
    session.advance(1010.0)
    assert session.sim is not None and "a0" in session.sim.held[E1]
    assert (session.counts.requests, session.counts.misses) == (1, 1)
    assert session.counts.cold_ms_paid == session.cold_ms(E1, "a0")
    assert session.counts.loads == 1  # the load made on e0 at the hint, done: it stays in the book
    assert "a0" in core.book.engines[E0].resident


def test_another_processs_warm_is_taken_by_every_experts_copy_too(tmp_path: Path) -> None:
    inv = make_inventory(tmp_path, adapters=6, engines=TWO_VLLM)
    leader = LeaderPolicy(experts=[("markov", MarkovPolicy), ("lru", LruPolicy)])
    core = PolicyCore(inv, leader)
    session = Session(core)
    session.start(1000.0)
    session.noticed(E1, "a2", LOADED, False)
    copies = [s.session for s in leader.shadows]
    assert all("a2" in c.core.book.engines[E1].resident and "a2" in c.sim.held[E1] for c in copies)  # type: ignore[union-attr]
    session.noticed(E1, "a2", UNLOADED, False)
    assert not any("a2" in c.core.book.engines[E1].resident or "a2" in c.sim.held[E1] for c in copies)  # type: ignore[union-attr]
    for adapter in ("a0", "a1", "a2", "a3", "a4"):  # four slots: the fifth displaces the least recently used
        session.noticed(E1, adapter, LOADED, False)
    for c in copies:
        assert list(c.sim.held[E1]) == list(c.core.book.engines[E1].resident) == ["a1", "a2", "a3", "a4"]  # type: ignore[union-attr]


def test_a_new_inventory_keeps_the_routes_to_engines_that_stayed(tmp_path: Path) -> None:
    inv = make_inventory(tmp_path, adapters=4, engines=TWO_VLLM)
    core = PolicyCore(inv, LruPolicy())
    core.routes.update({"a0": E1, "a1": E0})
    assert core.rebuilt(inv).routes == {"a0": E1, "a1": E0}
    smaller = make_inventory(tmp_path, adapters=4, engines=TWO_VLLM[:1], name="one.yaml")
    assert core.rebuilt(smaller).routes == {"a1": E0}  # e1 left the fleet


def test_the_predictor_prefetches_where_the_gateway_sent_the_adapters_last_request(tmp_path: Path) -> None:
    """A gateway that hashes adapters sends a1 to the engine it always does: the next step is prefetched there
    (its last line said e1), not on the engine that served this step (e0), where its request would never go."""
    from lorafleet.policy.predictive import LorafleetPolicy

    inv = make_inventory(tmp_path, adapters=4, engines=TWO_VLLM, tenants={"t": "{workflows: [[a0, a1]]}"})
    core = PolicyCore(inv, LorafleetPolicy())
    session = Session(core, simulate=True, answers=False)
    session.start(1000.0)
    session.request(RequestEvent(1000.0, ADAPTER, "a1", tenant="u", base_model="m", engine=E1, seen=1000.5))
    assert core.routes == {"a1": E1}
    session.advance(1005.0)
    core.book.engines[E1].evict("a1")  # gone since
    session.sim.held[E1].pop("a1", None)  # type: ignore[union-attr]
    session.request(RequestEvent(1010.0, ADAPTER, "a0", tenant="t", base_model="m", engine=E0, seen=1010.5))
    session.advance(1020.0)
    assert core.book.engines[E1].holds("a1") and not core.book.engines[E0].holds("a1")


def test_the_engine_a_line_says_ran_a_request_holds_its_adapter_unpinned(tmp_path: Path) -> None:
    """The engine that served a rerouted request loaded its adapter by itself, as it loads any: no pin."""
    inv = make_inventory(tmp_path, adapters=4, engines=TWO_VLLM)
    core = PolicyCore(inv, LruPolicy())
    session = Session(core)
    session.start(1000.0)
    _, held = hinted(session, "a0", 1000.0)
    session.request(line_of(held, E1, 1001.0), held=held)
    assert "a0" in core.book.engines[E1].resident and not core.book.engines[E1].pins


def test_a_hint_closed_without_its_line_leaves_its_adapters_recency_as_it_was(tmp_path: Path) -> None:
    """Its line never came, so nothing says the request ran to its end: it stops counting as running, and its
    adapter does not become the engine's most recent (a request that ended would have made it so)."""
    inv = make_inventory(tmp_path, adapters=4, engines=TWO_VLLM)
    core = PolicyCore(inv, LruPolicy())
    session = Session(core)
    session.start(1000.0)
    e0 = core.book.engines[E0]
    for adapter in ("a0", "a1", "a2"):
        e0.admit(adapter, core.sizes[adapter])
    _, held = hinted(session, "a0", 1000.0)  # a hit on e0: most recent now
    assert held.engine == E0 and "a0" in e0.running
    e0.admit("a1", core.sizes["a1"])
    e0.admit("a2", core.sizes["a2"])  # used since: a0 is the least recent again
    session.unjoined(held)
    assert "a0" not in e0.running and list(e0.resident) == ["a0", "a1", "a2"]


def test_a_hint_for_an_adapter_no_engine_serves_closes_without_a_line_quietly(tmp_path: Path) -> None:
    inv = make_inventory(tmp_path, adapters=2, engines=TWO_VLLM, ranks=[8, 128])
    session = Session(PolicyCore(inv, LruPolicy()))
    session.start(1000.0)
    calls, held = hinted(session, "a1", 1000.0)  # rank 128: no engine takes it
    assert not calls and held.engine is None
    session.unjoined(held)
    assert held.ended and session.counts.requests == 0


def test_a_line_that_names_no_engine_keeps_where_the_last_one_said_the_adapter_goes(tmp_path: Path) -> None:
    """An untold line teaches nothing of the gateway's route: the route an earlier line gave stays."""
    inv = make_inventory(tmp_path, adapters=4, engines=TWO_VLLM)
    core = PolicyCore(inv, LruPolicy())
    session = Session(core)
    session.start(1000.0)
    session.request(RequestEvent(1000.0, ADAPTER, "a0", tenant="t", base_model="m", engine=E1, seen=1001.0))
    session.request(RequestEvent(1002.0, ADAPTER, "a0", tenant="t", base_model="m", seen=1003.0))
    _, held = hinted(session, "a0", 1004.0)
    session.request(line_of(held, None, 1005.0), held=held)
    assert core.routes == {"a0": E1}


def test_the_end_of_a_request_on_no_engine_or_of_no_adapter_is_nothing(tmp_path: Path) -> None:
    inv = make_inventory(tmp_path, adapters=4, engines=TWO_VLLM)
    core = PolicyCore(inv, LruPolicy())
    session = Session(core)
    core.book.engines[E0].admit("a0", core.sizes["a0"])
    before = list(core.book.engines[E0].resident)
    for engine, adapter in ((None, "a0"), ("h/e9", "a0"), (E0, None)):
        session.ended(engine, adapter)
    assert list(core.book.engines[E0].resident) == before
