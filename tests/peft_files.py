"""Writes real PEFT adapter folders (adapter_config.json + safetensors) for sizing tests."""

from __future__ import annotations

import json
import struct
from pathlib import Path

DTYPE_BYTES = {"F32": 4, "BF16": 2, "F16": 2}


def write_peft_adapter(
    folder: Path,
    rank: int,
    modules: dict[str, tuple[int, int]],
    layers: int,
    dtype: str = "BF16",
) -> int:
    """Write a PEFT-layout adapter with zero weights; returns the exact tensor bytes written."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "adapter_config.json").write_text(
        json.dumps({"peft_type": "LORA", "r": rank, "lora_alpha": 2 * rank, "target_modules": list(modules)})
    )
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for layer in range(layers):
        for name, (d_in, d_out) in modules.items():
            proj = "mlp" if name in ("gate_proj", "up_proj", "down_proj") else "self_attn"
            prefix = f"base_model.model.model.layers.{layer}.{proj}.{name}"
            for suffix, shape in (("lora_A.weight", [rank, d_in]), ("lora_B.weight", [d_out, rank])):
                size = shape[0] * shape[1] * DTYPE_BYTES[dtype]
                header[f"{prefix}.{suffix}"] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
                offset += size
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with (folder / "adapter_model.safetensors").open("wb") as fh:
        fh.write(struct.pack("<Q", len(raw)))
        fh.write(raw)
        fh.truncate(8 + len(raw) + offset)  # sparse zeros: the weights are never read
    return offset
