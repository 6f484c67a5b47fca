"""Hostile log lines: no format, number or length makes a reader hang, raise, or let garbage through."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from lorafleet.inventory import load_inventory
from lorafleet.logs.nginx import NginxFormat
from lorafleet.logs.reader import LineParser
from tests.conftest import INVENTORIES

REFERENCE = load_inventory(INVENTORIES / "reference.yaml")
JSONL = REFERENCE.gateway_logs[0]
ADAPTER = next(iter(REFERENCE.adapters))


@pytest.mark.parametrize("separator", ["|", ":", ",", " "])
def test_nginx_matching_is_linear_on_lines_of_separators(separator: str) -> None:
    fmt = NginxFormat(separator.join(f"$v{i}" for i in range(8)))
    line = separator * 10_000
    began = time.perf_counter()
    for _ in range(20):
        fmt.parse(line)
        fmt.parse(line + "x")
    assert time.perf_counter() - began < 2.0  # backtracking would take minutes


def test_nginx_matching_still_reads_real_formats() -> None:
    fmt = NginxFormat('$remote_addr|$time_iso8601|"$http_x_tenant"|$upstream_addr:$status')
    values = fmt.parse('10.0.0.1|2026-11-29T12:00:00+00:00|"acme \\"x\\""|127.0.0.1:8000:200')
    assert values == {
        "remote_addr": "10.0.0.1",
        "time_iso8601": "2026-11-29T12:00:00+00:00",
        "http_x_tenant": 'acme \\"x\\"',
        "upstream_addr": "127.0.0.1",
        "status": "8000:200",
    }
    assert fmt.parse("no separators at all") is None


def parse(record: dict[str, object] | str) -> tuple[object, dict[str, int]]:
    parser = LineParser(JSONL, REFERENCE)
    line = record if isinstance(record, str) else json.dumps(record)
    event = parser.parse(line)
    return event, parser.tally.bad_reasons


def record(**extra: object) -> dict[str, object]:
    return {"ts": "2026-11-29T12:00:00Z", "tenant_id": "t", "model": ADAPTER, "status": 200, **extra}


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (record(ts=int("9" * 400)), "unparseable time"),
        (record(ts="9" * 400), "unparseable time"),
        (record(ts=1e308), "unparseable time"),
        ('{"ts": Infinity, "model": "x"}', "non-finite number (NaN or Infinity)"),
        ('{"ts": 1, "model": "x", "status": NaN}', "non-finite number (NaN or Infinity)"),
        ('{"ts": ' + "9" * 5000 + ', "model": "x"}', "not JSON"),
        (record(ttft_ms=int("9" * 400)), "ttft_ms not a number in [0, 8.64e+07]"),
        (record(ttft_ms=-1), "ttft_ms not a number in [0, 8.64e+07]"),
        (record(status=99999), "status not a number in [100, 599]"),
        (record(status="abc"), "status not a number in [100, 599]"),
        (record(ts="9999-12-31T23:59:59-23:59"), "unparseable time"),
    ],
)
def test_absurd_numbers_make_the_line_bad_with_a_reason(line: object, reason: str) -> None:
    event, reasons = parse(line)  # type: ignore[arg-type]
    assert event is None
    assert reasons == {reason: 1}


def test_sane_numbers_pass() -> None:
    event, reasons = parse(record(ttft_ms=120.5))
    assert reasons == {} and event is not None
    assert (event.status, event.ttft_ms) == (200, 120.5)  # type: ignore[attr-defined]


def test_replay_explains_a_log_where_every_line_is_bad(run_cli, tmp_path: Path) -> None:
    log = tmp_path / "access.jsonl"
    log.write_text("garbage\n{}\n")
    result = run_cli("replay", str(log), "-i", str(INVENTORIES / "reference.yaml"))
    assert result.exit_code == 2
    assert "not JSON (1)" in result.stderr and "missing adapter field (1)" in result.stderr
    assert "read as JSON lines with fields {" in result.stderr and "adapter: model" in result.stderr


def test_synth_refuses_to_overwrite_and_reports_bad_paths(run_cli, tmp_path: Path) -> None:
    out = tmp_path / "wf"
    assert run_cli("trace", "synth", "--out", str(out), "--requests", "50").exit_code == 0
    again = run_cli("trace", "synth", "--out", str(out), "--requests", "50")
    assert again.exit_code == 2 and "refusing to overwrite" in again.stderr and "--force" in again.stderr
    assert run_cli("trace", "synth", "--out", str(out), "--requests", "50", "--force").exit_code == 0
    blocker = tmp_path / "file"
    blocker.write_text("x")
    bad = run_cli("trace", "synth", "--out", str(blocker / "sub"), "--requests", "5")
    assert bad.exit_code == 2 and "internal error" not in bad.stderr and "Traceback" not in bad.stderr
