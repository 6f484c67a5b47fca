"""Every table is readable at 80 and 120 columns: no line too wide, no token broken or cut."""

from __future__ import annotations

import json

import pytest
from rich.cells import cell_len

from tests.conftest import INVENTORIES

DEMO = str(INVENTORIES / "demo.yaml")
DEMO_LOG = str(INVENTORIES / "demo-access.jsonl")


def assert_fits(text: str, width: int) -> None:
    for line in text.splitlines():
        assert cell_len(line) <= width, line
    assert "…" not in text  # nothing was cut to fit


@pytest.mark.parametrize("width", [80, 120])
def test_replay_table_fits_and_keeps_every_figure_whole(run_cli, width: int) -> None:
    env = {"COLUMNS": str(width)}
    result = run_cli("replay", DEMO_LOG, "-i", DEMO, env=env)
    assert result.exit_code == 0, result.stderr
    assert_fits(result.stdout, width)
    data = json.loads(run_cli("replay", DEMO_LOG, "-i", DEMO, "--json").stdout)
    rows = {line.split()[0]: line for line in result.stdout.splitlines() if "│" in line}
    for p in data["policies"]:
        row = rows[p["policy"]]  # the name whole, at the start of its row
        assert f"{p['hit_ratio']:.1%}" in row and f"{p['misses']:,}" in row
    conclusion = " ".join(result.stdout.split())
    assert "lorafleet would turn" in conclusion and "the bound (oracle)" in conclusion
    belady = next(p for p in data["policies"] if p["policy"] == "belady")
    assert f"evictions alone, knowing the future, reach {belady['hit_ratio']:.0%} (belady)" in conclusion
    for legend in ("hit ratio:", "late:", "headroom:"):
        assert legend in " ".join(result.stdout.split())


@pytest.mark.parametrize("inventory", sorted(p.name for p in INVENTORIES.glob("*.yaml")))
def test_inventory_show_fits_80_columns(run_cli, inventory: str) -> None:
    result = run_cli("inventory", "show", "-i", str(INVENTORIES / inventory), env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.stderr
    assert_fits(result.stdout, 80)
    shown = json.loads(run_cli("inventory", "show", "--json", "-i", str(INVENTORIES / inventory)).stdout)
    for host in shown["hosts"]:
        assert host["name"] in result.stdout
        for engine in host["engines"]:
            assert engine["key"] in result.stdout


def test_wide_shows_every_column(run_cli) -> None:
    result = run_cli("replay", DEMO_LOG, "-i", DEMO, "--wide", env={"COLUMNS": "250"})
    for header in ("GPU hits", "wait total s", "prefetched", "wasted", "over budget", "loader busy"):
        assert header in result.stdout
    shown = run_cli("inventory", "show", "--wide", "-i", DEMO, env={"COLUMNS": "250"})
    assert "http://127.0.0.1:18000" in shown.stdout


@pytest.mark.parametrize("width", [80, 120])
def test_every_journal_and_plan_table_fits_with_its_legend(run_cli, tmp_path, width: int) -> None:
    """The daemon's summary, stats and stats loads over its journal, and plan (with flags and sizing)."""
    env = {"COLUMNS": str(width)}
    db = str(tmp_path / "s.db")
    daemon = run_cli("daemon", "-i", DEMO, "--state", db, "--shadow", "--from-start", "--once",
                     "--metrics-addr", "off", "--retention", "3650d", env=env)  # fmt: skip
    window = ("--since", "2026-11-02T09:00Z", "--until", "2026-11-02T10:00Z")
    tables = {
        "daemon": (daemon, "engines alone:"),
        "stats": (run_cli("stats", "-i", DEMO, "--state", db, *window, "--no-replay", env=env), "hit %:"),
        "stats loads": (run_cli("stats", "loads", "--state", db, *window, env=env), "time:"),
        "plan": (run_cli("plan", "-i", DEMO, "--recommend-flags", "--target-hit-ratio", "0.9", env=env), "fits:"),
    }
    for name, (result, legend) in tables.items():
        assert result.exit_code == 0, (name, result.stderr)
        assert_fits(result.stdout, width)
        assert legend in " ".join(result.stdout.split()), name
    per_request = json.loads(run_cli("stats", "-i", DEMO, "--state", db, *window, "--no-replay", "--json").stdout)
    ratio = per_request["overall"]["touches_per_request"]
    for name in ("daemon", "stats"):  # touches in the touch budget's unit, the journal's figure in both
        assert f"{ratio:.3f} per request" in " ".join(tables[name][0].stdout.split()), name
