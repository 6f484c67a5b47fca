"""Parse `nvidia-smi --query-gpu=… --format=csv,noheader,nounits`: memory in MiB, any field may be a placeholder."""

from __future__ import annotations

import math

from lorafleet.probe.snapshot import GpuInfo
from lorafleet.units import MIB

MAX_MIB = float(1 << 30)  # a pebibyte: far past any GPU, short of figures that wreck a table
QUERY_FIELDS = ("index", "uuid", "name", "memory.total", "memory.used", "memory.free", "mig.mode.current")


def smi_command(executable: str) -> str:
    return f"{executable} --query-gpu={','.join(QUERY_FIELDS)} --format=csv,noheader,nounits"


class SmiParseError(ValueError):
    """The output is not what the query asks for; the message names the offending line."""


def _placeholder(value: str) -> bool:
    return value == "" or (value.startswith("[") and value.endswith("]")) or value.upper() in ("N/A", "NA")


def _mib(value: str, line_no: int, field: str) -> int | None:
    if _placeholder(value):
        return None
    shown = repr(value[:40])
    try:
        mib = float(value)
    except ValueError as exc:
        raise SmiParseError(f"line {line_no}: {field} {shown} is not a number of MiB") from exc
    if not math.isfinite(mib):  # `nan`, `inf`, `1e400`: float() takes them, no GPU has them
        raise SmiParseError(f"line {line_no}: {field} {shown} is not a finite number of MiB")
    if mib < 0:
        raise SmiParseError(f"line {line_no}: {field} {shown} is negative")
    if mib > MAX_MIB:
        raise SmiParseError(f"line {line_no}: {field} {shown} is more memory than any GPU has")
    return round(mib * MIB)


def parse_nvidia_smi(text: str) -> list[GpuInfo]:
    """One GpuInfo per non-empty line; zero GPUs is an empty list, not an error."""
    gpus: list[GpuInfo] = []
    for line_no, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("No devices were found"):
            return []
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != len(QUERY_FIELDS):
            raise SmiParseError(
                f"line {line_no}: expected {len(QUERY_FIELDS)} comma-separated fields, got {len(parts)}: {line[:80]!r}"
            )
        index, uuid, name, total, used, free, mig = parts
        try:
            gpu_index = int(index) if len(index) <= 6 else -1
        except ValueError:
            gpu_index = -1
        if gpu_index < 0:
            raise SmiParseError(f"line {line_no}: GPU index {index[:40]!r} is not a small whole number")
        gpus.append(
            GpuInfo(
                index=gpu_index,
                uuid=None if _placeholder(uuid) else uuid,
                name=None if _placeholder(name) else name,
                total_bytes=_mib(total, line_no, "memory.total"),
                used_bytes=_mib(used, line_no, "memory.used"),
                free_bytes=_mib(free, line_no, "memory.free"),
                mig=None if _placeholder(mig) else mig,
            )
        )
    return gpus
