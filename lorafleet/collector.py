"""The cyclic garbage collector around the daemon's bulk work and its long-lived state.

A collection scans every object of the generations it collects, and a full one every object the process
tracks: with a 500-engine fleet the books, the demand model and the experts' copies of the fleet are millions
of objects, and a full collection stopped the daemon's loop for up to 0.9 s (python benchmarks/wide_fleet.py).
Building an inventory, or pickling or unpickling what the policy learned, makes hundreds of thousands of objects
and no garbage cycles, yet sets off collections that traverse them all (young containers holding everything).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused() -> Iterator[None]:
    """No collection while the body runs (a bulk step that makes many objects and no cycles); the collector is
    as it was afterwards, so pauses nest."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def settle() -> None:
    """What is alive now is long-lived (the daemon calls this after each commit): no collection scans it again,
    so a collection looks only at what came since. A cycle among it that later becomes garbage is not collected
    until `unsettle`; the daemon's state holds none that it drops (its RSS over a million lines, benchmarks/
    daemon.py, says so)."""
    gc.freeze()


def unsettle() -> None:
    """Everything `settle` set aside is the collector's again (a daemon run ends inside a longer process)."""
    gc.unfreeze()


__all__ = ["paused", "settle", "unsettle"]
