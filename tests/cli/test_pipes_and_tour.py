"""What a new admin meets first: piping a table to `head`, and the README's warm tour on free ports."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import INVENTORIES, ROOT

ENV = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "100"}


def test_a_table_piped_to_head_exits_0_quietly() -> None:
    for args in (["inventory", "show", "-i", str(INVENTORIES / "onprem-dgx.yaml")], ["completion", "bash"]):
        proc = subprocess.Popen(
            [sys.executable, "-m", "lorafleet", *args], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.readline()
        proc.stdout.close()  # what `head -1` does
        assert proc.wait(timeout=30) == 0
        assert proc.stderr.read() == b""


def test_an_error_in_json_to_a_closed_pipe_or_a_full_disk_is_the_error_and_its_exit_code() -> None:
    """`--json` writes the error to stdout as well: when nothing can read it, the stderr line and the exit code
    still say what went wrong, with no traceback; a full disk under a normal answer is said in one line."""
    bad = [sys.executable, "-m", "lorafleet", "inventory", "check", "-i", str(ROOT / "no-such.yaml"), "--json"]
    proc = subprocess.Popen(bad, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader left before the answer came
    assert proc.wait(timeout=30) == 2
    err = proc.stderr.read().decode()
    assert err.startswith("error: ") and "Traceback" not in err
    show = [sys.executable, "-m", "lorafleet", "inventory", "show", "-i", str(INVENTORIES / "onprem-dgx.yaml")]
    for args in (bad, show, [*show, "--json"]):
        with open("/dev/full", "w") as full:
            result = subprocess.run(args, env=ENV, stdout=full, stderr=subprocess.PIPE, text=True, timeout=30)
        assert result.returncode == (2 if args is bad else 1), result.stderr
        assert "Traceback" not in result.stderr and "internal error" not in result.stderr
        if args is not bad:
            assert result.stderr == "error: No space left on device\n"


def test_the_emulator_takes_free_ports_and_writes_the_tour_inventory(tmp_path: Path) -> None:
    inventory = tmp_path / "demo-live.yaml"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.engine_emulator", "--port", "0", "--write-inventory", str(inventory)],
        env=ENV,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline() for _ in range(3)]
        assert lines[2].startswith("wrote") and inventory.exists(), lines
        result = subprocess.run(
            [sys.executable, "-m", "lorafleet", "warm", "code-r64", "sql-r16", "-i", str(inventory)],
            env={**ENV, "LORAFLEET_STATE": str(tmp_path / "state.db")},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        assert "loaded" in result.stdout
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_the_emulator_says_clearly_when_its_port_is_taken() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        began = time.monotonic()
        result = subprocess.run(
            [sys.executable, "-m", "tests.engine_emulator", "--vllm-port", str(port)],
            env=ENV,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr and "--port 0" in result.stderr
    assert time.monotonic() - began < 30
