"""Crash safety and log rotation with the daemon as a real process (shadow mode: no engine needed)."""

from __future__ import annotations

import os
import random
import shutil
import signal
import sqlite3
import time
from pathlib import Path

from tests.daemon.conftest import log_line, vllm, wait_for, write_adapters, write_fleet

T0 = time.time() - 3600  # recent: within the journal's retention


def requests_in(db: Path) -> int:
    if not db.exists():
        return 0
    with sqlite3.connect(db) as c:
        try:
            return c.execute("SELECT COALESCE(SUM(requests), 0) FROM rollups").fetchone()[0]
        except sqlite3.OperationalError:  # killed before its schema was written
            return 0


def bad_lines_in(db: Path) -> int:
    with sqlite3.connect(db) as c:
        return c.execute("SELECT COALESCE(SUM(bad), 0) FROM log_minutes").fetchone()[0]


def test_kill_9_at_random_points_neither_loses_nor_double_counts(tmp_path, daemon_process) -> None:
    adapters = write_adapters(tmp_path / "adapters", 6)
    inv = write_fleet(tmp_path, [vllm("e0", "http://127.0.0.1:9")], adapters)
    log = tmp_path / "access.jsonl"
    db = tmp_path / "state.db"
    rng = random.Random(20261129)
    written = 0
    partial = ""
    for round_ in range(20):
        daemon = daemon_process(inv, db, "--shadow", "--from-start", "--metrics-addr", "off")
        if round_ % 4:  # most rounds are killed while following; every fourth maybe during start-up
            wait_for(lambda d=daemon: "following" in d.log(), what="the daemon to start")  # type: ignore[misc]
        deadline = time.monotonic() + rng.uniform(0.1, 1.5)
        while time.monotonic() < deadline:
            with open(log, "a") as fh:
                for _ in range(rng.randint(1, 40)):
                    line = partial + log_line(f"a{rng.randrange(6)}", ts=T0 + written)
                    partial = ""
                    if rng.random() < 0.1:  # half a line now, the rest later (maybe after the kill)
                        cut = rng.randrange(1, len(line) - 1)
                        fh.write(line[:cut])
                        partial = line[cut:]
                        written += 1
                        break
                    fh.write(line)
                    written += 1
            time.sleep(rng.uniform(0.0, 0.03))
        daemon.proc.send_signal(signal.SIGKILL)
        daemon.proc.wait()
    with open(log, "a") as fh:
        fh.write(partial)
    final = daemon_process(inv, db, "--shadow", "--once", "--from-start", "--metrics-addr", "off")
    assert final.proc.wait(60) == 0, final.log()
    assert requests_in(db) == written
    assert bad_lines_in(db) == 0


def test_rotation_partial_lines_late_files_and_junk_while_running(tmp_path, daemon_process) -> None:
    adapters = write_adapters(tmp_path / "adapters", 3)
    inv = write_fleet(tmp_path, [vllm("e0", "http://127.0.0.1:9")], adapters)
    text = inv.read_text().replace("    - path: access.jsonl\n", "    - path: '*.jsonl'\n")
    inv.write_text(text)
    log = tmp_path / "access.jsonl"
    db = tmp_path / "state.db"
    daemon = daemon_process(inv, db, "--shadow", "--metrics-addr", "off")
    wait_for(lambda: "following" in daemon.log(), what="the daemon to start")
    n = 0

    def write(path: Path, count: int, extra: str = "") -> None:
        nonlocal n
        with open(path, "a") as fh:
            for _ in range(count):
                fh.write(log_line(f"a{n % 3}", ts=T0 + n))
                n += 1
            fh.write(extra)

    def counted(expected: int) -> None:
        wait_for(lambda: requests_in(db) == expected, timeout=10, what=f"{expected} requests journaled\n{daemon.log()}")

    write(log, 10)
    counted(10)
    # rename rotation, with a last line still being written when the file is renamed
    tail = log_line("a0", ts=T0 + 500)
    with open(log, "a") as fh:
        fh.write(tail[:10])
    os.rename(log, tmp_path / "access.jsonl.1")
    with open(tmp_path / "access.jsonl.1", "a") as fh:
        fh.write(tail[10:])
    n += 1
    write(log, 5)
    counted(16)
    # copy-truncate rotation
    shutil.copy(log, tmp_path / "old.copy")
    with open(log, "r+") as fh:
        fh.truncate(0)
    write(log, 7)
    counted(23)
    # a file that appears later, junk and an over-long line, a deleted file
    write(tmp_path / "other.jsonl", 4, extra="not json\n" + "x" * 70_000 + "\n" + '{"ts": 1e400}\n')
    counted(27)
    wait_for(lambda: bad_lines_in(db) == 3, timeout=10, what="3 bad lines counted")
    (tmp_path / "other.jsonl").unlink()
    write(log, 2)
    counted(29)
    code, took = daemon.stop()
    assert code == 0 and took < 5
    assert "Traceback" not in daemon.log()


def test_json_log_format_writes_one_object_per_line(tmp_path, daemon_process) -> None:
    adapters = write_adapters(tmp_path / "adapters", 2)
    inv = write_fleet(tmp_path, [vllm("e0", "http://127.0.0.1:9")], adapters)
    (tmp_path / "access.jsonl").write_text(log_line("a0", ts=T0) + "junk\n")
    daemon = daemon_process(
        inv,
        tmp_path / "state.db",
        "--shadow",
        "--once",
        "--from-start",
        "--metrics-addr",
        "off",
        "--log-format",
        "json",
    )
    assert daemon.proc.wait(30) == 0
    import json

    records = [json.loads(line) for line in daemon.log().splitlines() if line.strip()]
    assert records and all({"time", "level", "logger", "message"} <= set(r) for r in records)
    assert any("following" in r["message"] for r in records)
