"""`lorafleet stats` and `stats loads` tables cell by cell over the seeded journal of test_stats.py: the summary's
shares, the trend sparklines, tenant tiers, a long name's cut, the loads columns, the window checks, and --watch's
window."""

from __future__ import annotations

import json
from pathlib import Path

from lorafleet.store.db import open_store
from lorafleet.store.journal import ActionRow, Outcomes, commit_progress
from tests.cli.test_stats import T0, WINDOW, seed
from tests.tables import by_first, header


def test_the_summary_gives_each_outcome_as_a_share_of_the_requests(tmp_path: Path, run_cli) -> None:
    db = tmp_path / "s.db"
    seed(db)  # 25 requests: 15 hits, 1 late, 9 misses
    result = run_cli("stats", "--state", str(db), "--no-replay", *WINDOW, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.stderr
    summary = by_first(result.stdout)
    assert summary["hits"][1:] == ["15", "60.0%; 9 in a GPU slot"]
    assert summary["late"][1:] == ["1", "4.0% waited on a load in flight"]
    assert summary["misses"][1:] == ["9", "36.0% cold starts"]
    assert summary["requests"][2] == "trend ▅"  # 60 %: the 5th of 8 bars


def test_the_trend_column_is_each_keys_hit_ratio_as_a_bar(tmp_path: Path, run_cli) -> None:
    db = tmp_path / "s.db"
    seed(db)
    by_adapter = by_first(run_cli("stats", "--state", str(db), "--no-replay", *WINDOW, "--by", "adapter").stdout)
    assert by_adapter["a2"][-1] == "▂"  # 2 of 10 hits
    assert by_adapter["a1"][-1] == "▇"  # 13 of 15
    by_tenant = by_first(run_cli("stats", "--state", str(db), "--no-replay", *WINDOW, "--by", "tenant").stdout)
    assert by_tenant["beta"][-1] == "█"  # every request a hit: the full bar


def test_by_tenant_shows_each_tenants_tier_from_the_inventory(tmp_path: Path, run_cli, write_yaml) -> None:
    db = tmp_path / "s.db"
    seed(db)
    inv = write_yaml(
        "base_models:\n  m: {hidden_size: 64, intermediate_size: 128, num_layers: 2, num_attention_heads: 4}\n"
        "hosts:\n  - {name: h, provider: onprem, engines: [{name: e0, kind: vllm, url: 'http://127.0.0.1:9', "
        "base_model: m}]}\n"
        "adapters:\n  - {id: a1, base_model: m, path: /a1, rank: 8, tenants: [acme]}\n"
        "tenants:\n  acme: {tier: gold}\n"
    )
    args = ("stats", "-i", str(inv), "--state", str(db), "--no-replay", *WINDOW)
    rows = {r["key"]: r for r in json.loads(run_cli(*args, "--json").stdout)["by"]}
    assert rows["acme"]["tier"] == "gold" and rows["beta"]["tier"] is None  # beta: not in the inventory
    table = run_cli(*args, env={"COLUMNS": "200"})
    assert header(table.stdout, "tenant")[:3] == ["tenant", "tier", "requests"]
    assert by_first(table.stdout)["acme"][1:3] == ["gold", "20"]
    by_adapter = json.loads(run_cli(*args, "--by", "adapter", "--json").stdout)["by"]
    assert all(r["tier"] is None for r in by_adapter)  # tiers are tenants'


def test_a_long_name_is_cut_to_32_characters_in_the_narrow_table(tmp_path: Path, run_cli) -> None:
    db = tmp_path / "s.db"
    seed(db)
    with open_store(db) as store:
        commit_progress(store, rollups={(T0 + "03Z", "t" * 100, "a1", "h/e0"): Outcomes(1, 1, 0, 0, 0, 0, 0.0, 0.0)})
    result = run_cli("stats", "--state", str(db), "--no-replay", *WINDOW, env={"COLUMNS": "200"})
    assert "t" * 31 + "…" in result.stdout and "t" * 32 not in result.stdout


def test_stats_loads_cells_and_columns(tmp_path: Path, run_cli) -> None:
    db = tmp_path / "s.db"
    seed(db)
    with open_store(db) as store:  # two touches counted in one minute
        touches = [
            ActionRow(T0 + f"05:{second}.000Z", "daemon", "a1", "h/e0", "touched", True, 3.0, 1, None, "keep")
            for second in (10, 20)
        ]
        commit_progress(store, actions=touches)
    narrow = run_cli("stats", "loads", "--state", str(db), *WINDOW, env={"COLUMNS": "200"})
    assert narrow.exit_code == 0, narrow.stderr
    assert header(narrow.stdout, "time") == ["time", "engine", "adapter", "action", "why", "ms"]
    rows = [[c.strip() for c in line.split("│")] for line in narrow.stdout.splitlines() if "│" in line]
    assert ["10:00:10", "h/e0", "a1", "loaded", "prefetch", "40"] in rows  # one load: no ×1
    assert ["10:00:14", "h/e1", "a3", "refused ✗", "prefetch", "0"] in rows
    assert ["10:05:00", "h/e0", "a1", "touched ×2", "keep", ""] in rows  # at its minute's start, with its count
    wide = run_cli("stats", "loads", "--state", str(db), *WINDOW, "--wide", env={"COLUMNS": "200"})
    assert header(wide.stdout, "time") == ["time", "engine", "adapter", "action", "why", "ms", "by", "note"]


def test_an_empty_window_is_refused_by_stats_loads_too(tmp_path: Path, run_cli) -> None:
    db = tmp_path / "s.db"
    seed(db)
    same = ("--since", "2026-11-20T10:00:00Z", "--until", "2026-11-20T10:00:00Z")
    for command in (("stats",), ("stats", "loads")):
        result = run_cli(*command, "--state", str(db), *same)
        assert result.exit_code == 2, command
        assert "--since 2026-11-20T10:00:00.000Z is not before --until 2026-11-20T10:00:00.000Z" in result.stderr


def test_watch_keeps_the_windows_length_ending_now(tmp_path: Path, run_cli, monkeypatch) -> None:
    """--watch --since 1h shows the last hour, refreshed: the seeded requests (weeks old) are not in it."""
    import time

    db = tmp_path / "s.db"
    seed(db)

    def interrupt(_seconds: float) -> None:  # Ctrl-C at the first refresh
        raise KeyboardInterrupt

    monkeypatch.setattr(time, "sleep", interrupt)
    result = run_cli("stats", "--state", str(db), "--since", "1h", "--watch", env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.stderr
    assert by_first(result.stdout)["requests"][1] == "0"
    result = run_cli("stats", "--state", str(db), "--since", "3650d", "--watch", env={"COLUMNS": "120"})
    assert by_first(result.stdout)["requests"][1] == "25" or int(by_first(result.stdout)["requests"][1]) >= 25


def test_watch_does_not_replay_the_logs_at_each_refresh(tmp_path: Path, run_cli, monkeypatch) -> None:
    """The lru figure replays the window's gateway logs: the live dashboard leaves it out (as --no-replay)."""
    import time

    from tests.conftest import INVENTORIES

    demo, db = str(INVENTORIES / "demo.yaml"), str(tmp_path / "s.db")
    run_cli("daemon", "-i", demo, "--state", db, "--shadow", "--from-start", "--once", "--metrics-addr", "off",
            "--retention", "3650d")  # fmt: skip
    table = run_cli("stats", "-i", demo, "--state", db, "--since", "3650d", env={"COLUMNS": "120"})
    assert "lru alone" in table.stdout  # the logs are there to replay

    def interrupt(_seconds: float) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(time, "sleep", interrupt)
    watch = run_cli("stats", "-i", demo, "--state", db, "--since", "3650d", "--watch", env={"COLUMNS": "120"})
    assert watch.exit_code == 0 and "requests" in watch.stdout
    assert "lru alone" not in watch.stdout
