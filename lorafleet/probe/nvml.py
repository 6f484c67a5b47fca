"""Local GPUs through NVML (`import pynvml`, from nvidia-ml-py): the only module that touches it.

NVML is initialised lazily, once per process; a missing library or driver becomes one line of reason.
"""

from __future__ import annotations

import threading
from typing import Any

from lorafleet.probe.snapshot import GpuInfo, ProbeError

_lock = threading.Lock()
_nvml: Any = None  # the initialised module, once it worked
_failure: str | None = None


def _load() -> Any:
    global _nvml, _failure
    with _lock:
        if _nvml is not None:
            return _nvml
        if _failure is not None:
            raise ProbeError("nvml-unavailable", _failure)
        try:
            import pynvml
        except ImportError as exc:
            _failure = f"NVML bindings not installed ({exc}); install nvidia-ml-py"
            raise ProbeError("nvml-unavailable", _failure) from exc
        try:
            pynvml.nvmlInit()
        except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
            _failure = f"NVML could not start: {_reason(exc)}"
            raise ProbeError("nvml-unavailable", _failure) from exc
        _nvml = pynvml
        return pynvml


def reset() -> None:
    """Forget the cached state (for tests that swap the NVML module, and after a driver reload)."""
    global _nvml, _failure
    with _lock:
        _nvml, _failure = None, None


def _reason(exc: Exception) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


def _optional(call: Any, *args: Any) -> Any:
    """Any NVML field may be unsupported on a given GPU (MIG slices, old boards): that is None, not an error."""
    try:
        return call(*args)
    except Exception:
        return None


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


def read_local_gpus() -> list[GpuInfo]:
    nvml = _load()
    try:
        count = nvml.nvmlDeviceGetCount()
    except Exception as exc:
        raise ProbeError("nvml-unavailable", f"NVML cannot count GPUs: {_reason(exc)}") from exc
    gpus = []
    for index in range(count):
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
        except Exception as exc:
            raise ProbeError("nvml-unavailable", f"GPU {index}: {_reason(exc)}") from exc
        memory = _optional(nvml.nvmlDeviceGetMemoryInfo, handle)
        mig = _optional(nvml.nvmlDeviceGetMigMode, handle)
        current = mig[0] if isinstance(mig, (tuple, list)) and mig else None
        gpus.append(
            GpuInfo(
                index=index,
                uuid=_text(_optional(nvml.nvmlDeviceGetUUID, handle)),
                name=_text(_optional(nvml.nvmlDeviceGetName, handle)),
                total_bytes=getattr(memory, "total", None),
                used_bytes=getattr(memory, "used", None),
                free_bytes=getattr(memory, "free", None),
                mig=None if current is None else ("Enabled" if current == 1 else "Disabled"),
            )
        )
    return gpus
