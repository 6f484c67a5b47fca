"""Signals: for every command, SIGTERM turned into the same interrupt as Ctrl-C (main.py); for the
daemon, SIGTERM and Ctrl-C set its stop flag (it drains and commits) and SIGHUP asks for an inventory reload."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
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


def stop_and_reload_on_signals(stop: Callable[[], None], reload: Callable[[], None]) -> None:
    """The daemon's signals: the handlers only set flags, which the loop reads (never work in a handler)."""
    signal.signal(signal.SIGTERM, lambda signum, frame: stop())
    signal.signal(signal.SIGINT, lambda signum, frame: stop())
    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, lambda signum, frame: reload())
