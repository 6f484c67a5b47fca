"""A request as the policy sees it: the one input type the log readers, replay and the daemon share."""

from __future__ import annotations

from dataclasses import dataclass

ADAPTER, BASE, UNKNOWN = "adapter", "base", "unknown"


@dataclass(frozen=True, slots=True)
class RequestEvent:
    """One request. `adapter` is an inventory id (never a raw log string) or None for base/unknown requests."""

    time: float  # epoch seconds
    kind: str  # ADAPTER, BASE or UNKNOWN
    adapter: str | None
    tenant: str | None = None
    engine: str | None = None  # HOST/ENGINE when the log says which engine served it
    base_model: str | None = None
    status: int | None = None
    ttft_ms: float | None = None
