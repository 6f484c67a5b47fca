"""What a policy learned survives a restart (store/memory.py), and only where it applies: same version, policy and
inventory; a foreign or damaged memory is refused cleanly and cannot run code."""

from __future__ import annotations

import io
import logging
import pickle
import sqlite3
import time
import zlib
from pathlib import Path

import pytest

from lorafleet.daemon.loop import Daemon, DaemonOptions
from lorafleet.drive.policies import ONLINE_POLICIES, make_policy
from lorafleet.drive.session import Session
from lorafleet.inventory import load_inventory
from lorafleet.policy.core import Policy, PolicyCore
from lorafleet.policy.events import ADAPTER, RequestEvent
from lorafleet.replay.synth import synthesize
from lorafleet.store import memory
from lorafleet.store.db import open_store
from lorafleet.store.memory import FORMAT, MemoryRefusedError, fingerprint, freeze, thaw
from tests.daemon.conftest import daemon_in_thread
from tests.policy.builders import make_inventory, run_session, stream

FOUR = [{"kind": "vllm", "max_loras": 1, "max_cpu_loras": 4}]


def cycle(n: int, start: int = 0) -> list[int]:
    return [(start + i) % 6 for i in range(n)]  # one tenant's fixed cycle of 6 adapters on 4 slots


@pytest.mark.parametrize("policy", ONLINE_POLICIES)
def test_every_online_policy_freezes_and_thaws(tmp_path: Path, policy: str) -> None:
    inv = make_inventory(tmp_path, adapters=6, engines=FOUR)
    learned = PolicyCore(inv, make_policy(policy))
    run_session(learned, stream(cycle(120)))
    thawed = thaw(inv, freeze(learned), FORMAT, fingerprint(inv), policy, learned.touch_budget)
    assert type(thawed.policy) is type(learned.policy) and thawed.policy.core is thawed


def test_a_leaders_twin_is_frozen_and_thawed_with_the_experts(tmp_path: Path) -> None:
    """After a change of leader the live engines imitate the leader's twin: a restart keeps it, apart from the
    expert's own copy, so the live engines go on imitating what they imitated."""
    inv = make_inventory(tmp_path, adapters=6, engines=FOUR)
    learned = PolicyCore(inv, make_policy("lorafleet"))
    run_session(learned, stream(cycle(120)))
    policy = learned.policy
    policy.catch_up()  # type: ignore[attr-defined]  # the last request scored: no change of leader is pending
    policy.standings["m"].leader = 1  # type: ignore[attr-defined]
    policy._match(2000.0, "m", 1)  # type: ignore[attr-defined]
    thawed = thaw(inv, freeze(learned), FORMAT, fingerprint(inv), "lorafleet", learned.touch_budget).policy
    assert list(thawed.twins) == [1]  # type: ignore[attr-defined]
    assert thawed._deciding(1) is thawed.twins[1] is not thawed.shadows[1]  # type: ignore[attr-defined]


@pytest.mark.parametrize("policy", ["lorafleet", "markov"])
def test_a_thawed_policy_goes_on_from_what_it_learned(tmp_path: Path, policy: str) -> None:
    inv = make_inventory(tmp_path, adapters=6, engines=FOUR)
    learned = PolicyCore(inv, make_policy(policy))
    run_session(learned, stream(cycle(300)))
    later = [
        e.__class__(e.time + 1000.0, e.kind, e.adapter, e.tenant, base_model=e.base_model) for e in stream(cycle(12))
    ]
    thawed = thaw(inv, freeze(learned), FORMAT, fingerprint(inv), policy, learned.touch_budget)
    assert thawed.policy is not learned.policy and thawed.policy.core is thawed
    remembered = run_session(thawed, later)
    fresh = run_session(PolicyCore(inv, make_policy(policy)), later)
    # Remembered, the next step is prefetched from the first round on; fresh, it is learned in the second at best.
    assert remembered.hits >= 10 and fresh.hits <= 6


def chain_rounds(rounds: int, start: float) -> list[RequestEvent]:
    """A tenant's 4-step chain a0-a3, then six other adapters (the engine alone forgets the chain), per round."""
    out, now = [], start
    for _ in range(rounds):
        for tenant, adapters, gap in (("wf", CHAIN, 0.155), ("other", NOISE, 0.053)):
            for adapter in adapters:
                out.append(RequestEvent(now, ADAPTER, adapter, tenant, base_model="m"))
                now += gap
    return out


CHAIN, NOISE = ["a0", "a1", "a2", "a3"], ["a4", "a5", "a6", "a7", "a8", "a9"]


@pytest.mark.parametrize("cut", [32, 33, 34, 35])  # frozen after round 4's step 2, 3, 4 or the first other call
def test_after_a_restart_mid_chain_the_next_round_is_warm(tmp_path: Path, cut: int) -> None:
    """The experts' copies of the fleet restart as empty as the live engines: a leader whose copy still held the
    next step would decide no prefetch of it, and the live engine, which lost it, would never get it."""
    inv = make_inventory(tmp_path, adapters=10, engines=[{"kind": "vllm", "max_loras": 2, "max_cpu_loras": 6}])
    before = chain_rounds(4, 1000.0)
    learned = PolicyCore(inv, make_policy("lorafleet"))
    run_session(learned, before[:cut], finish=False)
    thawed = thaw(inv, freeze(learned), FORMAT, fingerprint(inv), "lorafleet", learned.touch_budget)
    session = Session(thawed, simulate=True, answers=False)
    after = chain_rounds(1, before[cut - 1].time + 2.0)
    session.start(after[0].time)
    warm = []
    for event in after[:4]:
        hits = session.counts.hits
        session.request(event)
        warm.append(session.counts.hits > hits)
    assert warm[1:] == [True, True, True]


def test_after_an_engine_restart_mid_chain_the_next_round_is_warm(tmp_path: Path) -> None:
    """What a reconcile finds an engine lost leaves the experts' copies of it too (`LeaderPolicy.on_forgotten`)."""
    inv = make_inventory(tmp_path, adapters=10, engines=[{"kind": "vllm", "max_loras": 2, "max_cpu_loras": 6}])
    before = chain_rounds(4, 1000.0)
    core = PolicyCore(inv, make_policy("lorafleet"))
    session = Session(core, simulate=True, answers=False)
    session.start(before[0].time)
    for event in before[:32]:  # round 4's second step served: its third is loading on the leader's copy
        session.request(event)
    now = before[31].time + 1.0
    assert session.reconciled(now, "h/e0", [], [], []).restarted  # the engine came back empty
    warm = []
    for event in chain_rounds(1, now + 1.0)[:4]:
        hits = session.counts.hits
        session.request(event)
        warm.append(session.counts.hits > hits)
    assert warm[1:] == [True, True, True]


FLEET_STATE = {"PolicyCore", "ResidencyBook", "EngineResidency", "Session", "SimulatedEngines", "Inventory", "Adapter"}


@pytest.mark.parametrize("policy", ONLINE_POLICIES)
def test_a_memory_holds_what_the_policy_learned_not_a_fleet(tmp_path: Path, policy: str) -> None:
    """A thaw binds each policy to a new core, and a restart starts every expert's copy of the fleet as empty as
    the live book: the cores, books, loads in flight, sessions and simulated engines are not written, nor the
    inventory's adapters (on 500 engines and 50,000 adapters they were most of lorafleet's memory)."""
    inv = make_inventory(tmp_path, adapters=6, engines=FOUR)
    learned = PolicyCore(inv, make_policy(policy))
    run_session(learned, stream(cycle(60)))
    named: set[str] = set()

    class Reading(memory._Restricted):  # a thaw's own unpickler, noting every class and function it is asked for
        def find_class(self, module: str, name: str) -> object:
            named.add(name)
            return super().find_class(module, name)

    Reading(io.BytesIO(zlib.decompress(freeze(learned))), PolicyCore(inv, Policy())).load()
    assert type(learned.policy).__name__ in named and "DemandModel" in named
    assert not named & FLEET_STATE, named & FLEET_STATE


def test_a_memory_is_frozen_once_the_experts_served_the_latest_request(tmp_path: Path) -> None:
    """The experts that do not lead serve a request after its live calls are sent (`idle`). Frozen before that,
    they would serve it at the thaw on copies made again empty, and the standings would score misses they did
    not have."""
    inv = make_inventory(tmp_path, adapters=6, engines=FOUR)
    learned = PolicyCore(inv, make_policy("lorafleet"))
    session = Session(learned, simulate=True, answers=False)
    events = stream(cycle(120))
    session.start(events[0].time)
    for event in events:
        session.request(event)  # never idle: the last request is still the experts' to serve
    thawed = thaw(inv, freeze(learned), FORMAT, fingerprint(inv), "lorafleet", learned.touch_budget)
    learned.policy.catch_up()  # type: ignore[attr-defined]
    before, after = learned.policy.standings["m"], thawed.policy.standings["m"]  # type: ignore[attr-defined]
    assert after.short.beats == before.short.beats and after.short.total == before.short.total


@pytest.mark.parametrize("policy", ["lorafleet", "lru"])
def test_a_memory_holds_no_inventory_and_the_thawed_cores_read_the_running_one(tmp_path: Path, policy: str) -> None:
    """The inventory (each adapter's path, rank and modules) is the thaw's own, the same by the fingerprint:
    written out through the cores it was most of a big fleet's memory."""
    inv = make_inventory(tmp_path, adapters=6, engines=FOUR)
    learned = PolicyCore(inv, make_policy(policy))
    run_session(learned, stream(cycle(60)))
    raw = zlib.decompress(freeze(learned))
    assert str(inv.adapters["a0"].path).encode() not in raw
    thawed = thaw(inv, freeze(learned), FORMAT, fingerprint(inv), policy, learned.touch_budget)
    assert thawed.inventory is inv
    for core in [thawed] + [s.session.core for s in getattr(thawed.policy, "shadows", [])]:
        assert core.inventory.adapters is inv.adapters and core.sizes == learned.sizes


def test_every_experts_copy_is_made_again_with_what_its_policy_learned(tmp_path: Path) -> None:
    """A memory holds each expert's policy, demand model and routes, not its copy of the fleet: the thaw makes
    the copy again, empty, with all three (the predictors' popularity and sequences are in the demand model)."""
    inv = make_inventory(tmp_path, adapters=6, engines=FOUR)
    learned = PolicyCore(inv, make_policy("lorafleet"))
    run_session(learned, stream(cycle(120)))
    thawed = thaw(inv, freeze(learned), FORMAT, fingerprint(inv), "lorafleet", learned.touch_budget)
    before, after = learned.policy.shadows, thawed.policy.shadows  # type: ignore[attr-defined]
    assert [s.name for s in after] == [s.name for s in before]
    for old, new in zip(before, after, strict=True):
        was, now = old.session.core, new.session.core
        assert type(now.policy) is type(was.policy) and now.policy.core is now, old.name
        assert now.demand.long_popularity.counts == was.demand.long_popularity.counts, old.name
        assert now.demand.transition_seen == was.demand.transition_seen, old.name
        assert not any(state.resident for state in now.book.engines.values()), old.name  # made again empty
    assert any(s.session.core.demand.long_popularity.counts for s in after)  # the predictors observed them


def test_memory_of_another_version_inventory_or_policy_is_refused(tmp_path: Path) -> None:
    inv = make_inventory(tmp_path, adapters=6, engines=FOUR)
    core = PolicyCore(inv, make_policy("lorafleet"))
    run_session(core, stream(cycle(60)))
    state, mark = freeze(core), fingerprint(inv)
    with pytest.raises(MemoryRefusedError, match="written by"):
        thaw(inv, state, "lorafleet 0.0.1 memory 1", mark, "lorafleet", 0.1)
    other = make_inventory(tmp_path, adapters=7, engines=FOUR, name="other.yaml")
    assert fingerprint(other) != mark
    with pytest.raises(MemoryRefusedError, match="another inventory"):
        thaw(other, state, FORMAT, mark, "lorafleet", 0.1)
    with pytest.raises(MemoryRefusedError, match="another policy"):
        thaw(inv, state, FORMAT, mark, "markov", 0.1)
    with pytest.raises(MemoryRefusedError, match="cannot be read"):
        thaw(inv, b"not a memory", FORMAT, mark, "lorafleet", 0.1)


def test_where_the_gateway_sends_each_adapter_survives_a_restart(tmp_path: Path) -> None:
    """The routes learned from lines come back with the memory, so a hint after a restart is taken where its
    adapter's requests go, not on the placement rule's guess; a route to an engine that is gone is dropped."""
    from tests.policy.builders import TWO_VLLM

    inv = make_inventory(tmp_path, adapters=4, engines=TWO_VLLM)
    core = PolicyCore(inv, make_policy("lorafleet"))
    session = Session(core, simulate=True, answers=False)
    session.start(1000.0)
    for i, adapter in enumerate(("a0", "a1", "a2")):
        engine = "h/e1" if adapter != "a1" else "h/e0"
        session.request(RequestEvent(1000.0 + i, ADAPTER, adapter, "t", engine=engine, base_model="m", seen=1000.5 + i))
    assert core.routes == {"a0": "h/e1", "a1": "h/e0", "a2": "h/e1"}
    state = freeze(core)
    thawed = thaw(inv, state, FORMAT, fingerprint(inv), "lorafleet", core.touch_budget)
    assert thawed.routes == core.routes
    hint = RequestEvent(2000.0, ADAPTER, "a0", "t", base_model="m")
    assert thawed.placed(hint) == "h/e1" and PolicyCore(inv, make_policy("lorafleet")).placed(hint) == "h/e0"
    one = make_inventory(tmp_path, adapters=4, engines=TWO_VLLM[:1], name="one.yaml")  # e1 not found this time
    assert thaw(one, state, FORMAT, fingerprint(inv), "lorafleet", 0.1, written=inv).routes == {"a1": "h/e0"}
    for shadow in thawed.policy.shadows:  # type: ignore[attr-defined]
        assert shadow.session.core.routes == core.routes, shadow.name  # the experts prefetch where requests go
    no_routes = zlib.compress(pickle.dumps((core.policy, core.demand, None)))
    with pytest.raises(MemoryRefusedError, match="cannot be read"):
        thaw(inv, no_routes, FORMAT, fingerprint(inv), "lorafleet", 0.1)


class _Boom:
    """Unpickled, it would create `marker`: a file of the test's own (a fixed path in /tmp, once created by a
    mutant that let the call through, failed every later run)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # type: ignore[no-untyped-def]
        import os

        return (os.system, (f"touch {self.marker}",))


def test_a_tampered_memory_cannot_run_code(tmp_path: Path) -> None:
    inv = make_inventory(tmp_path, adapters=6, engines=FOUR)
    marker = tmp_path / "pwned"
    evil = zlib.compress(pickle.dumps((_Boom(marker), None)))
    with pytest.raises(MemoryRefusedError, match="cannot be read"):
        thaw(inv, evil, FORMAT, fingerprint(inv), "lorafleet", 0.1)
    assert not marker.exists()


def shadow(inventory: Path, db: Path) -> object:
    with open_store(db) as store:
        opts = DaemonOptions(shadow=True, once=True, from_start=True, retention_days=3650.0)
        return Daemon(load_inventory(inventory), store, opts).run()


def test_the_daemon_journals_what_it_learned_and_goes_on_from_it_after_a_restart(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    synth = synthesize("workflows", 3000, 2, tmp_path / "t")
    lines = synth.log_path.read_text().splitlines(keepends=True)
    results = {}
    for kept in (True, False):
        db = tmp_path / f"{kept}.db"
        synth.log_path.write_text("".join(lines[:2000]))
        shadow(synth.inventory_path, db)
        with sqlite3.connect(db) as c:
            assert c.execute("SELECT policy, format FROM policy_memory").fetchone() == ("lorafleet", FORMAT)
            if not kept:
                c.execute("DELETE FROM policy_memory")
        synth.log_path.write_text("".join(lines))
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="lorafleet.daemon"):
            results[kept] = shadow(synth.inventory_path, db)
        said = "goes on from what it had learned" in caplog.text
        assert said == kept
    assert results[True].lines == results[False].lines == 1000  # type: ignore[attr-defined]
    assert results[True].hits > results[False].hits  # type: ignore[attr-defined]


def test_the_daemon_relearns_when_the_inventory_changed(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    synth = synthesize("workflows", 600, 2, tmp_path / "t")
    db = tmp_path / "s.db"
    shadow(synth.inventory_path, db)
    text = synth.inventory_path.read_text()
    synth.inventory_path.write_text(text.replace("max_cpu_loras: ", "max_cpu_loras: 1", 1))
    with caplog.at_level(logging.INFO, logger="lorafleet.daemon"):
        shadow(synth.inventory_path, db)
    assert "learned on another inventory" in caplog.text and "it learns again" in caplog.text


def test_after_a_reload_the_memory_carries_the_new_inventorys_fingerprint(tmp_path: Path) -> None:
    """The daemon fingerprints the inventory once, not at every memory; a reload brings the new one's, so a restart
    on the reloaded inventory goes on from what was learned (and one on the old inventory relearns)."""
    synth = synthesize("workflows", 200, 2, tmp_path / "t")
    options = DaemonOptions(shadow=True, from_start=True, commit_every_s=0.05, retention_days=3650.0)
    path = synth.inventory_path

    def written() -> str | None:
        with sqlite3.connect(tmp_path / "state.db") as c:
            row = c.execute("SELECT fingerprint FROM policy_memory").fetchone()
        return None if row is None else str(row[0])

    def wait(what: str, done: object) -> None:
        deadline = time.monotonic() + 10.0
        while not done():  # type: ignore[operator]
            assert time.monotonic() < deadline, what
            time.sleep(0.02)

    before = load_inventory(path)
    with daemon_in_thread(before, tmp_path / "state.db", options, lambda: load_inventory(path)) as daemon:
        wait("the first memory", lambda: written() == fingerprint(before))
        path.write_text(path.read_text().replace("max_cpu_loras: ", "max_cpu_loras: 1", 1))
        after = load_inventory(path)
        assert fingerprint(after) != fingerprint(before)
        daemon.reload_requested.set()
        wait("the reload", lambda: daemon.base is not before)
    assert written() == fingerprint(after)  # the memory written as the daemon stopped


def test_what_was_learned_after_the_last_memory_is_written_once_due_even_when_no_line_follows(tmp_path: Path) -> None:
    """Lines committed while the memory was not due, then silence: the memory still goes with a commit once due
    (else a `kill -9` in a quiet spell would lose what those lines taught, their checkpoint being past them)."""
    synth = synthesize("workflows", 200, 2, tmp_path / "t")
    options = DaemonOptions(
        shadow=True, from_start=True, commit_every_s=0.05, memory_every_s=1.0, retention_days=3650.0
    )

    def remembered() -> bool:
        with sqlite3.connect(tmp_path / "state.db") as c:
            return c.execute("SELECT COUNT(*) FROM policy_memory").fetchone()[0] == 1

    with daemon_in_thread(load_inventory(synth.inventory_path), tmp_path / "state.db", options) as daemon:
        deadline = time.monotonic() + 10.0
        while daemon.summary.commits == 0:  # the lines read and committed, before the memory is due
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert not remembered()
        while not remembered():
            assert time.monotonic() < deadline, "the memory was never written while the daemon ran"
            time.sleep(0.05)
