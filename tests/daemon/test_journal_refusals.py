"""A state database that refuses commits (a full disk, an I/O error, a lock held too long) stops the journal, not
the warming: the lines read are held and written with the next commit that goes through, none lost or counted
twice; past `max_held_lines`, or at the end of a `--once` run, the daemon stops, and its next start reads the logs
again from the last commit. SQLite itself refuses here (`PRAGMA query_only`), as a full disk would."""

from __future__ import annotations

import gc
import logging
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from lorafleet.daemon.loop import Daemon, DaemonOptions
from lorafleet.errors import OperationError
from lorafleet.inventory import load_inventory
from lorafleet.inventory.gateway import log_patterns
from lorafleet.logs.reader import read_events
from lorafleet.replay.driver import simulate
from lorafleet.replay.synth import synthesize
from lorafleet.store import journal
from lorafleet.store.db import open_store

LINES = 6000  # more than one poll reads (256 KiB): a refusal can come before the end


def totals(db: Path) -> tuple[int, ...]:
    with sqlite3.connect(db) as c:
        rollups = c.execute("SELECT SUM(requests), SUM(hits), SUM(late), SUM(misses) FROM rollups").fetchone()
        lines = c.execute("SELECT SUM(lines) FROM log_minutes").fetchone()
    return (*rollups, *lines)


def refusing(monkeypatch: pytest.MonkeyPatch, refuse: Any) -> list[bool]:
    """Commits go to the real journal; those `refuse(n)` says (n counts from 1) meet a database that takes no
    write. Returns, per commit tried, whether it was refused."""
    tried: list[bool] = []
    real = journal.commit_or_drop

    def commit(store: Any, *args: Any, **kwargs: Any) -> int:
        tried.append(refuse(len(tried) + 1))
        if tried[-1]:
            store.db.execute("PRAGMA query_only = ON")
        try:
            return real(store, *args, **kwargs)
        finally:
            store.db.execute("PRAGMA query_only = OFF")

    monkeypatch.setattr("lorafleet.daemon.loop.commit_or_drop", commit)
    return tried


def run(inventory: Path, db: Path, **options: Any) -> tuple[Daemon, Any]:
    inv = load_inventory(inventory)
    with open_store(db) as store:
        opts = DaemonOptions(
            policy="lru", shadow=True, once=True, from_start=True, retention_days=3650.0, commit_every_lines=500,
            **options,
        )  # fmt: skip
        daemon = Daemon(inv, store, opts)
        return daemon, daemon.run()


def replayed(inventory: Path) -> tuple[int, ...]:
    inv = load_inventory(inventory)
    events, _ = read_events(log_patterns(inv), inv)
    r = simulate(inv, "lru", events)
    return (r.requests, r.hits, r.late, r.misses, LINES)


def sample(daemon: Daemon, name: str) -> float | None:
    return daemon.metrics.registry.get_sample_value(name, {"mode": "shadow"})


def test_refused_commits_hold_the_lines_until_one_goes_through_none_lost_or_counted_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    synth = synthesize("workflows", LINES, 3, tmp_path / "t")
    tried = refusing(monkeypatch, lambda n: 2 <= n <= 4)
    with caplog.at_level(logging.WARNING, logger="lorafleet.daemon"):
        daemon, summary = run(synth.inventory_path, tmp_path / "s.db", journal_retry_s=0.0)
    assert tried[:5] == [False, True, True, True, False] and len(tried) >= 6
    assert summary.lines == LINES and summary.commits == len(tried) - 3
    assert totals(tmp_path / "s.db") == replayed(synth.inventory_path)
    assert sample(daemon, "lorafleet_journal_refused_commits_total") == 3
    assert sample(daemon, "lorafleet_journal_held_lines") == 0
    said = [r.getMessage() for r in caplog.records]
    refusals = [m for m in said if "the warming goes on" in m]
    assert len(refusals) == 1 and "attempt to write a readonly database" in refusals[0]  # once a minute at most
    assert len([m for m in said if m.startswith("the journal takes commits again")]) == 1


def test_while_refused_a_commit_is_tried_again_only_when_its_retry_is_due(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synth = synthesize("workflows", LINES, 3, tmp_path / "t")
    tried = refusing(monkeypatch, lambda n: n == 2)
    run(synth.inventory_path, tmp_path / "s.db", journal_retry_s=3600.0)
    assert tried == [False, True, False]  # the first, the refused one, then only the last (a run's end waits not)
    assert totals(tmp_path / "s.db") == replayed(synth.inventory_path)
    _, again = run(synth.inventory_path, tmp_path / "s.db")  # the held batch's checkpoints gave way to the later
    assert again.lines == 0 and totals(tmp_path / "s.db") == replayed(synth.inventory_path)


@pytest.mark.parametrize("max_held_lines", [600, 1_000_000])
def test_past_the_held_lines_or_at_the_end_it_stops_and_the_next_start_reads_again_from_the_last_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, max_held_lines: int
) -> None:
    synth = synthesize("workflows", LINES, 3, tmp_path / "t")
    refusing(monkeypatch, lambda n: n >= 2)
    with pytest.raises(OperationError) as stopped:
        run(synth.inventory_path, tmp_path / "s.db", journal_retry_s=0.0, max_held_lines=max_held_lines)
    assert gc.get_freeze_count() == 0  # the run's end gave the collector back what the commits set aside
    assert "log lines read and not journaled" in stopped.value.message
    assert "read again from the last commit" in (stopped.value.hint or "")
    held = int(stopped.value.message.rsplit("; ", 1)[1].split()[0].replace(",", ""))
    committed = totals(tmp_path / "s.db")[-1]  # the first commit's lines
    assert committed > 0
    if max_held_lines == 600:
        assert held > 600 and held + committed < LINES  # stopped past the bound, before the end of the log
    else:
        assert held + committed == LINES  # at the end: the last commit refused
    monkeypatch.undo()
    _, summary = run(synth.inventory_path, tmp_path / "s.db")
    assert summary.lines == LINES - committed  # read again from the last commit, no line twice
    requests, hits, late, misses, lines = totals(tmp_path / "s.db")
    assert (requests, lines) == (LINES, LINES) and hits + late + misses == requests  # as after a kill -9
