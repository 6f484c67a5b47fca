"""A request counted from its log line that the engines, replayed in arrival order, served otherwise is counted
again, in the daemon's summary, journal and metrics alike (drive/settling.py, `Recounted`, daemon/journaling.py)."""

from __future__ import annotations

import json
import random
import signal
import sqlite3
import time
from pathlib import Path

from lorafleet.daemon.journaling import MAX_TENANTS_A_MINUTE, OTHER_TENANTS, Journaling
from lorafleet.daemon.metrics import DaemonMetrics
from lorafleet.drive.session import Recounted, Served, Waited
from lorafleet.drive.settling import MAX_HORIZON_S, Counted
from lorafleet.policy.core import HIT, MISS
from lorafleet.policy.events import ADAPTER, RequestEvent
from lorafleet.store.db import open_store
from lorafleet.store.journal import commit_progress
from lorafleet.times import minute_key
from tests.daemon.conftest import vllm, wait_for, write_adapters, write_fleet

_SUMS = "SELECT SUM(requests), SUM(hits), SUM(late), SUM(misses), SUM(cold_ms)"


def test_a_recount_committed_after_its_miss_corrects_that_minutes_rollups_and_counts_apart_in_metrics(
    tmp_path: Path,
) -> None:
    """The miss went out in one commit, its settling in a later one: the minute's row and the hour's rows end
    with the request as a hit that waited nothing, and the metrics, which only grow, count the move apart."""
    metrics = DaemonMetrics()
    journal = Journaling(metrics, shadow=False, clock=lambda: "2026-12-06T00:00:00Z")
    event = RequestEvent(1_800_000_003.0, ADAPTER, "a0", tenant="t", seen=1_800_000_004.0)
    served = Served(1_800_000_004.0, event, "h/e0", MISS, False, False, 0.0)
    with open_store(tmp_path / "s.db") as store:
        journal.fold([served, Waited(served, 120.0, 0.0)])
        commit_progress(store, journal.take().rollups)
        journal.fold(
            [Recounted(1_800_000_030.0, event, "h/e0", Counted(MISS, 120.0, False, 0.0), Counted(HIT, 0.0, False, 0.0))]
        )
        commit_progress(store, journal.take().rollups)
        journal.publish()
        with sqlite3.connect(tmp_path / "s.db") as c:
            assert c.execute(f"{_SUMS} FROM rollups").fetchone() == (1, 1, 0, 0, 0.0)
            for dim in ("all", "tenant", "adapter", "engine"):
                row = c.execute(f"{_SUMS} FROM rollups_hourly WHERE dim = ?", (dim,)).fetchone()
                assert row == (1, 1, 0, 0, 0.0), dim
    sample = metrics.registry.get_sample_value
    labels = {"engine": "h/e0", "mode": "live"}
    assert sample("lorafleet_requests_total", {**labels, "outcome": "miss"}) == 1.0
    assert sample("lorafleet_requests_recounted_total", {**labels, "counted": "miss", "outcome": "hit"}) == 1.0
    assert sample("lorafleet_cold_seconds_paid_total", labels) == 0.12
    assert sample("lorafleet_cold_seconds_recounted_total", labels) == 0.12


def test_a_recount_after_the_longest_horizon_goes_to_the_row_its_count_went_to() -> None:
    """A minute with more tenants than its rows name files the rest under one row; a request counted there and
    settled a full horizon later (lines of every minute between) is moved within that same row: no tenant's row
    is left with a miss below zero."""
    journal = Journaling(DaemonMetrics(), shadow=False, clock=lambda: "2026-12-06T00:00:00Z")
    minute = 1_800_000_000.0
    for i in range(MAX_TENANTS_A_MINUTE):
        event = RequestEvent(minute + 1, ADAPTER, "a0", tenant=f"u{i}", seen=minute + 2)
        journal.fold([Served(minute + 2, event, "h/e0", HIT, False, False, 0.0)])
    late = RequestEvent(minute + 59.0, ADAPTER, "a0", tenant="late", seen=minute + 59.5)
    served = Served(minute + 59.5, late, "h/e0", MISS, False, False, 0.0)
    journal.fold([served, Waited(served, 100.0, 0.0)])
    for k in range(1, int(MAX_HORIZON_S // 60) + 2):  # a line in every minute until the horizon has passed
        event = RequestEvent(minute + 60 * k + 1, ADAPTER, "a1", tenant="x", seen=minute + 60 * k + 2)
        journal.fold([Served(event.seen or 0.0, event, "h/e0", HIT, False, False, 0.0)])
    at = minute + 59.5 + MAX_HORIZON_S + 1
    journal.fold([Recounted(at, late, "h/e0", Counted(MISS, 100.0, False, 0.0), Counted(HIT, 0.0, False, 0.0))])
    rows = {key[1]: o for key, o in journal.batch.rollups.items() if key[2] == "a0" and key[0] == minute_key(late.time)}
    assert "late" not in rows
    other = rows[OTHER_TENANTS]
    assert (other.requests, other.hits, other.misses, other.cold_ms) == (1, 1, 0, 0.0)


def _durations_log(tmp_path: Path, inv: Path) -> None:
    """a0's second request came at +3 s while its first (+0 to +10 s) ran; a1's and a2's came before."""
    inv.write_text(inv.read_text().replace("engine: upstream}", "engine: upstream, duration_s: duration_s}"))
    start = time.time() - 100.0
    lines = [("a1", 1.0, 0.1), ("a2", 2.0, 0.1), ("a0", 3.0, 1.0), ("a0", 0.0, 10.0)]  # (adapter, arrival, duration)
    with open(tmp_path / "access.jsonl", "w", encoding="utf-8") as fh:
        for adapter, arrival, duration in sorted(lines, key=lambda x: x[1] + x[2]):
            record = {"ts": start + arrival + duration, "duration_s": duration, "tenant_id": "t", "model": adapter}
            fh.write(json.dumps(record) + "\n")


def test_a_live_daemon_recounts_a_request_that_came_while_an_earlier_one_ran(tmp_path: Path, emulators) -> None:
    """A log with durations, as nginx writes it (each line at its request's end): a0's second request came at
    +3 s while its first (+0 to +10 s) ran, and its line was written first. By its end (`--once`: everything
    read is settled) the daemon counts it a hit in its summary and journal, as the engine served it; the first
    request, which brought a0 in, a miss."""
    from lorafleet.daemon.loop import Daemon, DaemonOptions
    from lorafleet.inventory import load_inventory

    adapters = write_adapters(tmp_path / "adapters", 3)
    engine = emulators(kind="vllm")
    inv = write_fleet(tmp_path, [vllm("e0", engine.url, gpu=2, host=4)], adapters)
    _durations_log(tmp_path, inv)
    options = DaemonOptions(policy="lru", once=True, from_start=True, logs=(str(tmp_path / "access.jsonl"),))
    with open_store(tmp_path / "state.db") as store:
        summary = Daemon(load_inventory(inv), store, options).run()
    assert (summary.requests, summary.hits, summary.misses) == (4, 1, 3), summary
    with sqlite3.connect(tmp_path / "state.db") as c:
        assert c.execute("SELECT SUM(requests), SUM(hits), SUM(misses) FROM rollups").fetchone() == (4, 1, 3)
        hit = c.execute("SELECT adapter FROM rollups WHERE hits > 0").fetchall()
    assert hit == [("a0",)]


def test_the_once_summary_says_how_many_requests_settling_counted_again(tmp_path: Path, emulators, run_cli) -> None:
    adapters = write_adapters(tmp_path / "adapters", 3)
    engine = emulators(kind="vllm")
    inv = write_fleet(tmp_path, [vllm("e0", engine.url, gpu=2, host=4)], adapters)
    _durations_log(tmp_path, inv)
    args = ["daemon", "-i", str(inv), "--state", str(tmp_path / "s.db"), "--policy", "lru", "--from-start", "--once"]
    result = run_cli(*args, "--metrics-addr", "off", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert (data["requests"], data["hits"], data["misses"], data["recounted"]) == (4, 1, 3, 1)
    (tmp_path / "s.db").unlink()  # the same run again, on an engine as fresh as the first was
    _durations_log(tmp_path, write_fleet(tmp_path, [vllm("e0", emulators(kind="vllm").url, gpu=2, host=4)], adapters))
    result = run_cli(*args, "--metrics-addr", "off")
    assert result.exit_code == 0, result.output
    assert "1 counted again as settled" in result.stdout


def test_kill_9_while_settling_neither_loses_nor_double_counts_nor_leaves_a_row_below_zero(
    tmp_path: Path, emulators, daemon_process
) -> None:
    """A live daemon following a log with durations (requests overlapping for seconds, so settling moves many
    counts) is killed at random points and restarted; a last `--once` run reads the rest. Every line is counted
    once, and every rollup row — the minute's and the hour's — still adds up: a move committed with the line that
    settled it, never apart from the count it moves."""
    from tests.daemon.test_crash_and_rotation import requests_in

    adapters = write_adapters(tmp_path / "adapters", 6)
    engine = emulators(kind="vllm")
    inv = write_fleet(tmp_path, [vllm("e0", engine.url, gpu=1, host=3)], adapters)
    inv.write_text(inv.read_text().replace("engine: upstream}", "engine: upstream, duration_s: duration_s}"))
    rng = random.Random(20261206)
    start = time.time() - 3000.0
    schedule = []  # (end, arrival, adapter): a request every 0.4 s on average, lasting 0.1-6 s
    at = start
    for _ in range(600):
        at += rng.expovariate(2.5)
        schedule.append((at + rng.uniform(0.1, 6.0), at, f"a{rng.randrange(6)}"))
    schedule.sort()
    log, db = tmp_path / "access.jsonl", tmp_path / "state.db"
    written, last = 0, len(schedule) - 150  # the last 150 lines for the last run, which says what it settled
    for round_ in range(8):
        daemon = daemon_process(inv, db, "--from-start")
        if round_ % 3:
            wait_for(lambda d=daemon: "following" in d.log(), what="the daemon to start")  # type: ignore[misc]
        deadline = time.monotonic() + rng.uniform(0.2, 1.2)
        while time.monotonic() < deadline and written < last:
            with open(log, "a", encoding="utf-8") as fh:
                for end, arrival, adapter in schedule[written : written + rng.randint(2, 8)]:
                    record = {"ts": end, "duration_s": round(end - arrival, 3), "tenant_id": "t", "model": adapter}
                    fh.write(json.dumps(record) + "\n")
                    written += 1
            time.sleep(rng.uniform(0.01, 0.05))
        daemon.proc.send_signal(signal.SIGKILL)
        daemon.proc.wait()
    with open(log, "a", encoding="utf-8") as fh:
        for end, arrival, adapter in schedule[written:]:
            record = {"ts": end, "duration_s": round(end - arrival, 3), "tenant_id": "t", "model": adapter}
            fh.write(json.dumps(record) + "\n")
    final = daemon_process(inv, db, "--once", "--from-start", "--json")
    assert final.proc.wait(60) == 0, final.log()
    assert final.proc.stdout is not None
    assert json.loads(final.proc.stdout.read())["recounted"] > 0  # settling did move counts here
    assert requests_in(db) == len(schedule)
    with sqlite3.connect(db) as c:
        for table in ("rollups", "rollups_hourly"):
            rows = c.execute(f"SELECT requests, hits, late, misses FROM {table}").fetchall()
            assert rows and all(min(row) >= 0 and row[0] == sum(row[1:]) for row in rows), (table, rows)


def test_a_request_settled_as_counted_moves_only_its_wait_and_gpu_hit_not_its_outcome(tmp_path: Path) -> None:
    """A miss the stand-ins served as a miss that waited longer (queued behind another load): its rollup keeps
    the miss and takes the longer wait; the metrics count no move of outcome, and the wait it did wait beyond the
    count's goes to the paid seconds. A hit the stand-ins found in a GPU slot becomes a GPU hit."""
    metrics = DaemonMetrics()
    journal = Journaling(metrics, shadow=False, clock=lambda: "2026-12-06T00:00:00Z")
    miss = RequestEvent(1_800_000_003.0, ADAPTER, "a0", tenant="t", seen=1_800_000_004.0)
    hit = RequestEvent(1_800_000_005.0, ADAPTER, "a1", tenant="t", seen=1_800_000_006.0)
    served = Served(1_800_000_004.0, miss, "h/e0", MISS, False, False, 0.0)
    journal.fold([served, Waited(served, 100.0, 0.0), Served(1_800_000_006.0, hit, "h/e0", HIT, False, False, 0.0)])
    journal.fold(
        [
            Recounted(
                1_800_000_040.0, miss, "h/e0", Counted(MISS, 100.0, False, 0.0), Counted(MISS, 250.0, False, 0.0)
            ),
            Recounted(1_800_000_040.0, hit, "h/e0", Counted(HIT, 0.0, False, 0.0), Counted(HIT, 0.0, True, 0.0)),
        ]
    )
    with open_store(tmp_path / "s.db") as store:
        commit_progress(store, journal.take().rollups)
        journal.publish()
        with sqlite3.connect(tmp_path / "s.db") as c:
            assert c.execute(f"{_SUMS}, SUM(gpu_hits) FROM rollups").fetchone() == (2, 1, 0, 1, 250.0, 1)
    sample = metrics.registry.get_sample_value
    labels = {"engine": "h/e0", "mode": "live"}
    assert sample("lorafleet_requests_recounted_total", {**labels, "counted": "miss", "outcome": "miss"}) is None
    assert sample("lorafleet_cold_seconds_paid_total", labels) == 0.25
