"""Shared fixtures: every test gets its own state dir and a clean environment."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

ROOT = Path(__file__).resolve().parent.parent
INVENTORIES = ROOT / "inventories"
SHARED = ROOT.parent / "shared"


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
