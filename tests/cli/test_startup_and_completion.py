"""Start-up stays light (commands load lazily) and completion knows adapters, engines and policies."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.conftest import INVENTORIES, ROOT

HEAVY = ("httpx", "paramiko", "rich", "yaml", "pynvml", "sqlite3", "lorafleet.inventory", "lorafleet.engines")


def run_python(code: str, **env: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_importing_the_cli_group_loads_no_heavy_library() -> None:
    out = run_python("import sys, lorafleet.cli.main; print(' '.join(sorted(sys.modules)))")
    loaded = set(out.split())
    assert [name for name in HEAVY if name in loaded] == []


def complete(words: str, cword: int, **env: str) -> list[str]:
    out = run_python(
        "from lorafleet.cli.main import main; main()",
        _LORAFLEET_COMPLETE="bash_complete",
        COMP_WORDS=words,
        COMP_CWORD=str(cword),
        **env,
    )
    return [line.split(",", 1)[1] for line in out.splitlines() if line]


def test_command_names_complete_without_loading_commands() -> None:
    assert complete("lorafleet ", 1) == [
        "completion",
        "daemon",
        "inventory",
        "plan",
        "replay",
        "stats",
        "trace",
        "unload",
        "vram",
        "warm",
    ]
    assert complete("lorafleet wa", 1) == ["warm"]


def test_adapter_ids_engines_and_policies_complete_from_the_inventory() -> None:
    demo = str(INVENTORIES / "demo.yaml")
    assert complete(f"lorafleet warm -i {demo} co", 4) == ["code-r64"]
    assert complete("lorafleet warm --engine local", 3, LORAFLEET_INVENTORY=demo) == [
        "localhost/vllm-0",
        "localhost/sglang-0",
    ]
    assert complete("lorafleet replay --policy lru,l", 3) == ["lru,lfu", "lru,lorafleet"]
    assert complete("lorafleet warm -i /no/such/file x", 4) == []  # a broken inventory never breaks the Tab


INTERRUPTED_IMPORT = """
import sys
class Interrupt:
    def find_spec(self, name, path=None, target=None):
        if name == "lorafleet.cli.main":
            raise KeyboardInterrupt
sys.meta_path.insert(0, Interrupt())
sys.argv = ["lorafleet", "inventory", "--json"]
from lorafleet.cli.entry import main
main()
"""


def test_ctrl_c_while_the_cli_is_still_loading_is_one_line_the_json_error_and_exit_130() -> None:
    """Loading the CLI takes a few hundred milliseconds, more on a busy machine: Ctrl-C then is no traceback."""
    result = subprocess.run(
        [sys.executable, "-c", INTERRUPTED_IMPORT],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 130 and result.stderr == "error: interrupted\n"
    error = json.loads(result.stdout)["error"]
    assert error["exit_code"] == 130 and error["message"] == "interrupted"
