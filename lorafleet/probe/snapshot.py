"""What a probe returns: per host a status and its GPUs, each field allowed to be unknown."""

from __future__ import annotations

from dataclasses import dataclass, field

STATUSES = (
    "ok",
    "unreachable",
    "timeout",
    "auth-failed",
    "host-key-unknown",
    "host-key-mismatch",
    "command-failed",
    "parse-error",
    "nvml-unavailable",
)


@dataclass(frozen=True)
class GpuInfo:
    index: int
    uuid: str | None
    name: str | None
    total_bytes: int | None
    used_bytes: int | None
    free_bytes: int | None
    mig: str | None  # "Enabled", "Disabled", or None when the GPU does not say


@dataclass(frozen=True)
class HostVram:
    name: str
    provider: str
    status: str
    error: str | None = None
    gpus: tuple[GpuInfo, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return self.status == "ok"


class ProbeError(Exception):
    """A host could not be read; `status` is one of STATUSES and the message is one line."""

    def __init__(self, status: str, message: str) -> None:
        assert status in STATUSES, status
        super().__init__(message)
        self.status = status
        self.message = message
