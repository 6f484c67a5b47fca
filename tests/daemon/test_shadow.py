"""The daemon in shadow mode, in-process: the same computation as replay, journaled exactly once per line."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import time
from pathlib import Path

import pytest

from lorafleet.daemon.loop import Daemon, DaemonOptions
from lorafleet.drive.session import Counts
from lorafleet.inventory import load_inventory
from lorafleet.inventory.gateway import log_patterns
from lorafleet.logs.reader import read_events
from lorafleet.logs.timeparse import parse_time
from lorafleet.replay.driver import simulate
from lorafleet.replay.synth import SHAPES, synthesize
from lorafleet.store.db import open_store
from tests.conftest import INVENTORIES


def totals(db: Path) -> tuple[int, int, int, int]:
    with sqlite3.connect(db) as c:
        row = c.execute("SELECT SUM(requests), SUM(hits), SUM(late), SUM(misses) FROM rollups").fetchone()
    return tuple(v or 0 for v in row)  # type: ignore[return-value]


def run_shadow(inventory: Path, db: Path, policy: str = "lorafleet", **options: object) -> object:
    inv = load_inventory(inventory)
    with open_store(db) as store:
        # The synthetic logs are from November 2026: a retention from today would drop them at once.
        options.setdefault("retention_days", 3650.0)
        opts = DaemonOptions(policy=policy, shadow=True, once=True, from_start=True, **options)  # type: ignore[arg-type]
        return Daemon(inv, store, opts).run()


def assert_shadow_is_replay(inventory: Path, db: Path, policy: str) -> None:
    """Every count the session keeps, equal to the last bit: one session, one time unit, two drivers."""
    inv = load_inventory(inventory)
    events, _ = read_events(log_patterns(inv), inv)
    replayed = simulate(inv, policy, events)
    summary = run_shadow(inventory, db, policy)
    for name in (f.name for f in dataclasses.fields(Counts)):
        assert getattr(summary, name) == getattr(replayed, name), name
    assert totals(db) == (replayed.requests, replayed.hits, replayed.late, replayed.misses)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("policy", ["lru", "lorafleet"])
def test_shadow_once_is_replay_on_every_shape(tmp_path: Path, shape: str, policy: str) -> None:
    synth = synthesize(shape, 1500, 3, tmp_path / "t")
    assert_shadow_is_replay(synth.inventory_path, tmp_path / "s.db", policy)


@pytest.mark.parametrize("policy", ["markov", "lorafleet"])
def test_shadow_once_is_replay_on_the_demo_log(tmp_path: Path, policy: str) -> None:
    assert_shadow_is_replay(INVENTORIES / "demo.yaml", tmp_path / "s.db", policy)


def test_a_restart_reads_only_what_was_written_since(tmp_path: Path) -> None:
    synth = synthesize("workflows", 600, 1, tmp_path / "t")
    lines = synth.log_path.read_text().splitlines(keepends=True)
    synth.log_path.write_text("".join(lines[:400]))
    db = tmp_path / "s.db"
    first = run_shadow(synth.inventory_path, db)
    assert first.lines == 400
    again = run_shadow(synth.inventory_path, db)
    assert again.lines == 0  # the checkpoint: nothing read twice
    with open(synth.log_path, "a") as fh:
        fh.write("".join(lines[400:]))
        fh.write("not json\n")
    third = run_shadow(synth.inventory_path, db)
    assert (third.lines, third.bad_lines) == (201, 1)
    assert totals(db)[0] == 600


def test_a_first_start_without_from_start_reads_from_the_end(tmp_path: Path) -> None:
    synth = synthesize("workflows", 300, 1, tmp_path / "t")
    inv = load_inventory(synth.inventory_path)
    with open_store(tmp_path / "s.db") as store:
        summary = Daemon(inv, store, DaemonOptions(shadow=True, once=True)).run()
    assert summary.lines == 0


def test_shadow_actions_are_counted_per_minute_with_their_reasons_not_listed(tmp_path: Path) -> None:
    """Nothing happened to any engine in shadow mode: its simulated actions are counts per minute, not rows (a
    deliberate change: they were a row each, most of a shadow journal)."""
    synth = synthesize("workflows", 800, 2, tmp_path / "t")
    summary = run_shadow(synth.inventory_path, tmp_path / "s.db")
    with sqlite3.connect(tmp_path / "s.db") as c:
        assert c.execute("SELECT COUNT(*) FROM loads").fetchone() == (0,)
        rows = set(c.execute("SELECT source, action, reason FROM actions_minutes"))
        (unused,) = c.execute("SELECT SUM(unused * count) FROM actions_minutes").fetchone()
        (loads,) = c.execute("SELECT SUM(count) FROM actions_minutes WHERE action = 'loaded'").fetchone()
        (evictions,) = c.execute("SELECT SUM(count) FROM actions_minutes WHERE action = 'evicted'").fetchone()
    assert unused == summary.wasted_prefetches > 0
    assert (loads, evictions) == (summary.loads, summary.evictions)
    assert ("daemon-shadow", "loaded", "demand") in rows
    assert ("daemon-shadow", "loaded", "prefetch") in rows
    assert {r[2] for r in rows} <= {"plan", "prefetch", "demand", "keep", "reconcile", "manual"}


def test_log_paths_are_taken_from_the_inventorys_folder(tmp_path: Path) -> None:
    synth = synthesize("seed", 10, 1, tmp_path / "t")
    inv = load_inventory(synth.inventory_path)
    assert log_patterns(inv) == [str((tmp_path / "t" / "access.jsonl").resolve())]
    assert log_patterns(inv, ("x.log",)) == [str(Path("x.log").resolve())]


@pytest.mark.parametrize("policy", ["oracle", "belady"])
def test_policies_that_see_the_future_cannot_run_live(tmp_path: Path, policy: str) -> None:
    synth = synthesize("seed", 10, 1, tmp_path / "t")
    with pytest.raises(ValueError, match=f"{policy} needs the future: replay only"):
        run_shadow(synth.inventory_path, tmp_path / "s.db", policy)


def test_cli_once_prints_the_summary_as_json(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    synth = synthesize("workflows", 500, 1, tmp_path / "t")
    args = ["daemon", "-i", str(synth.inventory_path), "--shadow", "--once", "--from-start", "--metrics-addr", "off"]
    result = run_cli(*args, "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["requests"] == 500 and data["shadow"] is True
    assert data["hits"] + data["late"] + data["misses"] == 500
    table = run_cli(*args)
    assert table.exit_code == 0 and "shadow mode, nothing was sent" in table.stdout


def test_cli_refuses_a_bad_metrics_address(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    synth = synthesize("seed", 10, 1, tmp_path / "t")
    for bad in ("nowhere", "[::1:0", "::1]:0", "127.0.0.1:99999"):
        result = run_cli("daemon", "-i", str(synth.inventory_path), "--metrics-addr", bad)
        assert result.exit_code == 2 and "HOST:PORT" in result.stderr, bad


def test_retention_keeps_what_is_newer_than_the_newest_line_minus_the_retention(tmp_path: Path) -> None:
    synth = synthesize("workflows", 300, 1, tmp_path / "t")  # dated November 2026, spread over minutes
    db = tmp_path / "s.db"
    run_shadow(synth.inventory_path, db, retention_days=14.0)  # history older than today's 14 days is kept
    assert totals(db)[0] == 300
    with open(synth.log_path, "a") as fh:
        fh.write(synth.log_path.read_text().splitlines(keepends=True)[-1])  # one more line at the newest time
    run_shadow(synth.inventory_path, db, retention_days=1e-6)  # keep only the newest minute
    with sqlite3.connect(db) as c:
        minutes = {m for (m,) in c.execute("SELECT DISTINCT minute FROM rollups")}
    assert len(minutes) == 1 and 0 < totals(db)[0] < 301


def test_a_second_run_with_no_new_line_keeps_the_recorded_logs_history(tmp_path: Path) -> None:
    """With nothing new to read, retention is measured from the newest minute journaled, not from today: the
    recorded log's checkpoint says it was read, so what it counted could never come back."""
    synth = synthesize("workflows", 300, 1, tmp_path / "t")  # dated November 2026: older than 14 days by now
    db = tmp_path / "s.db"
    run_shadow(synth.inventory_path, db, retention_days=14.0)
    assert totals(db)[0] == 300
    summary = run_shadow(synth.inventory_path, db, retention_days=14.0)
    assert summary.lines == 0  # type: ignore[attr-defined]
    assert totals(db)[0] == 300
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT SUM(lines) FROM log_minutes").fetchone()[0] == 300


def test_a_bug_handling_one_request_costs_that_request_only(tmp_path: Path, monkeypatch) -> None:
    from lorafleet.daemon.journaling import Summary
    from lorafleet.drive.session import Session

    synth = synthesize("workflows", 200, 1, tmp_path / "t")
    real = Session.request
    calls = {"n": 0}

    def flaky(self, event, **kwargs):  # type: ignore[no-untyped-def]
        if isinstance(self.counts, Summary):  # the policy's session, not the engines-alone one beside it
            calls["n"] += 1
            if calls["n"] == 50:
                raise RuntimeError("a bug")
        return real(self, event, **kwargs)

    monkeypatch.setattr(Session, "request", flaky)
    summary = run_shadow(synth.inventory_path, tmp_path / "s.db")
    assert summary.lines == 200 and summary.requests == 199
    with sqlite3.connect(tmp_path / "s.db") as c:
        assert c.execute("SELECT message FROM errors").fetchall() == [("internal error: RuntimeError",)]


def test_the_daemon_summary_stats_and_replay_agree_on_every_shared_count(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    """The README's tour: the daemon in shadow mode over the demo log, `stats` over that run, `replay --json`."""
    demo, db = str(INVENTORIES / "demo.yaml"), str(tmp_path / "s.db")
    daemon = json.loads(
        run_cli("daemon", "-i", demo, "--state", db, "--shadow", "--from-start", "--once", "--metrics-addr", "off",
                "--retention", "3650d", "--json").stdout
    )  # fmt: skip
    window = ("--since", "2026-11-02T09:00Z", "--until", "2026-11-02T10:00Z")
    stats = json.loads(run_cli("stats", "-i", demo, "--state", db, *window, "--no-replay", "--json").stdout)["overall"]
    log = str(INVENTORIES / "demo-access.jsonl")
    (replayed,) = json.loads(run_cli("replay", log, "-i", demo, "--policy", "lorafleet", "--json").stdout)["policies"]
    for key in ("requests", "hits", "late", "misses", "prefetch_loads", "prefetch_used", "touches"):
        assert daemon[key] == stats[key] == replayed[key], key
    assert daemon["touches"] > 0  # the demo's vLLM engines are steered: a ratio worth comparing
    assert daemon["touches_per_request"] == stats["touches_per_request"] == replayed["touches_per_request"]
    assert daemon["touches_per_request"] == round(daemon["touches"] / daemon["requests"], 6)
    for key in ("loads", "wasted_prefetches", "unloads", "unserved"):
        assert daemon[key] == replayed[key], key
    assert daemon["wasted_prefetches"] == stats["prefetch_wasted"]
    assert daemon["cold_ms_paid"] == stats["cold_ms_paid"] == round(replayed["cold_ms_total"], 1)
    assert daemon["cold_ms_avoided"] == stats["cold_ms_avoided"]


def test_unknown_adapters_are_counted_and_named_and_the_engines_alone_figure_is_replays_lru(
    tmp_path: Path, run_cli
) -> None:  # type: ignore[no-untyped-def]
    synth = synthesize("workflows", 300, 2, tmp_path / "t")
    inv = load_inventory(synth.inventory_path)
    line = json.loads(synth.log_path.read_text().splitlines()[-1])
    with open(synth.log_path, "a") as fh:
        for name in ("sql-v9", "sql-v9", "../../etc/passwd"):
            fh.write(json.dumps({**line, "model": name}) + "\n")
    db = str(tmp_path / "s.db")
    args = ("daemon", "-i", str(synth.inventory_path), "--state", db, "--shadow", "--once", "--from-start")
    data = json.loads(run_cli(*args, "--metrics-addr", "off", "--retention", "3650d", "--json").stdout)
    assert data["unknown_requests"] == 3 and data["unknown_names"] == {"sql-v9": 2, "../../etc/passwd": 1}
    events, _ = read_events([synth.log_path], inv)
    lru = simulate(inv, "lru", events)
    alone = data["engines_alone"]
    assert (alone["hits"], alone["misses"], alone["loads"]) == (lru.hits, lru.misses, lru.loads)
    assert alone["hit_ratio"] == round(lru.hit_ratio, 4)
    stats = json.loads(run_cli("stats", "-i", str(synth.inventory_path), "--state", db, "--since", "3650d",
                               "--no-replay", "--json").stdout)  # fmt: skip
    assert stats["log"] == {"lines": 303, "bad": 0, "unknown": 3}
    again = run_cli(*args, "--metrics-addr", "off", "--retention", "3650d", env={"COLUMNS": "120"})
    assert "no new log lines" in again.stdout  # the checkpoint: nothing read twice
    # In the summary's text, a name is text: rich markup in it is neither applied nor refused, a control or a
    # bidirectional override never reaches the terminal, and a long one is cut.
    with open(synth.log_path, "a") as fh:
        for name in ("[/bold]", "\x1b[31mred\u202e", "x" * 100):
            fh.write(json.dumps({**line, "model": name}) + "\n")
    text = run_cli(*args, "--metrics-addr", "off", "--retention", "3650d")
    assert text.exit_code == 0, text.stderr
    shown = text.stdout.replace("\n", "")
    assert all(f"{name} (1)" in shown for name in ("[/bold]", "[31mred", "x" * 39 + "~"))
    assert "\x1b" not in text.stdout and "\u202e" not in text.stdout


def test_a_log_read_in_many_batches_counts_each_line_once(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    """The follower reads at most 256 KiB at a time: each batch's lines, bad lines and unknown names are its own,
    not the stream's running totals, in the summary and in the journal's log counts alike."""
    synth = synthesize("zipf", 4000, 3, tmp_path / "t")
    rows = synth.log_path.read_text().splitlines()
    for at in (10, len(rows) // 2, len(rows) - 10):  # an unknown name and a bad line in the first batch and later
        rows[at] = json.dumps({**json.loads(rows[at]), "model": "not-an-adapter"})
        rows[at + 1] = "{not json"
    text = "\n".join(rows) + "\n"
    assert len(text) > 3 * 256 * 1024 / 2  # two batches at least
    synth.log_path.write_text(text)
    db = str(tmp_path / "s.db")
    args = ("daemon", "-i", str(synth.inventory_path), "--state", db, "--shadow", "--once", "--from-start")
    data = json.loads(run_cli(*args, "--metrics-addr", "off", "--retention", "3650d", "--json").stdout)
    assert (data["lines"], data["bad_lines"], data["unknown_requests"]) == (4000, 3, 3)
    stats = json.loads(run_cli("stats", "-i", str(synth.inventory_path), "--state", db, "--since", "3650d",
                               "--no-replay", "--json").stdout)  # fmt: skip
    assert stats["log"] == {"lines": 4000, "bad": 3, "unknown": 3}


def test_the_clock_follows_a_lines_writing_not_its_requests_arrival(tmp_path: Path) -> None:
    """A line is written at its request's end: the daemon's clock (its wakeups, timed prefetches) is the newest
    line's writing, not the arrival `duration_s` before it — else every wakeup comes a generation late."""
    from tests.policy.builders import make_inventory

    inv = make_inventory(tmp_path, adapters=2)
    log = tmp_path / "access.jsonl"
    t0 = 1_700_000_000.0  # in the past: a live line dated more than a day ahead of the clock is a bad line
    log.write_text("".join(json.dumps({"ts": t0 + i, "model": "a0", "duration_s": 5.0}) + "\n" for i in range(3)))
    with open_store(tmp_path / "s.db") as store:
        opts = DaemonOptions(shadow=True, once=True, from_start=True, logs=(str(log),), retention_days=3650.0)
        daemon = Daemon(inv, store, opts)
        daemon.run()
    assert daemon.log_now == t0 + 2


@pytest.mark.parametrize("policy", ["lorafleet", "arc"])
def test_the_engines_alone_figure_is_one_lru_simulation_the_lorafleet_policys_own_expert(
    tmp_path: Path, policy: str
) -> None:
    """lorafleet already simulates the engines alone, as its lru expert: the summary's figure is that copy's, not
    a second lru session fed every line beside it; another policy has no such expert and keeps its own."""
    from lorafleet.drive.leader import LeaderPolicy

    synth = synthesize("workflows", 200, 3, tmp_path / "t")
    inv = load_inventory(synth.inventory_path)
    with open_store(tmp_path / "s.db") as store:
        opts = DaemonOptions(policy=policy, shadow=True, once=True, from_start=True, retention_days=3650.0)
        daemon = Daemon(inv, store, opts)
        summary = daemon.run()
    events, _ = read_events([synth.log_path], inv)
    lru = simulate(inv, "lru", events)
    alone = summary.engines_alone
    assert alone is not None and (alone.hits, alone.misses, alone.loads) == (lru.hits, lru.misses, lru.loads)
    core_policy = daemon.session.core.policy
    if policy == "lorafleet":
        assert isinstance(core_policy, LeaderPolicy)
        expert = core_policy.expert("lru")
        assert expert is not None and alone is expert.counts and daemon.baseline is None
        assert core_policy.expert("no-such-expert") is None
    else:
        assert daemon.baseline is not None and alone is daemon.baseline.counts


def test_the_experts_runs_read_lines_a_poll_after_their_writing_as_the_daemon_does(tmp_path: Path) -> None:
    """The lorafleet policy scores its experts on logs with durations by runs that read each line as the daemon's
    follower does, at most a poll after its writing (tests/policy/test_learned_late.py: replay's lag)."""
    inv = load_inventory(INVENTORIES / "demo.yaml")
    with open_store(tmp_path / "s.db") as store:
        daemon = Daemon(inv, store, DaemonOptions(policy="lorafleet", shadow=True, once=True, poll_s=0.3))
        assert daemon.session.read_after_s == 0.3
        assert daemon.session.core.policy.read_after_s == 0.3  # type: ignore[attr-defined]


def test_a_shadow_runs_summary_counts_its_commits_and_no_reconcile(tmp_path: Path, monkeypatch) -> None:
    """`daemon --json`'s own counts: every journal transaction is a commit, and in shadow mode no engine is read
    (no reconcile, so no restart or vanished files); every line is counted, but a blank one."""
    from lorafleet.store import journal

    synth = synthesize("workflows", 1200, 3, tmp_path / "t")
    with synth.log_path.open("a") as fh:
        fh.write("\n")  # a blank line is no request, and no line of the summary's
    commits: list[int] = []
    real = journal.commit_or_drop

    def counted(*args: object, **kwargs: object) -> int:
        commits.append(1)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr("lorafleet.daemon.loop.commit_or_drop", counted)
    summary = run_shadow(synth.inventory_path, tmp_path / "s.db", "lru", commit_every_lines=500)
    assert (summary.reconciles, summary.engine_restarts, summary.vanished) == (0, 0, 0)  # type: ignore[attr-defined]
    assert summary.commits == len(commits) >= 3  # type: ignore[attr-defined]
    assert summary.lines == summary.requests == 1200  # type: ignore[attr-defined]


def test_a_shadow_runs_metrics_say_what_its_summary_says(tmp_path: Path) -> None:
    """The Prometheus series a dashboard reads (requests, engine calls, load times, cold seconds paid and
    avoided, lines read and bad, how far behind the log is, how long a batch's decisions took) agree with the
    run's own counts: each call counted once, seconds as seconds."""
    synth = synthesize("workflows", 1500, 4, tmp_path / "t")
    with synth.log_path.open("a") as fh:
        fh.write("not json\n{}\n")  # two bad lines: one not JSON, one without an adapter
    newest = max(parse_time(json.loads(x)["ts"]) for x in synth.log_path.read_text().splitlines()[:-2])
    inv = load_inventory(synth.inventory_path)
    with open_store(tmp_path / "s.db") as store:
        opts = DaemonOptions(policy="lorafleet", shadow=True, once=True, from_start=True, retention_days=3650.0)
        daemon = Daemon(inv, store, opts)
        summary = daemon.run()
    registry = daemon.metrics.registry

    def total(name: str, **labels: str) -> float:
        found = 0.0
        for metric in registry.collect():
            for sample in metric.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                    found += sample.value
        return found

    assert summary.loads > 0 and summary.touches > 0 and summary.cold_ms_avoided > 0
    assert total("lorafleet_requests_total", mode="shadow") == summary.requests
    assert total("lorafleet_actions_total", action="load", result="ok") == summary.loads
    assert total("lorafleet_actions_total", action="touch", result="ok") == summary.touches
    assert total("lorafleet_load_seconds_count") == summary.loads  # every simulated load answered with its time
    assert total("lorafleet_cold_seconds_paid_total") == pytest.approx(summary.cold_ms_paid / 1000.0)
    assert total("lorafleet_cold_seconds_avoided_total") == pytest.approx(summary.cold_ms_avoided / 1000.0)
    assert total("lorafleet_log_lines_total", result="ok") == summary.lines - 2 == 1500
    assert total("lorafleet_log_lines_total", result="bad") == summary.bad_lines == 2
    # The lag is the wall clock past the newest line's time (the synthetic log is weeks old).
    assert total("lorafleet_log_lag_seconds") == pytest.approx(time.time() - newest, abs=60.0)
    assert total("lorafleet_log_lag_bytes") == 0  # every byte of the log read
    batches = total("lorafleet_decision_latency_seconds_count")
    assert batches >= 1 and 0.0 <= total("lorafleet_decision_latency_seconds_sum") < 60.0


def test_a_minute_names_at_most_a_thousand_tenants_in_the_journal_the_rest_as_other_tenants(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A tenant field that is a user id (a new name per request) must not write a journal row per request: each
    minute's rollups name its first thousand tenants and roll the rest into one "(other tenants)", said once;
    the totals are every request's."""
    import logging

    synth = synthesize("workflows", 2500, 3, tmp_path / "t")
    rows = [json.loads(line) for line in synth.log_path.read_text().splitlines()]
    t0 = 1_780_000_040.0  # 20 s into a minute: 1,200 requests in its 40 s left, 1,300 in the next minute
    with synth.log_path.open("w") as fh:
        for i, row in enumerate(rows):
            at = t0 + (i * 40.0 / 1200 if i < 1200 else 40.0 + (i - 1200) * 59.0 / 1300)
            fh.write(json.dumps({**row, "ts": at, "tenant_id": f"user-{i}"}) + "\n")
    with caplog.at_level(logging.WARNING, logger="lorafleet.daemon"):
        summary = run_shadow(synth.inventory_path, tmp_path / "s.db", "lru", retention_days=36500.0)
    with sqlite3.connect(tmp_path / "s.db") as c:
        per_minute = c.execute(
            "SELECT minute, COUNT(DISTINCT tenant), SUM(requests), SUM(CASE WHEN tenant = '(other tenants)' "
            "THEN requests END) FROM rollups GROUP BY minute ORDER BY minute"
        ).fetchall()
    assert [(n, requests, other) for _, n, requests, other in per_minute] == [(1001, 1200, 200), (1001, 1300, 300)]
    assert summary.requests == 2500  # type: ignore[attr-defined]
    said = [r.getMessage() for r in caplog.records if "(other tenants)" in r.getMessage()]
    assert len(said) == 1 and "more than 1000 tenants in the minute" in said[0]


def test_an_idle_daemon_writes_no_transaction_until_a_line_comes(tmp_path: Path) -> None:
    """Commits are due every second, but one with nothing new (no line, no action, what was learned already
    written) is skipped: an idle daemon does not rewrite its state file each second."""
    from tests.daemon.conftest import daemon_in_thread, wait_for

    synth = synthesize("workflows", 300, 4, tmp_path / "t")
    inv = load_inventory(synth.inventory_path)
    options = DaemonOptions(policy="lorafleet", shadow=True, from_start=True, retention_days=3650.0)
    with daemon_in_thread(inv, tmp_path / "s.db", options) as daemon:
        wait_for(lambda: daemon.summary.lines == 300 and daemon.summary.commits >= 1, what="the log read")
        deadline = time.monotonic() + 15.0
        while True:  # the commit after the last line, and the memory once it is due (the memory's share)
            settled = daemon.summary.commits
            time.sleep(1.2)
            if daemon.summary.commits == settled or time.monotonic() > deadline:
                break
        time.sleep(2.5)  # two more commit intervals with nothing new
        assert daemon.summary.commits == settled
        last = json.loads(synth.log_path.read_text().splitlines()[-1])
        with synth.log_path.open("a") as fh:
            fh.write(json.dumps(last) + "\n")
        wait_for(lambda: daemon.summary.commits > settled, what="a commit for the new line")


def test_lines_are_journaled_each_second_whatever_the_memorys_cadence(tmp_path: Path) -> None:
    """What was learned goes with a commit only every `memory_every_s`; the lines' counts and checkpoints do not
    wait for it (a crash loses at most a second of them)."""
    from tests.daemon.conftest import daemon_in_thread, wait_for

    synth = synthesize("workflows", 300, 4, tmp_path / "t")
    inv = load_inventory(synth.inventory_path)
    options = DaemonOptions(
        policy="lorafleet", shadow=True, from_start=True, retention_days=3650.0, memory_every_s=3600.0
    )
    with daemon_in_thread(inv, tmp_path / "s.db", options) as daemon:
        wait_for(lambda: daemon.summary.lines == 300, what="the log read")
        wait_for(lambda: daemon.summary.commits >= 1, timeout=5.0, what="a commit within the commit interval")
        with sqlite3.connect(tmp_path / "s.db") as c:
            assert c.execute("SELECT SUM(requests) FROM rollups").fetchone()[0] == 300
            assert c.execute("SELECT COUNT(*) FROM policy_memory").fetchone()[0] == 0  # not due for an hour


@pytest.mark.parametrize("policy", ["markov", "arc"])
def test_under_a_policy_without_an_lru_expert_the_engines_alone_figure_is_still_replays_lru(
    tmp_path: Path, run_cli, policy: str
) -> None:  # type: ignore[no-untyped-def]
    """A baseline policy has no lru copy of the fleet to read the figure from: the daemon runs one beside it,
    simulated as replay does (loads take their time), and its counts are replay's lru to the request."""
    synth = synthesize("workflows", 400, 3, tmp_path / "t")
    inv = load_inventory(synth.inventory_path)
    args = ("daemon", "-i", str(synth.inventory_path), "--state", str(tmp_path / "s.db"), "--shadow", "--once")
    data = json.loads(run_cli(*args, "--from-start", "--policy", policy, "--metrics-addr", "off", "--json").stdout)
    lru = simulate(inv, "lru", read_events([synth.log_path], inv)[0])
    alone = data["engines_alone"]
    counts = (alone["hits"], alone["late"], alone["misses"], alone["loads"])
    assert counts == (lru.hits, lru.late, lru.misses, lru.loads)
    assert alone["cold_ms_paid"] == pytest.approx(lru.cold_ms_total, abs=0.5)


def test_freezing_what_was_learned_takes_at_most_its_share_of_the_loops_time(tmp_path: Path, monkeypatch) -> None:
    """A big fleet's memory takes long to freeze: the next is due only after `took / memory_share` (here 0.25 s
    / 5% = 5 s), however often lines come and commits go."""
    import lorafleet.daemon.loop as loop
    from tests.daemon.conftest import daemon_in_thread, wait_for

    frozen: list[float] = []
    real = loop.freeze

    def slow(core):  # type: ignore[no-untyped-def]
        time.sleep(0.25)
        frozen.append(time.monotonic())
        return real(core)

    monkeypatch.setattr(loop, "freeze", slow)
    synth = synthesize("workflows", 200, 4, tmp_path / "t")
    lines = synth.log_path.read_text().splitlines()
    synth.log_path.write_text("\n".join(lines[:100]) + "\n")
    options = DaemonOptions(policy="lru", shadow=True, from_start=True, retention_days=3650.0)
    with daemon_in_thread(load_inventory(synth.inventory_path), tmp_path / "s.db", options) as daemon:
        wait_for(lambda: len(frozen) == 1, what="the first memory")
        for line in lines[100:125]:  # a line every 0.1 s: every commit has something new
            with synth.log_path.open("a") as fh:
                fh.write(line + "\n")
            time.sleep(0.1)
        wait_for(lambda: daemon.summary.lines == 125, what="the lines read")
        assert len(frozen) == 1 and daemon.summary.commits >= 2


def test_the_engines_alone_session_beside_a_baseline_keeps_no_answers(tmp_path: Path) -> None:
    """Its counts are the figure; nothing reads its answers, so it keeps none (a list of one per request, for the
    whole life of the daemon, would be a leak)."""
    synth = synthesize("workflows", 300, 3, tmp_path / "t")
    options = DaemonOptions(policy="lfu", shadow=True, once=True, from_start=True, retention_days=3650.0)
    with open_store(tmp_path / "s.db") as store:
        daemon = Daemon(load_inventory(synth.inventory_path), store, options)
        summary = daemon.run()
    assert daemon.baseline is not None and summary.engines_alone is not None
    assert summary.engines_alone.requests == 300 and not daemon.baseline.answers
