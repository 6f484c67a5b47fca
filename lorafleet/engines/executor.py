"""Run work against many engines at once: one worker per engine, bounded, cancellable, results by callback.

An engine's loader is serial anyway, and its book entry is its own, so each engine's items run in order on one
worker; engines run in parallel up to a bound. A stop event wakes every sleep (retry backoff included) and
abandons the items not yet started. Results travel back to the thread that called `run`, which alone calls the
callbacks — so the callbacks may write the store, which belongs to that thread. `warm` drives it now; the daemon
will drive one per engine.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Generic, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")


class Cancelled(Exception):  # noqa: N818 - a state, not a failure
    """Raised inside a worker when the stop event is set while it waits."""


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


@dataclass(frozen=True)
class Outcome(Generic[Item, Result]):
    engine: str
    item: Item
    result: Result | None  # None when `error` is set
    error: BaseException | None = None


# A worker factory: for one engine, a context manager yielding the function that runs one item.
WorkerFactory = Callable[[str], AbstractContextManager[Callable[[Item], Result]]]


class EngineExecutor(Generic[Item, Result]):
    def __init__(self, parallel: int = 8, stop: Stop | None = None) -> None:
        self.parallel = max(1, parallel)
        self.stop = stop or Stop()
        self.abandoned: list[tuple[str, Item]] = []

    def run(
        self,
        work: Mapping[str, Sequence[Item]],
        worker: WorkerFactory[Item, Result],
        on_outcome: Callable[[Outcome[Item, Result]], None],
        on_engine_done: Callable[[str], None] | None = None,
    ) -> None:
        """Run every engine's items in order; an item that raises is an outcome with `error`, and an engine
        whose worker cannot start fails all its items. Returns when every engine is done or abandoned."""
        done: queue.Queue[Outcome[Item, Result] | str] = queue.Queue()

        def run_engine(engine: str) -> None:
            pending = list(work[engine])
            try:
                if self.stop.is_set():
                    return
                with worker(engine) as run_one:
                    while pending and not self.stop.is_set():
                        item = pending[0]
                        try:
                            done.put(Outcome(engine, item, run_one(item)))
                        except Cancelled:
                            break
                        except Exception as exc:  # one item's failure is its outcome, never the engine's end
                            done.put(Outcome(engine, item, None, exc))
                        pending.pop(0)
            except Cancelled:
                pass
            except Exception as exc:  # the worker could not start or stop: every item left fails with it
                for item in pending:
                    done.put(Outcome(engine, item, None, exc))
                pending = []
            finally:
                for item in pending:
                    self.abandoned.append((engine, item))
                done.put(engine)

        engines = [e for e in work if work[e]]
        pool = ThreadPoolExecutor(max_workers=max(1, min(self.parallel, len(engines) or 1)))
        try:
            for engine in engines:
                pool.submit(run_engine, engine)
            for item in _drain(done, len(engines)):
                if isinstance(item, str):
                    if on_engine_done is not None:
                        on_engine_done(item)
                else:
                    on_outcome(item)
        except BaseException:  # an interrupt: nothing new starts; workers return at their next sleep
            self.stop.set()
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown(wait=True)


def _drain(done: queue.Queue[Outcome[Item, Result] | str], engines: int) -> Iterator[Outcome[Item, Result] | str]:
    running = engines
    while running:
        try:
            item = done.get(timeout=0.1)  # a timeout keeps the caller's thread responsive to signals
        except queue.Empty:
            continue
        if isinstance(item, str):
            running -= 1
        yield item
