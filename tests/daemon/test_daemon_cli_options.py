"""`lorafleet daemon` options and output seen from the command line: which addresses --metrics-addr and
--hints-addr take, --log repeated, --minute-retention, the summary's shares, a standby stopped before it took over,
and each log record written once (text or JSON)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from lorafleet.daemon.lock import hold_state
from tests.conftest import INVENTORIES
from tests.daemon.conftest import wait_for

DEMO = str(INVENTORIES / "demo.yaml")
DEMO_LOG = INVENTORIES / "demo-access.jsonl"
NO_PLAN = "/nonexistent-plan.json"  # read right after the options: the run stops there, nothing is bound


def parsed(run_cli, option: str, value: str) -> bool:
    """Whether the daemon takes `option value` (it then stops at the missing plan file)."""
    result = run_cli("daemon", "-i", DEMO, option, value, "--plan", NO_PLAN)
    assert result.exit_code == 2
    if "HOST:PORT" in result.stderr:
        return False
    assert f"{NO_PLAN}: no such file" in result.stderr, result.stderr
    return True


@pytest.mark.parametrize("value", ["127.0.0.1:0", "127.0.0.1:65535", "localhost:9464", "[::1]:9464", "off"])
def test_metrics_addr_takes_host_port_bracketed_ipv6_and_off(run_cli, value: str) -> None:
    assert parsed(run_cli, "--metrics-addr", value)


@pytest.mark.parametrize(
    "value",
    ["9464", "127.0.0.1:65536", ":9464", "127.0.0.1:", "127.0.0.1:http", "[::1]]:0", "[[::1]:0", "::1", "::1:9464"],
)
def test_metrics_addr_refuses_anything_else_even_a_bare_port(run_cli, value: str) -> None:
    assert not parsed(run_cli, "--metrics-addr", value)


def test_hints_addr_takes_a_bare_port_as_loopback(run_cli) -> None:
    assert parsed(run_cli, "--hints-addr", "9999")
    assert parsed(run_cli, "--hints-addr", "[::1]:9999")
    assert not parsed(run_cli, "--hints-addr", "99999")


def test_log_is_repeatable_and_every_file_given_is_read(run_cli, tmp_path: Path) -> None:
    lines = DEMO_LOG.read_text().splitlines(keepends=True)
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_text("".join(lines[:700]))
    second.write_text("".join(lines[700:]))
    result = run_cli("daemon", "-i", DEMO, "--state", str(tmp_path / "s.db"), "--shadow", "--once", "--from-start",
                     "--metrics-addr", "off", "--log", str(first), "--log", str(second), "--json")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["lines"] == len(lines)


def test_the_summary_gives_hits_late_and_misses_as_shares_of_their_requests(run_cli, tmp_path: Path) -> None:
    args = ("daemon", "-i", DEMO, "--shadow", "--once", "--from-start", "--metrics-addr", "off")
    data = json.loads(run_cli(*args, "--state", str(tmp_path / "a.db"), "--json").stdout)
    table = run_cli(*args, "--state", str(tmp_path / "b.db"), env={"COLUMNS": "200"})
    assert table.exit_code == 0, table.stderr
    rows = {}
    for line in table.stdout.splitlines():
        if "│" in line:
            cells = [c.strip() for c in line.split("│")]
            rows[cells[0]] = cells
    alone = data["engines_alone"]
    for name in ("hits", "late", "misses"):
        ours = f"{data[name]:,} ({data[name] / data['requests']:.1%})"
        theirs = f"{alone[name]:,} ({alone[name] / alone['requests']:.1%})"
        assert rows[name][1:3] == [ours, theirs], rows[name]
    assert 0 < data["hits"] < data["requests"]  # shares strictly between 0 and 100 %


def test_minute_retention_keeps_the_minutes_that_long_and_the_hourly_sums_the_rest(run_cli, tmp_path: Path) -> None:
    """--minute-retention 1m: only the newest minute's detail stays (the demo log spans 47 minutes), while a
    day's totals (read from the hourly sums) still count every request."""
    db = str(tmp_path / "s.db")
    ran = run_cli("daemon", "-i", DEMO, "--state", db, "--shadow", "--once", "--from-start", "--metrics-addr", "off",
                  "--retention", "3650d", "--minute-retention", "1m", "--json")  # fmt: skip
    assert ran.exit_code == 0, ran.stderr
    requests = json.loads(ran.stdout)["requests"]
    hour = ("--since", "2026-11-02T09:00Z", "--until", "2026-11-02T10:00Z", "--by", "minute")
    minutes = json.loads(run_cli("stats", "--state", db, *hour, "--no-replay", "--json").stdout)["by"]
    assert 1 <= len(minutes) <= 2, [m["key"] for m in minutes]
    day = ("--since", "2026-11-02T00:00Z", "--until", "2026-11-03T00:00Z")
    assert json.loads(run_cli("stats", "--state", db, *day, "--no-replay", "--json").stdout)["overall"]["requests"] == (
        requests
    )


def standby_log(tmp_path: Path, daemon_process, *args: str) -> tuple[int, str, str]:
    """A standby started while another daemon holds the state file, stopped before it takes over: (exit status,
    its stderr, its stdout)."""
    state = tmp_path / "state.db"
    holder = hold_state(state)  # another daemon holds the state file
    assert holder is not None
    try:
        standby = daemon_process(Path(DEMO), state, "--shadow", "--standby", "--metrics-addr", "off", *args)
        wait_for(lambda: "standby:" in standby.log(), timeout=30, what="the standby to wait", log=standby.log)
        code, _ = standby.stop()
        out = standby.proc.stdout.read().decode() if standby.proc.stdout else ""
    finally:
        holder.release()
    return code, standby.log(), out


def test_a_standby_stopped_before_taking_over_says_so_on_stderr_and_exits_0(tmp_path: Path, daemon_process) -> None:
    code, err, out = standby_log(tmp_path, daemon_process)
    assert code == 0
    assert "standby stopped before taking over" in err and "standby stopped" not in out
    # each record once, stamped (-v: the CLI's handler; the daemon adds none beside it)
    waiting = [line for line in err.splitlines() if "standby:" in line]
    assert len(waiting) == 1 and re.match(r"\d{4}-\d\d-\d\dT[\d:.]+Z WARNING standby: ", waiting[0]), err


def test_json_log_format_writes_every_record_as_json_and_only_once(tmp_path: Path, daemon_process) -> None:
    code, err, _ = standby_log(tmp_path, daemon_process, "--log-format", "json")
    assert code == 0
    lines = [line for line in err.splitlines() if line.strip() and line != "standby stopped before taking over"]
    records = [json.loads(line) for line in lines]  # no plain-text copy of a record beside its JSON
    assert [r["level"] for r in records if "standby:" in r["message"]] == ["warning"]
