"""Signals, for the commands that run engine actions: SIGTERM turned into the same interrupt as Ctrl-C."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from lorafleet.stopping import Interrupted


@contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """While inside, SIGTERM interrupts the main thread like Ctrl-C does (exit code 143 instead of 130)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        raise Interrupted(128 + signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
