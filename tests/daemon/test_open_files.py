"""A glob over a log folder can match more files than a process may open: each followed file holds a descriptor
(rotation is followed through it). The daemon raises its soft open-files limit to the hard one; past what it may
hold (half the limit: the rest is the journal's, the engines' connections' and the directory scans'), the files it
cannot open are said, counted, retried at each look, and a --once run exits 1. Real processes under real limits."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.daemon.conftest import log_line, vllm, write_adapters, write_fleet

FILES, PER_FILE = 150, 3


def folder_of_logs(tmp: Path) -> Path:
    inv = write_fleet(tmp, [vllm("e0", "http://127.0.0.1:9")], write_adapters(tmp / "adapters", 3))
    inv.write_text(inv.read_text().replace("    - path: access.jsonl\n", "    - path: 'logs/*.jsonl'\n"))
    (tmp / "logs").mkdir()
    t0 = time.time() - 3600
    for i in range(FILES):
        lines = (log_line(f"a{(i + j) % 3}", ts=t0 + i * PER_FILE + j, engine="h/e0") for j in range(PER_FILE))
        (tmp / "logs" / f"{i:04d}.jsonl").write_text("".join(lines))
    return inv


def once(inv: Path, state: Path, limits: tuple[int, int] | None) -> subprocess.CompletedProcess[str]:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)

    def limited() -> None:  # a hard limit can be lowered by anyone, raised by no one here: kept at most as it is
        if limits is not None:
            soft, wanted = limits
            top = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, top), top))

    command = [sys.executable, "-m", "lorafleet", "daemon", "-i", str(inv), "--state", str(state), "--shadow",
               "--once", "--from-start", "--metrics-addr", "off", "--json"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(command, capture_output=True, text=True, env=env, preexec_fn=limited, timeout=120)


def test_a_low_soft_limit_is_raised_to_the_hard_one_and_every_file_is_read(tmp_path: Path) -> None:
    inv = folder_of_logs(tmp_path)
    done = once(inv, tmp_path / "s.db", (64, 4096))
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert (summary["lines"], summary["unread_logs"]) == (FILES * PER_FILE, 0)
    assert "cannot be opened" not in done.stderr


def test_files_past_the_limit_are_said_counted_and_read_once_it_allows_them(tmp_path: Path) -> None:
    inv = folder_of_logs(tmp_path)
    done = once(inv, tmp_path / "s.db", (64, 64))  # no more to be had: 32 log files at most
    assert done.returncode == 1
    summary = json.loads(done.stdout)
    assert summary["unread_logs"] == FILES - 32 and summary["lines"] == 32 * PER_FILE
    warning = next(line for line in done.stderr.splitlines() if "cannot be opened" in line)
    assert f"{FILES - 32} matching log file(s) cannot be opened" in warning
    assert "raise the open-files limit (ulimit -n, LimitNOFILE=)" in warning and "0032.jsonl" in warning
    done = once(inv, tmp_path / "s.db", None)  # the limit raised: the rest, from the checkpoints, none twice
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["lines"] == (FILES - 32) * PER_FILE


def test_the_files_not_read_are_a_gauge_a_dashboard_and_an_alert_can_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In process, with the share of descriptors for logs set to ten: the rest are `lorafleet_log_files_unread`."""
    from lorafleet.daemon.loop import Daemon, DaemonOptions
    from lorafleet.inventory import load_inventory
    from lorafleet.logs import follow
    from lorafleet.store.db import open_store

    inv = folder_of_logs(tmp_path)
    held = len(follow._Held.files)  # what other followers of this process hold still
    monkeypatch.setattr(follow._Held, "limit", staticmethod(lambda: held + 10))
    options = DaemonOptions(shadow=True, once=True, from_start=True, metrics_addr=None)
    with open_store(tmp_path / "s.db") as store:
        daemon = Daemon(load_inventory(inv), store, options)
        summary = daemon.run()
    unread = daemon.metrics.registry.get_sample_value("lorafleet_log_files_unread", {"mode": "shadow"})
    assert unread == summary.unread_logs == FILES - 10 and summary.lines == 10 * PER_FILE
