"""A circuit breaker per engine: stop calling an engine that keeps failing, probe it again later.

Closed: calls go through; `failures_to_open` failures in a row open it. Open: nothing is sent until the cooldown
has passed; then one call goes through as a probe (half-open). The probe's success closes the breaker; its
failure opens it again for twice the cooldown (capped). An engine's breaker never blocks another engine.
"""

from __future__ import annotations

import time
from collections.abc import Callable

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half-open"


class CircuitBreaker:
    def __init__(
        self,
        failures_to_open: int = 3,
        cooldown_s: float = 5.0,
        max_cooldown_s: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.failures_to_open = failures_to_open
        self.base_cooldown_s = cooldown_s
        self.cooldown_s = cooldown_s
        self.max_cooldown_s = max_cooldown_s
        self.clock = clock
        self.state = CLOSED
        self.failures = 0
        self.open_until = 0.0
        self.opened = 0  # times it opened, for the log and the metric

    def allow(self) -> bool:
        """May a call be sent now? In the open state after the cooldown, one probe is let through."""
        if self.state == CLOSED:
            return True
        if self.state == OPEN and self.clock() >= self.open_until:
            self.state = HALF_OPEN
            return True
        return False

    def success(self) -> None:
        self.state = CLOSED
        self.failures = 0
        self.cooldown_s = self.base_cooldown_s

    def failure(self) -> None:
        if self.state == HALF_OPEN:
            self.cooldown_s = min(self.cooldown_s * 2, self.max_cooldown_s)
            self._open()
            return
        self.failures += 1
        if self.state == CLOSED and self.failures >= self.failures_to_open:
            self._open()

    def _open(self) -> None:
        self.state = OPEN
        self.open_until = self.clock() + self.cooldown_s
        self.opened += 1


class AdapterBackoff:
    """Per adapter on one engine: after a call about it fails (the engine answered that the files are missing,
    the rank too high, …), its calls wait, twice as long after each further failure (capped), while the engine's
    other adapters go on; a success forgets it."""

    def __init__(self, first_s: float = 5.0, max_s: float = 300.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.first_s = first_s
        self.max_s = max_s
        self.clock = clock
        self.waits: dict[str, tuple[float, float, str]] = {}  # adapter -> (until, wait, last error)

    def blocked(self, adapter: str) -> str | None:
        """The last error while the adapter is backing off, else None."""
        found = self.waits.get(adapter)
        if found is None or self.clock() >= found[0]:
            return None
        return found[2]

    def failure(self, adapter: str, error: str) -> None:
        _, wait, _ = self.waits.get(adapter, (0.0, self.first_s / 2, ""))
        wait = min(wait * 2, self.max_s)
        self.waits[adapter] = (self.clock() + wait, wait, error)

    def success(self, adapter: str) -> None:
        self.waits.pop(adapter, None)


__all__ = ["CLOSED", "HALF_OPEN", "OPEN", "AdapterBackoff", "CircuitBreaker"]
