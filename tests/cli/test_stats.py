"""`lorafleet stats` over journals seeded through the store's own write API, with known numbers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lorafleet.store.db import open_store
from lorafleet.store.journal import ActionRow, Outcomes, commit_progress
from lorafleet.store.stats import window_of
from lorafleet.times import parse_moment
from tests.conftest import ROOT, interruptible

T0 = "2026-11-20T10:"


def seed(db: Path) -> None:
    with open_store(db) as store:
        commit_progress(
            store,
            rollups={
                (T0 + "00Z", "acme", "a1", "h/e0"): Outcomes(10, 8, 1, 1, 4, 3, 30.0, 60.0),
                (T0 + "01Z", "acme", "a2", "h/e0"): Outcomes(10, 2, 0, 8, 0, 0, 400.0, 0.0),
                (T0 + "02Z", "beta", "a1", "h/e1"): Outcomes(5, 5, 0, 0, 5, 5, 0.0, 100.0),
                (T0 + "59Z", "beta", "a3", "h/e1"): Outcomes(5, 0, 0, 5, 0, 0, 250.0, 0.0),  # outside [00, 30)
            },
            actions=[
                ActionRow(T0 + "00:10.000Z", "daemon", "a1", "h/e0", "loaded", True, 40.0, 1, None, "prefetch"),
                ActionRow(T0 + "00:11.000Z", "daemon", "a2", "h/e0", "loaded", True, 60.0, 1, None, "demand"),
                ActionRow(T0 + "00:12.000Z", "daemon", "a2", "h/e0", "touched", True, 3.0, 1, None, "keep"),
                ActionRow(T0 + "00:13.000Z", "daemon", "a3", "h/e0", "evicted", True, None, 1, None, "prefetch", True),
                ActionRow(T0 + "00:14.000Z", "daemon", "a3", "h/e1", "refused", False, 0.0, 1, "open", "prefetch"),
                ActionRow(T0 + "45:00.000Z", "daemon", "a3", "h/e1", "touched", True, 3.0, 1, None, "keep"),
            ],
        )


def stats_json(run_cli, db: Path, *args: str) -> dict:
    result = run_cli("stats", "--state", str(db), "--json", "--no-replay", *args)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


WINDOW = ("--since", "2026-11-20T10:00:00Z", "--until", "2026-11-20T10:30:00Z")


def test_every_number_of_the_summary(tmp_path: Path, run_cli) -> None:
    db = tmp_path / "s.db"
    seed(db)
    data = stats_json(run_cli, db, *WINDOW)
    assert data["window"] == {"since": "2026-11-20T10:00:00.000Z", "until": "2026-11-20T10:30:00.000Z"}
    o = data["overall"]
    assert (o["requests"], o["hits"], o["late"], o["misses"]) == (25, 15, 1, 9)
    assert o["hit_ratio"] == 0.6 and o["gpu_hits"] == 9
    assert (o["cold_ms_paid"], o["cold_ms_avoided"]) == (430.0, 160.0)
    assert (o["prefetch_used"], o["prefetch_loads"], o["prefetch_wasted"], o["touches"]) == (8, 1, 1, 1)
    assert o["touches_per_request"] == 0.04  # 1 of 25: the touch budget's unit
    assert o["circuit_opened"] == ["h/e1"]
    assert o["load_ms"] == {"h/e0": {"loads": 2, "p50": 40.0, "p99": 60.0}}  # measured loads of any reason


def test_breakdowns_sort_by_what_needs_attention(tmp_path: Path, run_cli) -> None:
    db = tmp_path / "s.db"
    seed(db)
    by_adapter = stats_json(run_cli, db, *WINDOW, "--by", "adapter")["by"]
    assert [(r["key"], r["hits"], r["requests"]) for r in by_adapter] == [("a2", 2, 10), ("a1", 13, 15)]
    assert by_adapter[0]["cold_ms_paid"] == 400.0 and by_adapter[0]["touches"] == 1
    assert by_adapter[0]["touches_per_request"] == 0.1  # a2: 1 touch, 10 requests
    by_tenant = stats_json(run_cli, db, *WINDOW, "--by", "tenant", "--top", "1")["by"]
    assert [r["key"] for r in by_tenant] == ["acme"] and by_tenant[0]["prefetch_wasted"] is None
    assert by_tenant[0]["touches_per_request"] is None
    by_hour = stats_json(run_cli, db, "--since", "2026-11-20T10:00Z", "--until", "2026-11-20T11:00Z", "--by", "hour")
    assert [(r["key"], r["requests"]) for r in by_hour["by"]] == [("2026-11-20T10:00Z", 30)]


def test_window_edges_are_minutes_starting_inside_it_and_offsets_are_honoured(tmp_path: Path, run_cli) -> None:
    db = tmp_path / "s.db"
    seed(db)
    one = stats_json(run_cli, db, "--since", "2026-11-20T10:01:00Z", "--until", "2026-11-20T10:02:00Z")
    assert one["overall"]["requests"] == 10  # only minute 10:01
    late_start = stats_json(run_cli, db, "--since", "2026-11-20T10:00:01Z", "--until", "2026-11-20T10:03:00Z")
    assert late_start["overall"]["requests"] == 15  # 10:00 started before the window
    paris = stats_json(run_cli, db, "--since", "2026-11-20T11:00:00+01:00", "--until", "2026-11-20T11:01:00+01:00")
    assert paris["overall"]["requests"] == 10  # = 10:00Z
    inside = ("--since", "2026-11-20T10:00:10Z", "--until", "2026-11-20T10:00:50Z")  # no minute starts in it
    result = run_cli("stats", "--state", str(db), "--no-replay", *inside)
    assert result.exit_code == 2 and "no whole minute starts in [2026-11-20T10:00:10.000Z" in result.stderr
    assert (
        stats_json(run_cli, db, "--since", "2026-11-20T10:00:00Z", "--until", "2026-11-20T10:00:30Z")["overall"][
            "requests"
        ]
        == 10
    )  # 10:00 starts inside


def test_relative_times_and_bad_ones() -> None:
    assert parse_moment("30m", 10_000.0) == 10_000.0 - 1800
    assert parse_moment("7d", 1e6) == 1e6 - 7 * 86400
    assert parse_moment("now", 5.0) == 5.0
    with pytest.raises(ValueError, match="neither a span"):
        parse_moment("yesterday", 0.0)
    w = window_of(60.0, 120.5)
    assert (w.since_minute, w.until_minute) == ("1970-01-01T00:01Z", "1970-01-01T00:03Z")


def test_bad_time_option_is_a_usage_error(tmp_path: Path, run_cli) -> None:
    result = run_cli("stats", "--state", str(tmp_path / "s.db"), "--since", "soon")
    assert result.exit_code == 2 and "neither a span" in result.stderr


def test_missing_journal_exits_2_and_an_empty_one_explains(tmp_path: Path, run_cli) -> None:
    missing = run_cli("stats", "--state", str(tmp_path / "none.db"))
    assert missing.exit_code == 2 and "no journal" in missing.stderr and "lorafleet daemon" in missing.stderr
    open_store(tmp_path / "empty.db").close()
    empty = run_cli("stats", "--state", str(tmp_path / "empty.db"), "--no-replay")
    assert empty.exit_code == 0 and "Start the daemon" in empty.stdout


def test_a_newer_schema_is_refused(tmp_path: Path, run_cli) -> None:
    db = tmp_path / "s.db"
    with open_store(db) as store, store.transaction() as c:
        c.execute("INSERT INTO schema_migrations VALUES ('999_future', 'x')")
    result = run_cli("stats", "--state", str(db))
    assert result.exit_code == 2 and "newer lorafleet" in result.stderr


def test_a_journal_sqlite_cannot_read_is_one_line_naming_it(tmp_path: Path, run_cli) -> None:
    """A file with lorafleet's migration rows but not its tables (another program's, or damaged): exit 2."""
    import sqlite3

    db = tmp_path / "s.db"
    seed(db)
    connection = sqlite3.connect(db)
    connection.execute("DROP TABLE rollups")
    connection.commit()
    connection.close()
    result = run_cli("stats", "--state", str(db), *WINDOW, "--no-replay")
    assert result.exit_code == 2, result.stderr
    assert result.stderr.startswith(f"error: journal {db} cannot be read: no such table: rollups\n")


def test_tables_fit_80_columns(tmp_path: Path, run_cli) -> None:
    db = tmp_path / "s.db"
    seed(db)
    for args in (("--by", "tenant"), ("--by", "engine"), ("--by", "minute")):
        result = run_cli("stats", "--state", str(db), "--no-replay", *WINDOW, *args, env={"COLUMNS": "80"})
        assert result.exit_code == 0
        assert max(len(line) for line in result.stdout.splitlines()) <= 80, result.stdout
        assert "a2" in result.stdout or "acme" in result.stdout or "h/e0" in result.stdout or "10:0" in result.stdout
        assert "0.040 per request" in " ".join(result.stdout.split())  # touches, in the touch budget's unit
    loads = run_cli("stats", "loads", "--state", str(db), *WINDOW, env={"COLUMNS": "80"})
    assert loads.exit_code == 0 and max(len(x) for x in loads.stdout.splitlines()) <= 80
    assert "refused ✗" in loads.stdout
    with open_store(db) as store:  # a tenant named by a log line of 256 characters: the others stay readable
        commit_progress(store, rollups={(T0 + "03Z", "t" * 256, "a1", "h/e0"): Outcomes(1, 1, 0, 0, 0, 0, 0.0, 0.0)})
    long = run_cli("stats", "--state", str(db), "--no-replay", *WINDOW, "--by", "tenant", env={"COLUMNS": "80"})
    assert long.exit_code == 0 and max(len(line) for line in long.stdout.splitlines()) <= 80
    header = next(line for line in long.stdout.splitlines() if line.startswith("tenant"))
    assert "requests" in header and "hit %" in header and "misses" in header, long.stdout
    assert "t" * 31 + "…" in long.stdout and "t" * 33 not in long.stdout


def test_stats_loads_filters(tmp_path: Path, run_cli) -> None:
    db = tmp_path / "s.db"
    seed(db)
    result = run_cli("stats", "loads", "--state", str(db), *WINDOW, "--engine", "h/e0", "--adapter", "a2", "--json")
    actions = json.loads(result.stdout)["actions"]
    # The touch is counted, not listed: it shows at the start of its minute, before the load listed at its time.
    assert [(a["at"][11:19], a["action"], a["reason"], a["count"]) for a in actions] == [
        ("10:00:00", "touched", "keep", 1),
        ("10:00:11", "loaded", "demand", 1),
    ]


def test_stats_reads_while_a_daemon_writes(tmp_path: Path, run_cli) -> None:
    from lorafleet.replay.synth import synthesize

    synth = synthesize("workflows", 30_000, 1, tmp_path / "t")
    db = tmp_path / "s.db"  # lru: the fastest writer (a commit every 10,000 lines), for the most commits a second
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    daemon = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "lorafleet",
            "daemon",
            "-i",
            str(synth.inventory_path),
            "--state",
            str(db),
            "--shadow",
            "--once",
            "--from-start",
            "--metrics-addr",
            "off",
            "--policy",
            "lru",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
    )
    seen = []
    while daemon.poll() is None or not seen:
        if db.exists():
            result = run_cli("stats", "--state", str(db), "--since", "2026-01-01T00:00Z", "--json", "--no-replay")
            assert result.exit_code == 0, result.stderr
            seen.append(json.loads(result.stdout)["overall"]["requests"])
        time.sleep(0.05)
    assert daemon.wait() == 0
    assert seen == sorted(seen)  # never a torn read: totals only grow
    assert len(set(seen)) >= 2 and seen[-1] == 30_000  # read while it wrote, and to the end


def test_watch_refreshes_and_stops_on_sigint(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    seed(db)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "80", "TERM": "xterm"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "lorafleet", "stats", "--state", str(db), "--since", "3650d", "--watch", "0.2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        preexec_fn=interruptible,
    )
    time.sleep(2.5)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    assert b"requests" in out


def test_long_windows_read_the_hourly_tables_and_agree_with_the_minutes(tmp_path: Path, run_cli) -> None:
    import random

    from lorafleet.store import stats as q

    rng = random.Random(3)
    db = tmp_path / "s.db"
    with open_store(db) as store:
        for hour in range(30):
            rollups = {}
            for minute in range(0, 60, 7):
                stamp = f"2026-11-{20 + hour // 24:02d}T{hour % 24:02d}:{minute:02d}Z"
                for adapter in ("a1", "a2", "a3"):
                    n = rng.randint(1, 9)
                    h = rng.randint(0, n)
                    rollups[(stamp, f"t{rng.randrange(3)}", adapter, f"h/e{rng.randrange(2)}")] = Outcomes(
                        n, h, 0, n - h, h, h // 2, 10.0 * (n - h), 5.0 * h
                    )
            at = f"2026-11-{20 + hour // 24:02d}T{hour % 24:02d}:30:00.000Z"
            actions = [
                ActionRow(at, "daemon", a, e, act, ok, 5.0, 1, None, why, unused)
                for a, e, act, ok, why, unused in (
                    ("a1", "h/e0", "loaded", True, "prefetch", False),
                    ("a2", "h/e1", "touched", True, "keep", False),
                    ("a3", "h/e0", "evicted", True, "prefetch", hour % 2 == 0),
                    ("a3", "h/e1", "refused", False, "prefetch", False),
                )
            ]
            commit_progress(store, rollups=rollups, actions=actions)
        day = q.window_of(1_795_132_800.0, 1_795_132_800.0 + 86400)  # 2026-11-20, 24 h: hourly
        assert day.hourly and day.since_minute == "2026-11-20T00:00Z"
        minutes = q.Window(day.since_minute, day.until_minute, day.since_at, day.until_at, hourly=False)
        assert q.totals(store, day) == q.totals(store, minutes)
        for by in ("tenant", "adapter", "engine", "hour"):
            assert sorted(q.breakdown(store, day, by)) == sorted(q.breakdown(store, minutes, by)), by
        assert q.hit_series(store, day, "adapter", 12) == q.hit_series(store, minutes, "adapter", 12)
        for by in ("tenant", "engine"):
            for window in (day, minutes):
                assert sorted(q.sliced(store, window, by, 12)[0]) == sorted(q.breakdown(store, window, by)), by
        assert q.action_totals(store, day) == q.action_totals(store, minutes)
        assert q.action_totals(store, day).unused_prefetches == 12
        for by in ("adapter", "engine", "hour"):
            assert q.key_actions(store, day, by) == q.key_actions(store, minutes, by), by
    data = stats_json(run_cli, db, "--since", "2026-11-20T00:00Z", "--until", "2026-11-21T00:00Z", "--by", "engine")
    assert data["overall"]["requests"] == sum(r["requests"] for r in data["by"])


def test_the_lru_figure_replays_the_window_of_the_inventorys_gateway_logs(tmp_path: Path, run_cli) -> None:
    """Beside the journal's hit ratio, what the engines alone would have given the same requests (the demo log,
    found from the inventory's folder whatever the working directory)."""
    from tests.conftest import INVENTORIES

    demo, db = str(INVENTORIES / "demo.yaml"), str(tmp_path / "s.db")
    run_cli("daemon", "-i", demo, "--state", db, "--shadow", "--from-start", "--once", "--metrics-addr", "off",
            "--retention", "3650d")  # fmt: skip
    window = ("--since", "2026-11-02T09:00Z", "--until", "2026-11-02T10:00Z")
    data = json.loads(run_cli("stats", "-i", demo, "--state", db, *window, "--json").stdout)
    (lru,) = json.loads(
        run_cli("replay", str(INVENTORIES / "demo-access.jsonl"), "-i", demo, "--policy", "lru", "--json").stdout
    )["policies"]
    assert data["overall"]["lru_hit_ratio"] == lru["hit_ratio"] < data["overall"]["hit_ratio"]
    table = run_cli("stats", "-i", demo, "--state", db, *window, env={"COLUMNS": "120"})
    assert f"lru alone {lru['hit_ratio']:.1%}" in table.stdout
    elsewhere = run_cli("stats", "-i", demo, "--state", db, "--since", "2026-11-03T00:00Z", "--json")
    assert json.loads(elsewhere.stdout)["overall"]["lru_hit_ratio"] is None  # no request of the logs in it
    # A window from mid-minute: the journal counts the minutes that start in it (09:01 to 09:20), and the lru
    # figure replays those very requests, not the half minutes at either end.
    from lorafleet.inventory import load_inventory
    from lorafleet.replay.driver import lru_hit_ratio
    from lorafleet.times import parse_utc_text

    half = ("--since", "2026-11-02T09:00:30Z", "--until", "2026-11-02T09:20:30Z")
    data = json.loads(run_cli("stats", "-i", demo, "--state", db, *half, "--json").stdout)
    start, end = parse_utc_text("2026-11-02T09:01:00Z"), parse_utc_text("2026-11-02T09:21:00Z")
    same = lru_hit_ratio(load_inventory(demo), start, end)
    assert same is not None and data["overall"]["lru_hit_ratio"] == round(same, 6)
    assert same != lru_hit_ratio(load_inventory(demo), parse_utc_text(half[1]), parse_utc_text(half[3]))
    rows = [json.loads(x) for x in (INVENTORIES / "demo-access.jsonl").read_text().splitlines()]
    assert data["overall"]["requests"] == sum(start <= parse_utc_text(r["ts"]) < end for r in rows)


def test_stats_reads_a_journal_it_cannot_write(tmp_path: Path, run_cli, read_only) -> None:
    folder = tmp_path / "mounted"
    folder.mkdir()
    db = folder / "s.db"
    seed(db)
    read_only(db)
    read_only(folder)  # a read-only mount: not even SQLite's -shm file can be made
    data = stats_json(run_cli, db, *WINDOW)
    assert data["overall"]["requests"] == 25


def test_a_name_with_a_newline_or_a_direction_override_stays_on_its_row(tmp_path: Path, run_cli) -> None:
    """A tenant read from a log line is data: a newline would split its row in two, U+202E would show the row's
    cells after it reversed; the JSON keeps the name as stored."""
    db = tmp_path / "s.db"
    seed(db)
    name = "evil\ntenant\u202eX\u2066"
    with open_store(db) as store:
        commit_progress(store, rollups={(T0 + "03Z", name, "a1", "h/e0"): Outcomes(50, 1, 0, 49, 0, 0, 0.0, 0.0)})
    result = run_cli("stats", "--state", str(db), "--no-replay", *WINDOW, "--by", "tenant", env={"COLUMNS": "120"})
    assert result.exit_code == 0
    row = next(line for line in result.stdout.splitlines() if "evil" in line)
    assert "evil tenantX" in row and "50" in row, result.stdout
    assert "\u202e" not in result.stdout and "\u2066" not in result.stdout
    assert name in [r["key"] for r in stats_json(run_cli, db, *WINDOW, "--by", "tenant")["by"]]


def test_a_window_inside_an_hour_reads_its_minutes_and_a_long_one_whole_hours(tmp_path: Path) -> None:
    """Up to six hours a window is its minutes (a tenant's requests outside it do not count, though their hour
    is inside); longer, or reaching back before the minute detail, it is widened to whole hours and read from the
    hourly tables; a window that starts at the first minute of detail is still minutes."""
    from lorafleet.store import stats as q

    db = tmp_path / "s.db"
    with open_store(db) as store:
        commit_progress(
            store,
            rollups={
                (T0 + "05Z", "acme", "a1", "h/e0"): Outcomes(7, 7, 0, 0, 0, 0, 0.0, 0.0),
                (T0 + "50Z", "acme", "a1", "h/e0"): Outcomes(3, 1, 0, 2, 0, 0, 0.0, 0.0),
            },
        )
        since = parse_moment("2026-11-20T10:30:00Z", now=0.0)
        half = q.window_of(since, since + 1800.0, "tenant")
        assert not half.hourly
        assert [(k, o.requests) for k, o in q.breakdown(store, half, "tenant")] == [("acme", 3)]
        assert [(k, o.requests) for k, o in q.sliced(store, half, "tenant", 4)[0]] == [("acme", 3)]
        assert not q.window_of(since, since + 6 * 3600.0).hourly
        longer = q.window_of(since, since + 6.5 * 3600.0)
        assert longer.hourly and (longer.since_minute, longer.until_minute) == (T0 + "00Z", "2026-11-20T17:00Z")
        assert not q.window_of(since, since + 1800.0, detail="2026-11-20T10:30Z").hourly  # starts at the detail
        assert q.window_of(since, since + 1800.0, detail="2026-11-20T10:31Z").hourly  # starts before it


def test_the_trend_is_the_hit_ratio_in_equal_slices_of_the_window(tmp_path: Path) -> None:
    from lorafleet.store import stats as q

    db = tmp_path / "s.db"
    with open_store(db) as store:
        commit_progress(
            store,
            rollups={
                (T0 + "00Z", "acme", "a1", "h/e0"): Outcomes(4, 4, 0, 0, 0, 0, 0.0, 0.0),  # slice 1 of 4: 100%
                (T0 + "14Z", "acme", "a1", "h/e0"): Outcomes(4, 0, 0, 4, 0, 0, 0.0, 0.0),  # slice 1: 50% in all
                (T0 + "15Z", "acme", "a1", "h/e0"): Outcomes(2, 1, 0, 1, 0, 0, 0.0, 0.0),  # slice 2: 50%
                (T0 + "59Z", "beta", "a1", "h/e0"): Outcomes(5, 5, 0, 0, 0, 0, 0.0, 0.0),  # slice 4
            },
        )
        since = parse_moment("2026-11-20T10:00:00Z", now=0.0)
        hour = q.window_of(since, since + 3600.0)
        assert q.hit_series(store, hour, None, 4) == {"": [0.5, 0.5, None, 1.0]}
        by_tenant = q.hit_series(store, hour, "tenant", 4)
        assert by_tenant == {"acme": [0.5, 0.5, None, None], "beta": [None, None, None, 1.0]}


def test_load_times_are_the_window_s_last_day_and_p99_is_the_nearest_rank(tmp_path: Path, run_cli) -> None:
    db = tmp_path / "s.db"
    with open_store(db) as store:
        old = [ActionRow("2026-11-18T10:00:00.000Z", "daemon", "a1", "h/e0", "loaded", True, 9000.0, 1, None)]
        at = [f"2026-11-20T{9 + i // 100:02d}:{i % 60:02d}:00.000Z" for i in range(200)]
        recent = [ActionRow(at[i], "warm", "a1", "h/e0", "loaded", True, float(i + 1), 1, None) for i in range(200)]
        commit_progress(store, actions=old + recent)
    data = stats_json(run_cli, db, "--since", "2026-11-18T00:00Z", "--until", "2026-11-21T00:00Z")
    # The load two days before the window's end is not counted; of 1..200 ms, the 99th percentile is the 198th.
    assert data["overall"]["load_ms"] == {"h/e0": {"loads": 200, "p50": 100.0, "p99": 198.0}}
