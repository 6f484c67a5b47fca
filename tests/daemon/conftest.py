"""Live daemon fixtures: emulated engines on free loopback ports, real adapter folders, a log the test appends
to, and the daemon as a real subprocess."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT
from tests.engines.conftest import adapter_dirs, emulators  # noqa: F401 - fixtures used by these tests
from tests.peft_files import write_peft_adapter


@contextmanager
def daemon_in_thread(inventory: Any, state: Path, options: Any, reload: Any = None) -> Iterator[Any]:
    """A `Daemon` running in a thread of this process (its store opened there: SQLite connections belong to the
    thread that opened them), for tests that look at its state while it runs; stopped and joined on leaving."""
    from lorafleet.daemon.loop import Daemon
    from lorafleet.store.db import open_store

    made: list[Daemon] = []

    def run() -> None:
        store = open_store(state)
        made.append(Daemon(inventory, store, options, reload))
        try:
            made[0].run()
        finally:
            store.close()

    runner = threading.Thread(target=run)
    runner.start()
    try:
        deadline = time.monotonic() + 10.0
        while not made:
            assert runner.is_alive() and time.monotonic() < deadline, "the daemon did not start"
            time.sleep(0.01)
        yield made[0]
    finally:
        if made:
            made[0].stop.set()
        runner.join(10)
    assert not runner.is_alive()


BASE = "  m: {hidden_size: 64, intermediate_size: 128, num_layers: 2, num_attention_heads: 4}\n"


def write_adapters(root: Path, count: int) -> list[Path]:
    out = []
    for i in range(count):
        folder = root / f"a{i}"
        write_peft_adapter(folder, rank=8, modules={"q_proj": (64, 64), "v_proj": (64, 16)}, layers=2)
        out.append(folder)
    return out


def write_fleet(tmp: Path, engines: list[str], adapters: list[Path], tenants: str = "", name: str = "inv.yaml") -> Path:
    """An inventory of local engines, the adapters a0.. at the given folders, and a JSON-lines gateway log."""
    text = (
        "defaults: {load_fixed_ms: 5, disk_gbps: 3, h2d_gbps: 25}\n"
        f"base_models:\n{BASE}"
        "hosts:\n  - name: h\n    provider: onprem\n    connection: local\n    request_timeout_s: 2\n"
        "    call_deadline_s: 3\n    engines:\n"
        + "".join(f"      - {e}\n" for e in engines)
        + "adapters:\n"
        + "".join(f"  - {{id: a{i}, base_model: m, path: '{p}', rank: 8}}\n" for i, p in enumerate(adapters))
        + (f"tenants:\n{tenants}" if tenants else "")
        + "gateway:\n  logs:\n    - path: access.jsonl\n      format: jsonl\n"
        "      fields: {time: ts, tenant: tenant_id, adapter: model, engine: upstream}\n"
    )
    path = tmp / name
    path.write_text(text)
    (tmp / "access.jsonl").touch()
    return path


def vllm(name: str, url: str, gpu: int = 2, host: int = 4) -> str:
    return f"{{name: {name}, kind: vllm, url: '{url}', base_model: m, max_loras: {gpu}, max_cpu_loras: {host}}}"


def sglang(name: str, url: str, gpu: int = 2, host: int = 4) -> str:
    return (
        f"{{name: {name}, kind: sglang, url: '{url}', base_model: m, max_loras_per_batch: {gpu}, "
        f"max_loaded_loras: {host}}}"
    )


def log_line(adapter: str, tenant: str = "t", engine: str | None = None, ts: float | None = None) -> str:
    record = {"ts": time.time() if ts is None else ts, "tenant_id": tenant, "model": adapter}
    if engine is not None:
        record["upstream"] = engine
    return json.dumps(record) + "\n"


class DaemonProcess:
    def __init__(self, inventory: Path, state: Path, *args: str) -> None:
        self.stderr_path = state.with_suffix(".stderr")
        self.stderr = open(self.stderr_path, "ab")  # noqa: SIM115 - closed in stop()
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        command = [sys.executable, "-m", "lorafleet", "daemon", "-i", str(inventory), "--state", str(state), "-v"]
        self.proc = subprocess.Popen(
            [*command, "--metrics-addr", "127.0.0.1:0", *args],
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            env=env,
            cwd=str(inventory.parent),
        )

    def log(self) -> str:
        if not self.stderr.closed:
            self.stderr.flush()
        return self.stderr_path.read_text(errors="replace")

    def metrics_port(self, timeout: float = 10.0) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", self.log())
            if found:
                return int(found.group(1))
            time.sleep(0.05)
        raise AssertionError(f"no metrics address in the daemon's log:\n{self.log()}")

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def stop(self, timeout: float = 10.0) -> tuple[int, float]:
        """SIGTERM; (exit code, seconds it took)."""
        started = time.monotonic()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self.stderr.close()
        return code, time.monotonic() - started


@pytest.fixture
def daemon_process() -> Iterator[Callable[..., DaemonProcess]]:
    started: list[DaemonProcess] = []

    def start(inventory: Path, state: Path, *args: str) -> DaemonProcess:
        process = DaemonProcess(inventory, state, *args)
        started.append(process)
        return process

    yield start
    for process in started:
        if process.proc.poll() is None:
            process.proc.kill()
            process.proc.wait()


def wait_for(
    condition: Callable[[], object],
    timeout: float = 10.0,
    what: str = "condition",
    log: Callable[[], str] | None = None,
) -> None:
    """Poll `condition`; on timeout fail with `what` and, when given, `log()` as it is then."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}" + (f"\n{log()}" if log is not None else ""))
