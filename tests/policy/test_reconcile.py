"""The live session's reconcile rules, without processes: what a registry read says of a restart."""

from __future__ import annotations

from pathlib import Path

from lorafleet.drive.policies import make_policy
from lorafleet.drive.session import LOADED, UNLOADED, Session
from lorafleet.policy.core import PolicyCore
from tests.policy.builders import make_inventory

SGLANG = [{"kind": "sglang", "max_loras_per_batch": 2, "max_loaded_loras": 4}]


def live(tmp_path: Path, *held: str, policy: str = "lru") -> Session:
    session = Session(PolicyCore(make_inventory(tmp_path, adapters=6, engines=SGLANG), make_policy(policy)))
    for adapter in held:
        session.core.book["h/e0"].admit(adapter, 1)
    session.reconciled(1000.0, "h/e0", held, (), ())  # the engine confirms what the book holds
    return session


def test_an_emptied_registry_is_a_restart(tmp_path: Path) -> None:
    session = live(tmp_path, "a0", "a1")
    assert session.reconciled(1001.0, "h/e0", [], (), ()).restarted


def test_a_registry_refilled_by_loads_since_the_restart_is_still_a_restart(tmp_path: Path) -> None:
    session = live(tmp_path, "a0", "a1")
    session.core.book["h/e0"].admit("a2", 1)  # loaded after the engine restarted, before this reconcile
    answer = session.reconciled(1001.0, "h/e0", ["a2"], (), ())
    assert answer.restarted and sorted(answer.forgotten) == ["a0", "a1"]


def test_one_adapter_dropped_while_others_stay_is_no_restart(tmp_path: Path) -> None:
    session = live(tmp_path, "a0", "a1")
    answer = session.reconciled(1001.0, "h/e0", ["a1"], (), ())
    assert not answer.restarted and answer.forgotten == ["a0"]


def test_lorafleets_own_unloads_and_vanished_files_are_no_restart(tmp_path: Path) -> None:
    session = live(tmp_path, "a0", "a1")
    book = session.core.book["h/e0"]
    book.evict("a0")  # lorafleet unloaded a0 itself: the book let go of it at once
    book.admit("a2", 1)
    assert not session.reconciled(1001.0, "h/e0", ["a2"], ["a1"], ()).restarted  # a1's files vanished
    assert session.lost("h/e0") == ["a1"]
    session.core.unavailable.add(("h/e1", "a2"))  # another engine's loss is not this one's
    assert session.lost("h/e0") == ["a1"] and session.lost("h/e1") == ["a2"]


def test_adapters_loaded_again_since_the_last_reconcile_are_no_survivors(tmp_path: Path) -> None:
    """vLLM keeps names the book let go of; after a restart the daemon loads some of them again before the next
    reconcile. Those prove nothing: only what the engine kept all along does."""
    from lorafleet.drive.session import LOADED, Call
    from lorafleet.policy.core import LOAD

    session = live(tmp_path, "a0", "a1")
    book = session.core.book["h/e0"]
    book.evict("a0")  # let go of by the book (vLLM: still registered)
    book.start_load("a0", 1)
    session.answered(1000.5, Call(LOAD, "h/e0", "a0", "demand"), LOADED, True, 5.0)  # loaded after the restart
    assert session.reconciled(1001.0, "h/e0", ["a0"], (), ()).restarted  # a1 is gone: it restarted


def test_another_process_warming_an_adapter_displaces_the_least_recently_used_that_is_not_pinned(
    tmp_path: Path,
) -> None:
    """`warm` loaded a4 on a full engine: the book follows the engine, whose least recently used goes — a pin is
    passed over; an `unload` is followed too, the pin of what it unloaded included, and a pinned warm pins."""
    session = live(tmp_path, "a0", "a1", "a2", "a3")  # a0 least recently used
    book = session.core.book["h/e0"]
    book.pin("a0")
    session.noticed("h/e0", "a4", LOADED, False)
    assert list(book.resident) == ["a0", "a2", "a3", "a4"] and book.pins == {"a0"}
    session.noticed("h/e0", "a0", UNLOADED, False)
    assert "a0" not in book.resident and book.pins == set()
    session.noticed("h/e0", "a5", LOADED, True)
    assert "a5" in book.resident and book.pins == {"a5"}


def test_a_pinned_adapter_the_engine_lost_is_loaded_again_pinned(tmp_path: Path) -> None:
    """A pin is kept at any cost: after a reconcile finds it gone, a policy that honours pins loads it again as a
    pin (its load call says so, for SGLang's pinned load, and the book holds it pinned), not as an adapter the next
    eviction may take."""
    from lorafleet.policy.core import LOAD

    session = live(tmp_path, "a0", "a1", policy="lorafleet")
    session.core.book["h/e0"].pin("a0")
    answer = session.reconciled(1001.0, "h/e0", ["a1"], (), ())
    loads = [c for c in answer.calls if c.action == LOAD]
    assert [(c.adapter, c.pinned) for c in loads] == [("a0", True)]
    assert session.core.book["h/e0"].pins == {"a0"}


def test_each_forgotten_adapter_is_journaled_with_why_the_engine_no_longer_has_it(tmp_path: Path) -> None:
    from lorafleet.drive.session import FORGOTTEN, Performed

    session = live(tmp_path, "a0", "a1", "a2")
    session.answers = []
    session.reconciled(1001.0, "h/e0", ["a2"], ["a1"], ())  # a1's files vanished; a0 dropped by the engine
    why = {p.call.adapter: p.error for p in session.answers if isinstance(p, Performed) and p.answer == FORGOTTEN}
    assert why == {"a0": "no longer registered", "a1": "files gone: unregistered"}


def test_a_reconcile_warms_again_only_this_engines_planned_adapters_whose_files_are_there(tmp_path: Path) -> None:
    """The plan's placements on the engine reconciled, and on no other: an engine that came back empty gets its own
    planned adapters again (not another engine's), and one whose files vanished is not loaded again."""
    from lorafleet.policy.core import LOAD
    from lorafleet.policy.placement import Placement

    two = SGLANG * 2
    core = PolicyCore(make_inventory(tmp_path, adapters=6, engines=two), make_policy("lru"))
    plan = [Placement("a0", "h/e0", False), Placement("a1", "h/e0", False), Placement("a2", "h/e1", False)]
    session = Session(core, plan=plan)
    for adapter in ("a0", "a1"):
        core.book["h/e0"].admit(adapter, 1)
    assert session.reconciled(1000.0, "h/e0", ["a0", "a1"], (), ()).calls == []  # it holds its plan: a2 is e1's
    answer = session.reconciled(1001.0, "h/e0", [], ["a1"], ())  # restarted; a1's files are gone
    assert [(c.engine, c.adapter) for c in answer.calls if c.action == LOAD] == [("h/e0", "a0")]
    assert list(core.book["h/e0"].in_flight) == ["a0"]


def test_each_adapter_whose_files_vanished_counts_one_unload(tmp_path: Path) -> None:
    session = live(tmp_path, "a0", "a1", "a2")
    before = session.counts.unloads
    session.reconciled(1001.0, "h/e0", ["a2"], ["a0", "a1"], ())
    assert session.counts.unloads - before == 2


def test_a_registry_read_of_an_engine_the_book_does_not_hold_changes_nothing(tmp_path: Path) -> None:
    """An engine that left the inventory (a reload) while its registry read was in flight: no restart, no call."""
    session = live(tmp_path, "a0")
    answer = session.reconciled(1001.0, "h/e9", [], (), ())
    assert (answer.calls, answer.restarted, answer.forgotten) == ([], False, [])
    assert list(session.core.book["h/e0"].resident) == ["a0"]
