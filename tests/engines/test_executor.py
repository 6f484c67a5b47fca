"""The per-engine executor: order per engine, parallel engines, failures as outcomes, a stop that wakes sleeps."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from lorafleet.engines.executor import EngineExecutor, Outcome
from lorafleet.stopping import Cancelled, Stop


def test_items_run_in_order_per_engine_and_callbacks_run_on_the_callers_thread() -> None:
    seen: list[tuple[str, int]] = []
    threads: set[int] = set()
    done: list[str] = []

    @contextmanager
    def worker(engine: str) -> Iterator[Callable[[int], int]]:
        yield lambda item: item * 10

    def on_outcome(o: Outcome[int, int]) -> None:
        threads.add(threading.get_ident())
        seen.append((o.engine, o.result or 0))

    EngineExecutor[int, int](parallel=2).run({"a": [1, 2, 3], "b": [4], "c": []}, worker, on_outcome, done.append)
    assert [r for e, r in seen if e == "a"] == [10, 20, 30]
    assert ("b", 40) in seen and sorted(done) == ["a", "b"]
    assert threads == {threading.get_ident()}


def test_a_failing_item_is_an_outcome_and_a_worker_that_cannot_start_fails_its_items() -> None:
    outcomes: list[Outcome[int, int]] = []

    @contextmanager
    def worker(engine: str) -> Iterator[Callable[[int], int]]:
        if engine == "dead":
            raise ConnectionError("no route")

        def run(item: int) -> int:
            if item == 2:
                raise ValueError("bad item")
            return item

        yield run

    EngineExecutor[int, int]().run({"ok": [1, 2, 3], "dead": [7, 8]}, worker, outcomes.append)
    by = {(o.engine, o.item): o for o in outcomes}
    assert by[("ok", 1)].result == 1 and by[("ok", 3)].result == 3
    assert isinstance(by[("ok", 2)].error, ValueError)
    assert isinstance(by[("dead", 7)].error, ConnectionError) and isinstance(by[("dead", 8)].error, ConnectionError)


def _sleeping_worker_stopped_once_it_runs(stop: Stop) -> Callable[[str], Iterator[Callable[[int], int]]]:
    """A worker whose items sleep (a retry backoff, which a stop must wake at once); `stop` is set as soon as the
    first item runs."""
    started = threading.Event()

    @contextmanager
    def worker(engine: str) -> Iterator[Callable[[int], int]]:
        def run(item: int) -> int:
            started.set()
            stop.sleep(60)
            return item

        yield run

    threading.Thread(target=lambda: (started.wait(5), stop.set()), daemon=True).start()
    return worker  # type: ignore[return-value]


def test_stop_wakes_a_sleeping_worker_and_abandons_queued_items() -> None:
    stop = Stop()
    worker = _sleeping_worker_stopped_once_it_runs(stop)
    executor = EngineExecutor[int, int](stop=stop)
    outcomes: list[Outcome[int, int]] = []
    began = time.monotonic()
    executor.run({"e": [1, 2, 3]}, worker, outcomes.append)
    assert time.monotonic() - began < 5
    assert outcomes == []
    assert executor.in_flight == {"e": 1}  # stopped mid-item: its fate is unknown
    assert executor.abandoned == [("e", 2), ("e", 3)]


def test_an_engine_whose_turn_never_came_abandons_every_item() -> None:
    """One slot: the second engine waits for it; stopped meanwhile, none of its items started, so all are
    abandoned — none counted in flight, none lost."""
    stop = Stop()
    worker = _sleeping_worker_stopped_once_it_runs(stop)
    executor = EngineExecutor[int, int](parallel=1, stop=stop)
    work = {"first": [1, 4], "second": [2, 3]}
    executor.run(work, worker, lambda o: None)
    ((ran, item),) = executor.in_flight.items()  # whichever thread took the slot first
    waited = "second" if ran == "first" else "first"
    assert item == work[ran][0]
    assert sorted(executor.abandoned) == sorted([(ran, work[ran][1])] + [(waited, i) for i in work[waited]])


def test_stop_sleep_raises_only_when_set() -> None:
    stop = Stop()
    stop.sleep(0.01)
    assert not stop.wait(0.01)
    stop.set()
    with pytest.raises(Cancelled):
        stop.sleep(10)


def test_an_interrupt_stops_workers_collects_finishing_outcomes_and_re_raises() -> None:
    release = threading.Event()

    @contextmanager
    def worker(engine: str) -> Iterator[Callable[[int], int]]:
        def run(item: int) -> int:
            if engine == "hung":
                release.wait(30)  # a read that no stop can wake
            return item

        yield run

    outcomes: list[Outcome[int, int]] = []

    def interrupt_on_first(o: Outcome[int, int]) -> None:
        outcomes.append(o)
        raise KeyboardInterrupt

    executor = EngineExecutor[int, int](grace_s=0.3)
    began = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        executor.run({"fast": [1, 2], "hung": [7, 8]}, worker, interrupt_on_first)
    release.set()
    assert time.monotonic() - began < 3  # the hung worker did not hold the caller
    assert executor.stop.is_set()
    assert executor.in_flight.get("hung") == 7
    assert outcomes[0].engine == "fast"
