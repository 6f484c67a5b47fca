"""What `warm` and `unload` share (cli/acting.py), seen from the command line: the narrow and wide results
tables, row colours on a terminal, --deadline's lower bound, and unload's required ADAPTERS."""

from __future__ import annotations

import pytest

from tests.engines.test_warm import sglang_entry, vllm_entry, warm_json, write_inventory
from tests.tables import body, header


def test_the_narrow_results_table_leaves_kind_and_url_to_wide(tmp_path, run_cli, emulators, adapter_dirs) -> None:
    e = emulators(kind="vllm")
    inv = write_inventory(tmp_path, [vllm_entry("v", e.url)], adapter_dirs)
    narrow = run_cli("warm", "-i", str(inv), "r8", "--dry-run", env={"COLUMNS": "200"})
    assert narrow.exit_code == 0, narrow.stderr
    assert header(narrow.stdout) == ["adapter", "engine", "action", "ms", "detail"]
    assert "--wide shows every column" in " ".join(narrow.stdout.split())  # however the caption wraps
    wide = run_cli("warm", "-i", str(inv), "r8", "--dry-run", "--wide", env={"COLUMNS": "200"})
    assert wide.exit_code == 0, wide.stderr
    assert header(wide.stdout) == ["adapter", "engine", "kind", "url", "action", "ms", "detail"]
    (row,) = body(wide.stdout)
    assert row[:5] == ["r8", "h/v", "vllm", e.url, "would-load"]


def test_on_a_terminal_a_skipped_row_is_yellow_and_a_failed_one_red(tmp_path, run_cli, emulators, adapter_dirs) -> None:
    s = emulators(kind="sglang")
    inv = write_inventory(tmp_path, [sglang_entry("s", s.url)], adapter_dirs)
    colour = {"COLUMNS": "200", "FORCE_COLOR": "1"}
    skipped = run_cli("warm", "-i", str(inv), "r8", "--unpin", env=colour)  # r8 is not pinned: skipped, exit 1
    assert skipped.exit_code == 1
    assert "\x1b[33mskipped" in skipped.stdout, skipped.stdout
    failed = run_cli("warm", "-i", str(inv), "missing", env=colour)  # the engine refuses: failed, exit 1
    assert failed.exit_code == 1
    assert "\x1b[31mfailed" in failed.stdout, failed.stdout


@pytest.mark.parametrize("command", [["warm", "r8"], ["unload", "r8"]])
def test_a_deadline_must_be_above_zero(tmp_path, run_cli, emulators, adapter_dirs, command) -> None:
    e = emulators(kind="vllm")
    inv = write_inventory(tmp_path, [vllm_entry("v", e.url)], adapter_dirs)
    result = run_cli(*command, "-i", str(inv), "--deadline", "0")
    assert result.exit_code == 2
    assert "Invalid value for '--deadline': 0.0 is not in the range 0<x<=10000000.0" in result.stderr
    assert e.state.requests == []  # refused before any engine is asked
    assert run_cli(*command, "-i", str(inv), "--deadline", "0.5", "--json").exit_code in (0, 1)


def test_unload_without_adapters_is_a_usage_error_that_unloads_nothing(
    tmp_path, run_cli, emulators, adapter_dirs
) -> None:
    e = emulators(kind="vllm")
    inv = write_inventory(tmp_path, [vllm_entry("v", e.url)], adapter_dirs)
    assert warm_json(run_cli, inv, "r8")[0] == 0
    calls = len(e.state.requests)
    result = run_cli("unload", "-i", str(inv))
    assert result.exit_code == 2 and "Missing argument 'ADAPTERS...'" in result.stderr
    assert len(e.state.requests) == calls and "r8" in e.state.registry
