"""The journal sized for years: which actions are rows, minute detail's retention, migration of old journals, and
the figures `stats` shows staying the same whichever way each action was kept."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from lorafleet.cli import shapes
from lorafleet.daemon.loop import Daemon, DaemonOptions
from lorafleet.inventory import load_inventory
from lorafleet.store import db as store_db
from lorafleet.store import stats as q
from lorafleet.store.db import open_store
from lorafleet.store.journal import ActionRow, Outcomes, commit_progress, prune
from lorafleet.store.migrations import MIGRATIONS, statements
from lorafleet.times import parse_utc_text
from tests.conftest import INVENTORIES

DEMO_WINDOWS = (  # minute rows (aligned and not), and the hourly rows
    ("2026-11-02T09:00:00Z", "2026-11-02T10:00:00Z"),
    ("2026-11-02T09:00:30Z", "2026-11-02T09:20:45Z"),
    ("2026-11-02T00:00:00Z", "2026-11-03T00:00:00Z"),
)


def demo_figures(db: Path) -> dict[str, object]:
    """Every figure `stats --json --no-replay` shows over the demo run, per window and breakdown."""
    inv = load_inventory(INVENTORIES / "demo.yaml")
    with open_store(db) as store:
        Daemon(inv, store, DaemonOptions(shadow=True, once=True, from_start=True, retention_days=3650.0)).run()
    out: dict[str, object] = {}
    with open_store(db, read_only=True) as store:
        for since, until in DEMO_WINDOWS:
            for by in ("tenant", "adapter", "engine", "minute", "hour"):
                found = q.report(store, parse_utc_text(since), parse_utc_text(until), by, 12)
                out[f"{since} {by}"] = {**shapes.stats(found, 100, None, {}), "series": found.series}
    return out


def test_stats_figures_are_the_same_whether_actions_are_rows_or_counted(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The demo log's shadow run journaled as this journal does (shadow actions counted per minute) and as it did
    before (every action a row): every figure stats shows, equal."""
    counted = demo_figures(tmp_path / "counted.db")
    monkeypatch.setattr(store_db, "counted_only", lambda a: False)
    listed = demo_figures(tmp_path / "listed.db")
    with sqlite3.connect(tmp_path / "counted.db") as c, sqlite3.connect(tmp_path / "listed.db") as r:
        assert c.execute("SELECT COUNT(*) FROM loads").fetchone() == (0,)  # nothing listed, yet all counted
        assert r.execute("SELECT COUNT(*) FROM loads").fetchone()[0] > 1000
    overall = counted[f"{DEMO_WINDOWS[0][0]} tenant"]["overall"]  # type: ignore[index]
    assert overall["touches"] > 0 and overall["prefetch_loads"] > 0 and overall["prefetch_wasted"] > 0
    assert json.dumps(counted, sort_keys=True) == json.dumps(listed, sort_keys=True)


def test_live_rows_are_what_an_admin_audits_and_the_rest_is_counted(tmp_path: Path) -> None:
    at = "2026-11-20T10:00:10.000Z"
    rows = [
        ActionRow(at, "daemon", "a1", "h/e", "loaded", True, 40.0, 1, None, "prefetch"),
        ActionRow(at, "daemon", "a1", "h/e", "touched", True, 3.0, 1, None, "keep"),
        ActionRow(at, "daemon", "a2", "h/e", "touched", True, 3.0, 1, None, "keep"),
        ActionRow(at, "daemon", "a2", "h/e", "not-registered", False, 3.0, 1, "gone", "keep"),  # a failed touch
        ActionRow(at, "daemon", "a3", "h/e", "evicted", True, None, 1, None, "demand", True),
        ActionRow(at, "daemon", "a4", "h/s", "unloaded", True, 2.0, 1, None, "demand"),
        ActionRow(at, "daemon", "a5", "h/s", "forgotten", True, None, 1, None, "reconcile"),
        ActionRow(at, "warm", "a6", "h/e", "loaded", True, 50.0, 1, None),
    ]
    with open_store(tmp_path / "s.db") as store:
        commit_progress(store, actions=rows)
        listed = [(a.adapter, a.action) for a in store.loads()]
        counted = store.db.execute("SELECT adapter, action, count FROM actions_minutes ORDER BY 1").fetchall()
        window = q.window_of(parse_utc_text("2026-11-20T10:00:00Z"), parse_utc_text("2026-11-20T10:01:00Z"))
        totals = q.action_totals(store, window)
        log = [(a.adapter, a.action, a.count) for a in q.action_log(store, window)]
    assert listed == [
        ("a1", "loaded"),
        ("a2", "not-registered"),
        ("a4", "unloaded"),
        ("a5", "forgotten"),
        ("a6", "loaded"),
    ]
    assert counted == [("a1", "touched", 1), ("a2", "touched", 1), ("a3", "evicted", 1)]
    assert (totals.touches, totals.unused_prefetches, totals.prefetch_loads) == (2, 1, 1)  # a failed touch is none
    assert len(log) == len(rows) and ("a3", "evicted", 1) in log  # stats loads shows both kinds


def _old_journal(path: Path) -> None:
    """A journal as lorafleet wrote it before migration 008: every action a row, minute rows with a rowid and the
    (engine, minute) index. The hourly tables come from migration 005 itself, as they did for real journals."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("CREATE TABLE schema_migrations (name TEXT PRIMARY KEY, applied_at TEXT)")
    for name, sql in MIGRATIONS[:7]:
        for statement in statements(sql):
            db.execute(statement)
        db.execute("INSERT INTO schema_migrations VALUES (?, 'then')", (name,))
        if name == "004_unused_prefetch":
            # 005 derives the hourly rows from these
            t = "2026-11-20T10:"
            db.executemany(
                "INSERT INTO rollups VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (t + "00Z", "acme", "a1", "h/e0", 10, 8, 1, 1, 4, 3, 30.0, 60.0),
                    (t + "01Z", "acme", "a2", "h/e0", 10, 2, 0, 8, 0, 0, 400.0, 0.0),
                    (t + "02Z", "beta", "a1", "h/e1", 5, 5, 0, 0, 5, 5, 0.0, 100.0),
                ],
            )
            db.executemany(
                "INSERT INTO loads (at, source, adapter, engine, action, ok, ms, size_bytes, error, reason, "
                "unused_prefetch) VALUES (?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?)",
                [
                    (t + "00:10.000Z", "daemon", "a1", "h/e0", "loaded", 1, 40.0, None, "prefetch", 0),
                    (t + "00:11.000Z", "daemon", "a2", "h/e0", "loaded", 1, 60.0, None, "demand", 0),
                    (t + "00:12.000Z", "daemon", "a2", "h/e0", "touched", 1, 3.0, None, "keep", 0),
                    (t + "00:13.000Z", "daemon", "a3", "h/e0", "evicted", 1, None, None, "prefetch", 1),
                    (t + "00:14.000Z", "daemon", "a3", "h/e1", "refused", 0, 0.0, "open", "prefetch", 0),
                    (t + "01:00.000Z", "daemon-shadow", "a1", "h/e1", "loaded", 1, 9.0, None, "demand", 0),
                ],
            )
    db.close()


def test_an_old_journal_opens_migrated_with_the_same_figures(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    db = tmp_path / "old.db"
    _old_journal(db)
    refused = run_cli("stats", "--state", str(db), "--no-replay")
    assert refused.exit_code == 2 and "older lorafleet" in refused.stderr  # stats never writes: migrate first
    with open_store(db) as store:
        assert store.migrate() == []
        names = {r[0] for r in store.db.execute("SELECT name FROM sqlite_schema WHERE type = 'index'")}
        listed = [(a.action, a.source) for a in store.loads()]
    assert "loads_engine_adapter" not in names and "rollups_engine" not in names
    assert listed == [("loaded", "daemon"), ("loaded", "daemon"), ("refused", "daemon")]
    for window in (("--since", "2026-11-20T10:00Z", "--until", "2026-11-20T10:30Z"), ("--since", "2026-11-20T00:00Z",
                   "--until", "2026-11-21T00:00Z")):  # fmt: skip
        result = run_cli("stats", "--state", str(db), "--json", "--no-replay", *window)
        o = json.loads(result.stdout)["overall"]
        assert (o["requests"], o["hits"], o["late"], o["misses"], o["gpu_hits"]) == (25, 15, 1, 9, 9)
        assert (o["prefetch_loads"], o["prefetch_wasted"], o["touches"], o["circuit_opened"]) == (1, 1, 1, ["h/e1"])
        assert o["load_ms"] == {"h/e0": {"loads": 2, "p50": 40.0, "p99": 60.0}}
    loads = run_cli("stats", "loads", "--state", str(db), "--since", "2026-11-20T10:00Z", "--until",
                    "2026-11-20T10:30Z", "--json")  # fmt: skip
    actions = [(a["action"], a["source"]) for a in json.loads(loads.stdout)["actions"]]
    assert ("touched", "daemon") in actions and ("loaded", "daemon-shadow") in actions and len(actions) == 6


def _hours_of_traffic(store: store_db.Store, hours: int) -> None:
    for hour in range(hours):
        stamp = f"2026-11-20T{hour:02d}:"
        rollups = {(stamp + f"{m:02d}Z", "t", "a", "h/e"): Outcomes(3, 2, 0, 1, 1, 1, 10.0, 5.0) for m in range(60)}
        touch = ActionRow(stamp + "30:00.000Z", "daemon", "a", "h/e", "touched", True, 1.0, 1, None, "keep")
        commit_progress(store, rollups=rollups, actions=[touch, touch])


def _rows(store: store_db.Store) -> int:
    tables = ("rollups", "actions_minutes", "rollups_hourly", "actions_hourly", "log_minutes", "loads", "errors")
    return sum(store.db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] for table in tables)


def test_minute_detail_goes_after_its_retention_and_older_windows_read_the_hourly_rows(tmp_path: Path) -> None:
    since, until = parse_utc_text("2026-11-20T01:00Z"), parse_utc_text("2026-11-20T02:00Z")
    with open_store(tmp_path / "s.db") as store:
        _hours_of_traffic(store, 6)
        before = q.report(store, since, until, "engine", 12)
        rows = _rows(store)
        dropped = prune(store, "2026-11-01T00:00Z", "2026-11-01T00:00:00.000Z", "2026-11-20T04:00Z")
        assert dropped == rows - _rows(store) == 4 * 60 + 4  # four hours' minute rollups and minute action counts
        (first,) = store.db.execute("SELECT MIN(minute) FROM rollups").fetchone()
        assert first == "2026-11-20T04:00Z" and q.detail_since(store) == "2026-11-20T04:00Z"
        assert store.db.execute("SELECT MIN(minute) FROM actions_minutes").fetchone() == ("2026-11-20T04:30Z",)
        after = q.report(store, since, until, "engine", 12)
        assert after.window.hourly and not before.window.hourly
        assert (after.overall, after.rows, after.actions) == (before.overall, before.rows, before.actions)
        assert after.overall.requests == 180 and after.actions.touches == 2
        recent = q.report(store, parse_utc_text("2026-11-20T04:10Z"), parse_utc_text("2026-11-20T04:40Z"), "tenant", 12)
        assert not recent.window.hourly and recent.overall.requests == 90  # inside the detail: minutes, as before
        minutes = q.report(store, since, until, "minute", 12)
        assert minutes.overall.requests == 0  # --by minute reads minutes alone: dropped there


def test_the_daemon_keeps_minute_detail_for_its_minute_retention(tmp_path: Path) -> None:
    from lorafleet.replay.synth import synthesize

    synth = synthesize("workflows", 800, 2, tmp_path / "t")  # ten minutes of log
    inv = load_inventory(synth.inventory_path)
    options = DaemonOptions(shadow=True, once=True, from_start=True, retention_days=3650.0)
    with open_store(tmp_path / "s.db") as store:
        Daemon(inv, store, options).run()
        all_minutes = store.db.execute("SELECT COUNT(DISTINCT minute) FROM rollups").fetchone()[0]
    with open_store(tmp_path / "short.db") as store:
        short = DaemonOptions(**{**options.__dict__, "minute_retention_days": 3 / 1440})  # three minutes
        summary = Daemon(inv, store, short).run()
        kept = store.db.execute("SELECT COUNT(DISTINCT minute) FROM rollups").fetchone()[0]
        (hourly,) = store.db.execute("SELECT SUM(requests) FROM rollups_hourly WHERE dim = 'all'").fetchone()
    assert all_minutes >= 9 and kept < all_minutes
    assert hourly == summary.requests == 800


@pytest.mark.parametrize("by", ["tenant", "engine", "minute"])
def test_every_query_stats_runs_searches_an_index_never_scans_a_table(tmp_path: Path, by: str) -> None:
    """The plans docs/benchmarks.md shows: each query a range search of a primary key or index."""
    with open_store(tmp_path / "s.db") as store:
        _hours_of_traffic(store, 8)
        for span in (1800.0, 7 * 3600.0):
            until = parse_utc_text("2026-11-20T08:00Z")
            for sql, plan in q.query_plans(store, until - span, until, by):
                assert "SCAN" not in plan.replace("SCAN CONSTANT ROW", "") or "SCAN (subquery" in plan, (sql, plan)
