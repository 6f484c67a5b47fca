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
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Generic, TypeVar

from lorafleet.stopping import Cancelled, DeadlinePassed, Stop

Item = TypeVar("Item")
Result = TypeVar("Result")


@dataclass(frozen=True)
class Outcome(Generic[Item, Result]):
    engine: str
    item: Item
    result: Result | None  # None when `error` is set
    error: BaseException | None = None


# A worker factory: for one engine, a context manager yielding the function that runs one item.
WorkerFactory = Callable[[str], AbstractContextManager[Callable[[Item], Result]]]


class EngineExecutor(Generic[Item, Result]):
    def __init__(self, parallel: int = 8, stop: Stop | None = None, grace_s: float = 1.0) -> None:
        self.parallel = max(1, parallel)
        self.stop = stop or Stop()
        self.grace_s = grace_s  # after a stop, how long to collect outcomes from workers that are finishing
        self.abandoned: list[tuple[str, Item]] = []
        self.in_flight: dict[str, Item] = {}  # engine -> the item its worker is running now

    def run(
        self,
        work: Mapping[str, Sequence[Item]],
        worker: WorkerFactory[Item, Result],
        on_outcome: Callable[[Outcome[Item, Result]], None],
        on_engine_done: Callable[[str], None] | None = None,
        deadline_s: float | None = None,
    ) -> None:
        """Run every engine's items in order; an item that raises is an outcome with `error`, and an engine
        whose worker cannot start fails all its items. Returns when every engine is done or abandoned.

        On an interrupt (KeyboardInterrupt, Interrupted) in the calling thread the stop flag is set, outcomes
        arriving within `grace_s` are still delivered, and the interrupt is re-raised; `in_flight` then lists
        the items whose fate is unknown. Workers are daemon threads: one blocked on a hung engine never holds
        the process past its exit. Past `deadline_s` the run stops the same way and raises DeadlinePassed (exit 1).
        """
        done: queue.Queue[Outcome[Item, Result] | str] = queue.Queue()
        slots = threading.Semaphore(self.parallel)
        engines = [e for e in work if work[e]]
        for engine in engines:
            args = (engine, list(work[engine]), worker, done, slots)
            threading.Thread(target=self._run_engine, args=args, name=f"lorafleet {engine}", daemon=True).start()
        running = len(engines)
        until = None if deadline_s is None else time.monotonic() + deadline_s
        try:
            while running:
                if until is not None and time.monotonic() > until:
                    raise DeadlinePassed(deadline_s or 0.0)
                item = _next(done)
                if item is None:
                    continue
                running -= self._deliver(item, on_outcome, on_engine_done)
        except BaseException:
            self.stop.set()
            self._grace(done, running, on_outcome, on_engine_done)
            raise

    def _run_engine(
        self,
        engine: str,
        pending: list[Item],
        worker: WorkerFactory[Item, Result],
        done: queue.Queue[Outcome[Item, Result] | str],
        slots: threading.Semaphore,
    ) -> None:
        """One engine's worker thread: its items in order, each outcome (or error) on `done`, then its name."""
        try:
            with slots:
                if self.stop.is_set():
                    return
                with worker(engine) as run_one:
                    while pending and not self.stop.is_set():
                        item = pending[0]
                        self.in_flight[engine] = item
                        try:
                            outcome: Outcome[Item, Result] = Outcome(engine, item, run_one(item))
                        except Cancelled:
                            return  # stopped mid-item: it stays in flight, its fate unknown
                        except Exception as exc:  # one item's failure is its outcome, never the engine's end
                            outcome = Outcome(engine, item, None, exc)
                        del self.in_flight[engine]
                        pending.pop(0)
                        done.put(outcome)
        except Cancelled:
            pass
        except Exception as exc:  # the worker could not start or stop: every item left fails with it
            for item in pending:
                done.put(Outcome(engine, item, None, exc))
            pending.clear()
        finally:
            if engine in self.in_flight and pending:
                pending.pop(0)
            self.abandoned.extend((engine, item) for item in pending)
            done.put(engine)

    def _deliver(
        self,
        item: Outcome[Item, Result] | str,
        on_outcome: Callable[[Outcome[Item, Result]], None],
        on_engine_done: Callable[[str], None] | None,
    ) -> int:
        """Hand one message to its callback; 1 when it says an engine is done."""
        if isinstance(item, str):
            if on_engine_done is not None:
                on_engine_done(item)
            return 1
        on_outcome(item)
        return 0

    def _grace(
        self,
        done: queue.Queue[Outcome[Item, Result] | str],
        running: int,
        on_outcome: Callable[[Outcome[Item, Result]], None],
        on_engine_done: Callable[[str], None] | None,
    ) -> None:
        deadline = time.monotonic() + self.grace_s
        while running and time.monotonic() < deadline:
            try:
                item = done.get(timeout=max(0.0, min(0.05, deadline - time.monotonic())))
            except queue.Empty:
                continue
            running -= self._deliver(item, on_outcome, on_engine_done)


def _next(done: queue.Queue[Outcome[Item, Result] | str]) -> Outcome[Item, Result] | str | None:
    try:
        return done.get(timeout=0.1)  # a timeout keeps the caller's thread responsive to signals
    except queue.Empty:
        return None
