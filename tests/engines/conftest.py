"""Engines for client tests, and emulated engines on loopback for warm tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lorafleet.inventory.model import Engine, LoadModel
from tests.engine_emulator import EngineEmulator, EngineState
from tests.peft_files import write_peft_adapter


def make_engine(
    kind: str = "vllm",
    url: str = "http://127.0.0.1:9",
    api_key_env: str | None = None,
    timeout_s: float = 5.0,
    gpu_slots: int = 2,
    host_slots: int | None = 4,
    max_lora_rank: int | None = 64,
) -> Engine:
    return Engine(
        host="h",
        name=kind,
        kind=kind,
        url=url,
        base_model="m",
        gpus=(),
        gpu_slots=gpu_slots,
        host_slots=host_slots,
        max_lora_rank=max_lora_rank,
        lora_budget_bytes=None,
        api_key_env=api_key_env,
        load=LoadModel(),
        request_timeout_s=timeout_s,
        source="test:1",
    )


@pytest.fixture
def emulators() -> Iterator[Callable[..., EngineEmulator]]:
    started: list[EngineEmulator] = []

    def start(**state: object) -> EngineEmulator:
        emulator = EngineEmulator(EngineState(**state))  # type: ignore[arg-type]
        started.append(emulator)
        return emulator

    yield start
    for emulator in started:
        emulator.stop()


@pytest.fixture
def adapter_dirs(tmp_path: Path) -> dict[int, Path]:
    """Real PEFT folders of ranks 8, 16, 64 and 128 (small shapes) that the emulator can read."""
    out = {}
    for rank in (8, 16, 64, 128):
        folder = tmp_path / "adapters" / f"r{rank}"
        write_peft_adapter(folder, rank=rank, modules={"q_proj": (64, 64), "v_proj": (64, 16)}, layers=2)
        out[rank] = folder
    return out
