"""Stopping: the flag every long-running piece watches, and the two ways a stop shows up as an exception.

It lives at the base because every layer stops the same way — engine calls and their retry sleeps, the
executor's workers, the daemon's loop and its actors, and the CLI that turns SIGTERM into an interrupt.
"""

from __future__ import annotations

import threading


class Cancelled(Exception):  # noqa: N818 - a state, not a failure
    """Raised inside a worker when the stop flag is set while it waits."""


class Interrupted(BaseException):
    """SIGTERM (or another stop signal) turned into an exception in the main thread; `code` is the exit code."""

    def __init__(self, code: int, reason: str = "interrupted") -> None:
        super().__init__(code)
        self.code = code
        self.reason = reason


class DeadlinePassed(Interrupted):
    """A run's own deadline, not a signal: exit 1, and a caller that can use what finished may catch it alone."""

    def __init__(self, deadline_s: float) -> None:
        super().__init__(1, f"the run deadline of {deadline_s:g}s passed")


class Stop:
    """A stop flag that also wakes every sleep: `sleep` raises Cancelled as soon as the flag is set."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def set(self) -> None:
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    def sleep(self, seconds: float) -> None:
        if self._event.wait(max(0.0, seconds)):
            raise Cancelled()

    def wait(self, seconds: float) -> bool:
        """Wait up to `seconds`; True when stopped (for loops that must not raise)."""
        return self._event.wait(max(0.0, seconds))


__all__ = ["Cancelled", "DeadlinePassed", "Interrupted", "Stop"]
