"""The NVML path, with a fake `pynvml` injected at probe/nvml.py's one import (there is no GPU here)."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from lorafleet.probe import nvml
from lorafleet.probe.snapshot import ProbeError


class NVMLError(Exception):
    pass


def fake_pynvml(init_error: str | None = None) -> types.ModuleType:
    module = types.ModuleType("pynvml")
    calls = {"init": 0}

    def init() -> None:
        calls["init"] += 1
        if init_error:
            raise NVMLError(init_error)

    boards = [
        {"name": b"NVIDIA H100 80GB HBM3", "uuid": "GPU-1", "mem": (85520809984, 1073741824), "mig": (0, 0)},
        {"name": "NVIDIA A100 MIG", "uuid": "GPU-2", "mem": None, "mig": (1, 1)},
    ]

    def memory(handle: int) -> SimpleNamespace:
        board = boards[handle]
        if board["mem"] is None:
            raise NVMLError("Not Supported")
        total, used = board["mem"]
        return SimpleNamespace(total=total, used=used, free=total - used)

    def mig(handle: int) -> tuple[int, int]:
        return boards[handle]["mig"]

    module.nvmlInit = init
    module.nvmlDeviceGetCount = lambda: len(boards)
    module.nvmlDeviceGetHandleByIndex = lambda i: i
    module.nvmlDeviceGetName = lambda h: boards[h]["name"]
    module.nvmlDeviceGetUUID = lambda h: boards[h]["uuid"]
    module.nvmlDeviceGetMemoryInfo = memory
    module.nvmlDeviceGetMigMode = mig
    module.calls = calls
    return module


@pytest.fixture(autouse=True)
def fresh_nvml() -> Iterator[None]:
    nvml.reset()
    yield
    nvml.reset()


def test_reads_gpus_and_initialises_once(monkeypatch: pytest.MonkeyPatch) -> None:
    module = fake_pynvml()
    monkeypatch.setitem(sys.modules, "pynvml", module)
    first = nvml.read_local_gpus()
    nvml.read_local_gpus()
    assert module.calls["init"] == 1
    h100, mig = first
    assert (h100.index, h100.name, h100.uuid, h100.total_bytes, h100.used_bytes) == (
        0,
        "NVIDIA H100 80GB HBM3",
        "GPU-1",
        85520809984,
        1073741824,
    )
    assert h100.free_bytes == 85520809984 - 1073741824 and h100.mig == "Disabled"
    assert (mig.total_bytes, mig.free_bytes, mig.mig) == (None, None, "Enabled")


def test_missing_driver_is_one_line_status(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(init_error="Driver Not Loaded\nmore detail"))
    with pytest.raises(ProbeError) as caught:
        nvml.read_local_gpus()
    assert caught.value.status == "nvml-unavailable"
    assert caught.value.message == "NVML could not start: Driver Not Loaded"


def test_missing_bindings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import raises ImportError
    with pytest.raises(ProbeError, match="install nvidia-ml-py"):
        nvml.read_local_gpus()


def test_local_host_row_through_the_cli(monkeypatch: pytest.MonkeyPatch, run_cli, write_yaml) -> None:
    import json

    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml())
    inv = write_yaml("hosts:\n  - {name: box, provider: onprem, connection: local, gpus: 2}\n")
    result = run_cli("vram", "--json", "-i", str(inv))
    assert result.exit_code == 0, result.stderr
    (host,) = json.loads(result.stdout)["hosts"]
    assert host["status"] == "ok" and [g["uuid"] for g in host["gpus"]] == ["GPU-1", "GPU-2"]


@pytest.mark.parametrize("width", [80, 120])
def test_the_vram_tables_fit_with_a_legend_and_wide_shows_every_column(
    monkeypatch: pytest.MonkeyPatch, run_cli, write_yaml, width: int
) -> None:
    from tests.cli.test_tables_fit import assert_fits

    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml())
    inv = write_yaml(
        "base_models:\n  m: {hidden_size: 64, intermediate_size: 128, num_layers: 2, num_attention_heads: 4}\n"
        "hosts:\n  - name: a-rather-long-host-name-01\n    provider: onprem\n    connection: local\n    gpus: 2\n"
        "    engines:\n      - {name: vllm-0, kind: vllm, url: 'http://127.0.0.1:9', base_model: m, gpus: [0, 1]}\n"
        "  - {name: away, provider: onprem, connection: ssh, address: 127.0.0.1,\n"
        "     ssh: {port: 9, connect_timeout_s: 1}}\n"
    )
    env = {"COLUMNS": str(width)}
    for args in ((), ("--by", "engine")):
        result = run_cli("vram", "-i", str(inv), *args, env=env)
        assert result.exit_code == 1  # one host unreachable, still reported
        assert_fits(result.stdout, width)
        words = " ".join(result.stdout.split())
        assert "away: " in words and "--wide shows every column" in words
    assert "a-rather-long-host-name-01" in run_cli("vram", "-i", str(inv), env=env).stdout
    wide = run_cli("vram", "-i", str(inv), "--wide", env={"COLUMNS": "200"})
    for header in ("name", "used", "MIG"):
        assert f" {header} " in wide.stdout.splitlines()[0] + " "
