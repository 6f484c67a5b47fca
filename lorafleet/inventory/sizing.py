"""Adapter memory: exact from a PEFT folder's safetensors header, or estimated from the base model's shape.

Reading only the header (8-byte length + JSON) keeps measuring a 600 MiB adapter at one small read.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path

from lorafleet.inventory.fields import MAX_COUNT
from lorafleet.inventory.model import BaseModel

SAFETENSORS_DTYPE_BYTES = {
    "F64": 8,
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "I64": 8,
    "I32": 4,
    "I16": 2,
    "I8": 1,
    "U64": 8,
    "U32": 4,
    "U16": 2,
    "U8": 1,
    "BOOL": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
}
KNOWN_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
MODULE_ALIASES = {"all-linear": KNOWN_MODULES}
_MAX_HEADER_BYTES = 100 * 1024 * 1024
_MAX_ADAPTER_BYTES = 2**50  # a pebibyte: past any adapter, and past it the sums stop


class SizingError(ValueError):
    """An adapter's size cannot be determined; the message says why in one line."""


def module_shape(base: BaseModel, module: str) -> tuple[int, int]:
    """(d_in, d_out) of one Llama-style projection."""
    h, i = base.hidden_size, base.intermediate_size
    q = base.num_attention_heads * base.head_dim
    kv = base.num_kv_heads * base.head_dim
    shapes = {
        "q_proj": (h, q),
        "k_proj": (h, kv),
        "v_proj": (h, kv),
        "o_proj": (q, h),
        "gate_proj": (h, i),
        "up_proj": (h, i),
        "down_proj": (i, h),
    }
    if module not in shapes:
        raise SizingError(f"unknown target module {module!r} (known: {', '.join(KNOWN_MODULES)}, all-linear)")
    return shapes[module]


def expand_modules(modules: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    out: list[str] = []
    for m in modules:
        for name in MODULE_ALIASES.get(m, (m,)):
            if name not in out:
                out.append(name)
    return tuple(out)


def estimate_bytes(base: BaseModel, rank: int, modules: tuple[str, ...]) -> int:
    """r·(d_in + d_out) parameters per target module per layer, times the base model's dtype bytes."""
    params = sum(rank * sum(module_shape(base, m)) for m in expand_modules(modules))
    return params * base.num_layers * base.dtype_bytes


@dataclass(frozen=True)
class MeasuredAdapter:
    rank: int | None
    target_modules: tuple[str, ...]
    size_bytes: int
    weights_file: str


def read_safetensors_bytes(path: Path) -> int:
    """Sum of tensor bytes declared in a safetensors header, without reading the weights."""
    try:
        with path.open("rb") as fh:
            raw_len = fh.read(8)
            if len(raw_len) != 8:
                raise SizingError(f"{path}: not a safetensors file (shorter than its header length)")
            (header_len,) = struct.unpack("<Q", raw_len)
            if header_len > _MAX_HEADER_BYTES:
                raise SizingError(f"{path}: not a safetensors file (header length {header_len} is implausible)")
            raw = fh.read(header_len)
    except OSError as exc:
        raise SizingError(f"{path}: cannot read: {exc.strerror}") from exc
    if len(raw) != header_len:
        raise SizingError(f"{path}: truncated safetensors header")
    try:
        header = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # bad JSON or UTF-8, a number past the digit limit, deep nesting
        raise SizingError(f"{path}: safetensors header is not valid JSON ({_reason(exc)})") from exc
    if not isinstance(header, dict):
        raise SizingError(f"{path}: safetensors header is not a JSON object")
    total = 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(info, dict) or "dtype" not in info or "shape" not in info:
            raise SizingError(f"{path}: tensor {name!r} has no dtype or shape in the header")
        dtype = info["dtype"]
        if not isinstance(dtype, str) or dtype not in SAFETENSORS_DTYPE_BYTES:
            raise SizingError(f"{path}: tensor {name!r} has unknown dtype {dtype!r}")
        shape = info["shape"]
        if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
            raise SizingError(f"{path}: tensor {name!r} has a malformed shape {str(shape)[:80]}")
        total += math.prod(shape) * SAFETENSORS_DTYPE_BYTES[dtype]
        if total > _MAX_ADAPTER_BYTES:
            raise SizingError(f"{path}: its tensors declare more than a pebibyte: not an adapter's weights")
    return total


def _reason(exc: Exception) -> str:
    """A parse error's reason in one short line (a RecursionError's says nothing useful)."""
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    text = str(exc)
    return "a number past Python's 4300-digit limit" if text.startswith("Exceeds the limit") else text[:120]


def measure_adapter(folder: Path) -> MeasuredAdapter:
    """Read a PEFT adapter folder: `adapter_config.json` for rank and modules, safetensors for bytes."""
    if not folder.is_dir():
        raise SizingError(f"{folder}: no such folder")
    config_path = folder / "adapter_config.json"
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise SizingError(f"{folder}: no adapter_config.json") from exc
    except OSError as exc:
        raise SizingError(f"{config_path}: cannot read: {exc.strerror}") from exc
    except (ValueError, RecursionError) as exc:  # bad JSON or UTF-8, a number past the digit limit, deep nesting
        raise SizingError(f"{config_path}: not valid JSON ({_reason(exc)})") from exc
    if not isinstance(config, dict):
        raise SizingError(f"{config_path}: expected a JSON object")
    weights = folder / "adapter_model.safetensors"
    if not weights.is_file():
        found = sorted(folder.glob("*.safetensors"))
        if not found:
            raise SizingError(f"{folder}: no .safetensors weights (a .bin adapter cannot be measured safely)")
        weights = found[0]
    modules = config.get("target_modules") or ()
    if isinstance(modules, str):
        modules = (modules,)
    if not isinstance(modules, list | tuple) or not all(isinstance(m, str) for m in modules):
        raise SizingError(f"{config_path}: target_modules must be a name or a list of names")
    rank = config.get("r")
    return MeasuredAdapter(
        rank=rank if type(rank) is int and 0 < rank <= MAX_COUNT else None,  # `true` is no rank
        target_modules=tuple(str(m) for m in modules),
        size_bytes=read_safetensors_bytes(weights),
        weights_file=str(weights),
    )
