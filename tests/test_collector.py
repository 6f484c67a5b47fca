"""The collector around bulk work and the daemon's long-lived state (lorafleet/collector.py)."""

from __future__ import annotations

import gc
from collections.abc import Callable
from pathlib import Path

import pytest

from lorafleet.collector import paused, settle, unsettle
from lorafleet.daemon.loop import Daemon, DaemonOptions
from lorafleet.inventory import load_inventory
from lorafleet.replay.synth import synthesize
from lorafleet.store.db import open_store
from lorafleet.store.memory import freeze


def test_nothing_is_collected_while_paused_and_the_collector_is_as_it_was_after() -> None:
    assert gc.isenabled()
    with paused():
        assert not gc.isenabled()
        with paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the inner pause ends into the outer one
    assert gc.isenabled()
    gc.disable()
    try:
        with paused():
            pass
        assert not gc.isenabled()  # a collector disabled before stays disabled
    finally:
        gc.enable()
    with pytest.raises(RuntimeError), paused():
        raise RuntimeError("a failing body")
    assert gc.isenabled()


def test_what_is_settled_is_set_aside_until_unsettled() -> None:
    kept = [[i] for i in range(1000)]
    settle()
    try:
        assert gc.get_freeze_count() >= len(kept)
    finally:
        unsettle()
    assert gc.get_freeze_count() == 0


def collections_during(work: Callable[[], object]) -> int:
    """How many collections ran during `work()`, as gc's own callbacks see them."""
    started: list[int] = []

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started.append(info["generation"])

    gc.callbacks.append(callback)
    try:
        work()
    finally:
        gc.callbacks.remove(callback)
    return len(started)


def test_building_an_inventory_or_freezing_what_was_learned_costs_one_collection_at_most(tmp_path: Path) -> None:
    """Paused, the bulk step sets off no collection; the one the objects made meanwhile are due comes after it
    (without the pause: three while building this inventory, eight while pickling what was learned)."""
    synth = synthesize("zipf", 3000, 3, tmp_path / "t")
    gc.collect()
    assert collections_during(lambda: load_inventory(synth.inventory_path)) <= 1
    inventory = load_inventory(synth.inventory_path)
    with open_store(tmp_path / "s.db") as store:
        opts = DaemonOptions(shadow=True, once=True, from_start=True, retention_days=3650.0)
        daemon = Daemon(inventory, store, opts)
        daemon.run()
    gc.collect()
    assert collections_during(lambda: freeze(daemon.session.core)) <= 1


def test_a_daemon_sets_its_state_aside_at_each_commit_and_gives_it_back_when_it_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synth = synthesize("workflows", 3000, 3, tmp_path / "t")
    inventory = load_inventory(synth.inventory_path)
    frozen_at_commit: list[int] = []
    from lorafleet.store import journal

    real = journal.commit_or_drop

    def watched(*args: object, **kwargs: object) -> int:
        frozen_at_commit.append(gc.get_freeze_count())
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr("lorafleet.daemon.loop.commit_or_drop", watched)
    with open_store(tmp_path / "s.db") as store:
        opts = DaemonOptions(shadow=True, once=True, from_start=True, retention_days=3650.0, commit_every_lines=500)
        Daemon(inventory, store, opts).run()
    assert len(frozen_at_commit) >= 4
    # Set aside from the start, and more with every commit (the state alive at the last one: the books, the
    # demand model, the experts' copies), so a collection scans only what came since.
    assert frozen_at_commit[0] > 0
    assert frozen_at_commit[-1] > frozen_at_commit[0]
    assert gc.get_freeze_count() == 0


def test_a_replay_sets_what_it_built_aside_as_it_goes_and_gives_it_back_when_it_ends(tmp_path: Path) -> None:
    from lorafleet.logs.reader import read_events
    from lorafleet.replay.driver import SETTLE_EVERY, simulate

    synth = synthesize("zipf", 3 * SETTLE_EVERY, 3, tmp_path / "t")
    inventory = load_inventory(synth.inventory_path)
    events, _ = read_events([synth.log_path], inventory)
    frozen: list[int] = []
    simulate(inventory, "lru", events, progress=lambda index: frozen.append(gc.get_freeze_count()))
    assert len(frozen) >= 3
    assert frozen[0] > 0 and frozen[-1] > frozen[0]
    assert gc.get_freeze_count() == 0


def test_the_experts_cores_share_the_tables_the_live_core_reads_from_the_inventory(tmp_path: Path) -> None:
    from lorafleet.drive.leader import LeaderPolicy
    from lorafleet.policy.core import PolicyCore

    inventory = load_inventory(synthesize("zipf", 100, 3, tmp_path / "t").inventory_path)
    core = PolicyCore(inventory, LeaderPolicy())
    policy = core.policy
    assert isinstance(policy, LeaderPolicy)
    for shadow in policy.shadows:
        expert = shadow.session.core
        assert expert.book is not core.book  # each expert its own copy of the fleet ...
        assert (expert.sizes, expert.pools, expert.serving, expert.load_ms) == (
            core.sizes,
            core.pools,
            core.serving,
            core.load_ms,
        )
        assert expert.pools is core.pools and expert.serving is core.serving  # ... built once
    other = load_inventory(synthesize("zipf", 100, 3, tmp_path / "u").inventory_path)
    assert PolicyCore(other, LeaderPolicy(), like=core).pools is not core.pools  # another inventory: its own


def test_after_a_new_inventory_the_experts_cores_share_the_new_live_cores_tables(tmp_path: Path) -> None:
    from lorafleet.drive.leader import LeaderPolicy
    from lorafleet.policy.core import PolicyCore

    path = synthesize("zipf", 100, 3, tmp_path / "t").inventory_path
    core = PolicyCore(load_inventory(path), LeaderPolicy())
    reloaded = core.rebuilt(load_inventory(path))  # a reload: the same file, a new inventory
    policy = reloaded.policy
    assert isinstance(policy, LeaderPolicy)
    for shadow in policy.shadows:
        expert = shadow.session.core
        assert expert.inventory is reloaded.inventory
        assert expert.pools is reloaded.pools and expert.sizes is reloaded.sizes
