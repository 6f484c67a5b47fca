"""`lorafleet vram` tables through the CLI, with a fake `pynvml` (no GPU here): each GPU's row and usage bar, the
host named once, a host without GPUs, the engine view, which columns the narrow tables show, the count of
failed hosts on stderr, and the bar's colours on a terminal."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from lorafleet.probe import nvml
from tests.tables import body, header

GIB = 1024**3
BASE = "base_models:\n  m: {hidden_size: 64, intermediate_size: 128, num_layers: 2, num_attention_heads: 4}\n"


def fake_pynvml(boards: list[dict]) -> types.ModuleType:
    module = types.ModuleType("pynvml")

    def memory(handle: int) -> SimpleNamespace:
        if boards[handle]["mem"] is None:
            raise RuntimeError("Not Supported")
        total, used = boards[handle]["mem"]
        return SimpleNamespace(total=total, used=used, free=total - used)

    module.nvmlInit = lambda: None
    module.nvmlDeviceGetCount = lambda: len(boards)
    module.nvmlDeviceGetHandleByIndex = lambda i: i
    module.nvmlDeviceGetName = lambda h: boards[h]["name"]
    module.nvmlDeviceGetUUID = lambda h: f"GPU-{h}"
    module.nvmlDeviceGetMemoryInfo = memory
    module.nvmlDeviceGetMigMode = lambda h: boards[h]["mig"]
    return module


BOARDS = [
    {"name": "NVIDIA H100 80GB HBM3", "mem": (80 * GIB, 40 * GIB), "mig": (0, 0)},  # half used
    {"name": "NVIDIA H100 80GB HBM3", "mem": (80 * GIB, 76 * GIB), "mig": (0, 0)},  # 95 % used
    {"name": "NVIDIA A100 MIG", "mem": None, "mig": (1, 1)},  # memory not readable
]


@pytest.fixture(autouse=True)
def fresh_nvml() -> Iterator[None]:
    nvml.reset()
    yield
    nvml.reset()


def local_inventory(write_yaml, extra_host: str = "") -> str:
    return str(
        write_yaml(
            BASE + "hosts:\n  - name: box\n    provider: onprem\n    connection: local\n    gpus: 3\n"
            "    engines:\n      - {name: e0, kind: vllm, url: 'http://127.0.0.1:9', base_model: m, gpus: [0, 1]}\n"
            "      - {name: e1, kind: vllm, url: 'http://127.0.0.1:9', base_model: m}\n" + extra_host
        )
    )


def test_each_gpu_has_its_row_and_usage_bar_and_the_host_is_named_once(monkeypatch, run_cli, write_yaml) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(BOARDS))
    inv = local_inventory(write_yaml)
    result = run_cli("vram", "-i", inv, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.stderr
    assert result.stderr == ""
    assert header(result.stdout) == ["host", "status", "GPU", "free", "total", "usage"]
    assert body(result.stdout) == [
        ["box", "ok", "0", "40.0 GiB", "80.0 GiB", "██████░░░░░░  50%"],
        ["", "", "1", "4.0 GiB", "80.0 GiB", "███████████░  95%"],
        ["", "", "2", "-", "-", "?"],
    ]
    assert "--wide shows every column" in result.stdout
    wide = run_cli("vram", "-i", inv, "--wide", env={"COLUMNS": "200"})
    assert wide.exit_code == 0, wide.stderr
    assert header(wide.stdout) == ["host", "status", "GPU", "name", "used", "free", "total", "usage", "MIG"]
    rows = body(wide.stdout)
    assert rows[0][3:5] == ["NVIDIA H100 80GB HBM3", "40.0 GiB"] and rows[0][8] == "Disabled"
    assert rows[2][3] == "NVIDIA A100 MIG" and rows[2][8] == "Enabled"
    assert "--wide shows every column" not in wide.stdout


def test_a_host_without_gpus_has_one_row_saying_so(monkeypatch, run_cli, write_yaml) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml([]))
    inv = write_yaml("hosts:\n  - {name: bare, provider: onprem, connection: local, gpus: 0}\n")
    result = run_cli("vram", "-i", str(inv), env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.stderr
    assert body(result.stdout) == [["bare", "ok", "", "", "", "no GPUs"]]


def test_the_engine_view_shows_each_engines_gpus(monkeypatch, run_cli, write_yaml) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(BOARDS[:2]))
    inv = local_inventory(write_yaml)
    result = run_cli("vram", "-i", inv, "--by", "engine", env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.stderr
    assert header(result.stdout) == ["engine", "GPUs", "free", "total", "status"]
    rows = {r[0]: r for r in body(result.stdout)}
    assert rows["box/e0"][1:3] == ["0,1", "44.0 GiB"]  # 40 + 4 GiB free on its two GPUs
    assert rows["box/e1"][1:4] == ["-", "-", "-"]  # no GPU indexes given: its memory is unknown, not 0 B
    wide = run_cli("vram", "-i", inv, "--by", "engine", "--wide", env={"COLUMNS": "200"})
    assert header(wide.stdout) == ["engine", "kind", "GPUs", "free", "total", "status"]


def test_hosts_that_did_not_answer_are_counted_on_stderr_not_stdout(
    monkeypatch, run_cli, write_yaml, closed_port
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(BOARDS[:1]))
    away = (
        f"  - {{name: away, provider: onprem, connection: ssh, address: 127.0.0.1, ssh: {{port: {closed_port}, "
        "connect_timeout_s: 1}}\n"
    )
    inv = local_inventory(write_yaml, away)
    result = run_cli("vram", "-i", inv, env={"COLUMNS": "200"})
    assert result.exit_code == 1
    assert result.stderr == "1 of 2 hosts not ok\n"
    assert "not ok" not in result.stdout and "away: unreachable: " in result.stdout


def test_on_a_terminal_the_usage_bar_turns_red_only_above_90_percent(monkeypatch, run_cli, write_yaml) -> None:
    boards = [
        {"name": "exactly 90", "mem": (100 * GIB, 90 * GIB), "mig": (0, 0)},
        {"name": "above 90", "mem": (100 * GIB, 91 * GIB), "mig": (0, 0)},
        {"name": "exactly 70", "mem": (100 * GIB, 70 * GIB), "mig": (0, 0)},
    ]
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(boards))
    inv = write_yaml("hosts:\n  - {name: box, provider: onprem, connection: local, gpus: 3}\n")
    result = run_cli("vram", "-i", str(inv), env={"COLUMNS": "200", "FORCE_COLOR": "1"})
    assert result.exit_code == 0, result.stderr
    bars = [line for line in result.stdout.splitlines() if "█" in line]
    assert "\x1b[33m███████████" in bars[0]  # 90 %: yellow (red is for more than 90 %)
    assert "\x1b[31m███████████" in bars[1]  # 91 %: red
    assert "\x1b[32m████████" in bars[2]  # 70 %: green (yellow is for more than 70 %)
