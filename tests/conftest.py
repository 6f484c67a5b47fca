"""Shared fixtures: every test gets its own state dir and a clean environment."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from lorafleet import COMPILED_CORE, PURE_ENV

ROOT = Path(__file__).resolve().parent.parent
INVENTORIES = ROOT / "inventories"


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """A `plain_core` test spies on calls between the core's own modules (monkeypatch), which compiled callers
    make directly: where the core is compiled (setup.py) it runs on the plain source instead, in a pytest of its
    own (test_compiled.py shows the two count the same)."""
    if pyfuncitem.get_closest_marker("plain_core") is None or not COMPILED_CORE:
        return None
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", pyfuncitem.nodeid]
    env = os.environ | {PURE_ENV: "1"}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    if done.returncode != 0 or "1 passed" not in done.stdout:
        pytest.fail(f"on the plain source:\n{done.stdout[-4000:]}{done.stderr[-2000:]}", pytrace=False)
    return True


def interruptible() -> None:
    """A child's `preexec_fn`: Ctrl-C as at a terminal, even when the tests themselves were started in the
    background (a shell starts a background job with SIGINT ignored, and a child inherits that: a command under
    test would never see the SIGINT a test sends it)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture(autouse=True)
def isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    state = tmp_path / "state" / "lorafleet.db"
    monkeypatch.setenv("LORAFLEET_STATE", str(state))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))
    monkeypatch.delenv("LORAFLEET_INVENTORY", raising=False)
    monkeypatch.delenv("LORAFLEET_DEBUG", raising=False)
    monkeypatch.setenv("COLUMNS", "200")
    return state


@pytest.fixture
def run_cli() -> Callable[..., Result]:
    """Run `lorafleet ARGS` in-process and return click's Result (stdout and stderr kept apart)."""
    from lorafleet.cli.main import cli

    def run(*args: str, env: dict[str, str] | None = None, input: str | None = None) -> Result:
        return CliRunner().invoke(cli, list(args), env=env, input=input, catch_exceptions=False)

    return run


@pytest.fixture
def write_yaml(tmp_path: Path) -> Callable[[str, str], Path]:
    def write(text: str, name: str = "inv.yaml") -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return path

    return write


@pytest.fixture
def read_only() -> Iterator[Callable[[Path], None]]:
    """Make files and folders really read-only for this process: chmod, and for root (whom modes do not stop)
    the immutable attribute, as a read-only mount would. Undone after the test."""
    made: list[Path] = []

    def make(path: Path) -> None:
        path.chmod(0o555 if path.is_dir() else 0o444)
        if os.geteuid() == 0:
            done = subprocess.run(["chattr", "+i", str(path)], capture_output=True, text=True)
            if done.returncode != 0:
                pytest.skip(f"cannot make {path} immutable as root here: {done.stderr.strip()}")
        made.append(path)

    yield make
    for path in reversed(made):
        if os.geteuid() == 0:
            subprocess.run(["chattr", "-i", str(path)], capture_output=True)
        path.chmod(0o755 if path.is_dir() else 0o644)
