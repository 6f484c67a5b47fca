"""A global option given before the command name beats the environment for every command: the commands' own
-i/--state read no environment variable, so they cannot override the group's with LORAFLEET_INVENTORY or
LORAFLEET_STATE. (test_main.py checks the two positions, but never with the variables set.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from lorafleet.store.db import open_store
from tests.conftest import INVENTORIES

DEMO = str(INVENTORIES / "demo.yaml")
NOT_FOUND = "error: inventory '/nonexistent.yaml' not found"


@pytest.mark.parametrize(
    "args, expected",
    [
        (["-i", DEMO, "inventory", "check"], "fleet demo"),
        (["-i", DEMO, "inventory", "show"], "localhost/vllm-0"),
        (["-i", DEMO, "vram", "--host", "zzz*"], "error: no host in the inventory matches the filters"),
        (["-i", DEMO, "warm", "no-such"], "error: 'no-such' is not an adapter in the inventory"),
        (["-i", DEMO, "unload", "no-such"], "error: 'no-such' is not an adapter in the inventory"),
        (["-i", DEMO, "daemon", "--plan", "/nonexistent-plan.json"], "error: /nonexistent-plan.json: no such file"),
    ],
)
def test_an_inventory_before_the_command_name_beats_lorafleet_inventory(run_cli, args, expected: str) -> None:
    result = run_cli(*args, env={"LORAFLEET_INVENTORY": "/nonexistent.yaml"})
    assert NOT_FOUND not in result.stderr
    assert expected in result.stdout + result.stderr


@pytest.mark.parametrize("command", [["stats"], ["stats", "loads"]])
def test_a_state_before_the_command_name_beats_lorafleet_state(run_cli, tmp_path: Path, command) -> None:
    db = tmp_path / "journal.db"
    open_store(db).close()
    result = run_cli("--state", str(db), *command, "--no-replay" if command == ["stats"] else "--json",
                     env={"LORAFLEET_STATE": str(tmp_path / "elsewhere.db")})  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert "no journal" not in result.stderr
