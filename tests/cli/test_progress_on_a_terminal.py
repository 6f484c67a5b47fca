"""On a terminal, `vram`, `warm` and `unload` draw a progress bar on stderr while they work; with --json they draw none
(a script reading the JSON from a terminal session must not get escape codes on stderr). Run under a real
pseudo-terminal: CliRunner's output is never a terminal, so no other test sees the bar."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.sshd_server import free_port


def on_a_terminal(*args: str, timeout: float = 30.0) -> tuple[int, str, str]:
    """Run `lorafleet ARGS` with stdout and stderr each on its own pseudo-terminal: (exit status, stdout, stderr)."""
    out_master, out_slave = pty.openpty()
    err_master, err_slave = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TERM": "xterm", "COLUMNS": "100"}
    proc = subprocess.Popen([sys.executable, "-m", "lorafleet", *args], stdout=out_slave, stderr=err_slave, env=env)
    os.close(out_slave)
    os.close(err_slave)
    received = {out_master: b"", err_master: b""}
    open_fds = set(received)
    deadline = time.monotonic() + timeout
    try:
        while open_fds and time.monotonic() < deadline:
            ready, _, _ = select.select(list(open_fds), [], [], 0.1)
            for fd in ready:
                try:
                    data = os.read(fd, 65536)
                except OSError:  # EIO: the child closed its end
                    data = b""
                if not data:
                    open_fds.discard(fd)
                received[fd] += data
        code = proc.wait(timeout=10)
    finally:
        proc.kill()
        os.close(out_master)
        os.close(err_master)
    return code, received[out_master].decode(errors="replace"), received[err_master].decode(errors="replace")


@pytest.fixture
def unreachable(tmp_path: Path) -> Path:
    """A host and an engine that refuse connections at once (a free loopback port nobody listens on)."""
    port = free_port()
    path = tmp_path / "inv.yaml"
    path.write_text(
        "base_models:\n  m: {hidden_size: 64, intermediate_size: 128, num_layers: 2, num_attention_heads: 4}\n"
        "hosts:\n  - name: away\n    provider: onprem\n    connection: ssh\n    address: 127.0.0.1\n"
        f"    ssh: {{port: {port}, connect_timeout_s: 1}}\n    request_timeout_s: 2\n"
        f"    engines:\n      - {{name: v, kind: vllm, url: 'http://127.0.0.1:{port}', base_model: m}}\n"
        "adapters:\n  - {id: a8, base_model: m, path: /nowhere, rank: 8}\n"
    )
    return path


@pytest.mark.parametrize(
    "command, bar",
    [(["vram"], "probing hosts"), (["warm", "a8", "--dry-run"], "warming"), (["unload", "a8"], "unloading")],
)
def test_a_progress_bar_on_a_terminal_and_none_with_json(unreachable: Path, tmp_path: Path, command, bar) -> None:
    state = ["--state", str(tmp_path / "s.db")] if command[0] != "vram" else []
    code, _, err = on_a_terminal(*command, "-i", str(unreachable), *state)
    assert code == 1 and bar in err, err  # every host or engine failed: exit 1, after the bar
    code, out, err = on_a_terminal(*command, "-i", str(unreachable), *state, "--json")
    assert code == 1 and out.lstrip().startswith("{")
    assert bar not in err and "\x1b" not in err, err
