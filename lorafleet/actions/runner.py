"""Run per-adapter actions (warm, unload) on many engines: the executor, the journal, the book, interrupts.

Each engine gets one worker (its own client and its own book entry) that turns an adapter into an `Acted`: the
result row, and what it changed in the book. The thread that called `run_actions` alone writes the store, one
transaction per result: the journal row and the residency delta it caused commit together. Ctrl-C, SIGTERM or
the run deadline stop every worker; what was in flight is journaled as interrupted, what never started is
reported as cancelled, and `ActionsInterrupted` carries the partial results and the exit code.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from lorafleet.engines import EngineClient, EngineError, make_client
from lorafleet.engines.base import api_key
from lorafleet.engines.executor import EngineExecutor, Outcome
from lorafleet.inventory.model import Adapter, Engine, Inventory
from lorafleet.policy.residency import EngineResidency, ResidencyBook
from lorafleet.stopping import Interrupted, Stop
from lorafleet.store.db import ActionRow, Store

log = logging.getLogger("lorafleet.actions.runner")
FAILED, SKIPPED, INTERRUPTED, CANCELLED = "failed", "skipped", "interrupted", "cancelled"
ClientFactory = Callable[[Engine], EngineClient]


@dataclass(frozen=True)
class WarmResult:
    """One (adapter, engine) row of a run, as printed and journaled."""

    adapter: str
    engine: str  # HOST/ENGINE
    action: str
    ok: bool
    ms: float
    error: str | None = None
    primed: bool = False  # --prime: the adapter took a GPU slot (a 1-token request, or an in-place re-warm)


@dataclass(frozen=True)
class Acted:
    """A result and the book's change for the store: `used` — the adapter is now held (most recent); `dropped` —
    adapters the book no longer holds (displaced, unloaded, or gone from the engine's registry)."""

    result: WarmResult
    used: bool = False
    dropped: list[str] = field(default_factory=list)


class ActionsInterrupted(Exception):  # noqa: N818 - a state the CLI reports, like KeyboardInterrupt
    """Ctrl-C, SIGTERM or the run deadline: what was done (journaled) and what was not, and the exit code."""

    def __init__(self, results: list[WarmResult], code: int, reason: str) -> None:
        super().__init__(f"{reason} after {sum(r.ok for r in results)} of {len(results)}")
        self.results = results
        self.code = code
        self.reason = reason


class RegistryWorker:
    """A worker's shared part: the engine's registry read once per run, the book reconciled with it first."""

    def __init__(self, engine: Engine, client: EngineClient, book: ResidencyBook) -> None:
        self.engine = engine
        self.client = client
        self.state: EngineResidency = book[engine.key]
        self._registry: set[str] | None = None
        self._stale: list[str] = []

    def registry(self) -> set[str]:
        """What the engine has registered. On first read, the book forgets what the engine no longer has (an
        engine that restarted has nothing), pins included, so a stale book never refuses work."""
        if self._registry is None:
            self._registry = self.client.registry()
            for adapter in [a for a in self.state.resident if a not in self._registry]:
                self.state.unpin(adapter)
                self.state.evict(adapter)
                self._stale.append(adapter)
            if self._stale:
                log.info("%s: no longer registered there, forgotten: %s", self.engine.key, ", ".join(self._stale))
        return self._registry

    def take_stale(self) -> list[str]:
        stale, self._stale = self._stale, []
        return stale


def elapsed_ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000.0, 1)


def check_api_keys(engines: Sequence[Engine]) -> None:
    """Every needed key is present before the first request (raises MissingApiKeyError naming the variable)."""
    for engine in engines:
        api_key(engine)


def restore_book(inventory: Inventory, store: Store | None) -> ResidencyBook:
    """The book as lorafleet last knew it (empty without a store)."""
    book = ResidencyBook.from_inventory(inventory)
    if store is not None:
        for key, state in book.engines.items():
            state.restore((r.adapter, r.size_bytes, r.pinned) for r in store.residency(key))
    return book


@dataclass(frozen=True)
class RunOptions:
    """How a run of engine actions goes: how many engines at once, the deadline of the whole run (what is not done
    by then is reported, not waited for), and whether it only reads registries (a dry run journals nothing)."""

    parallel: int = 8
    deadline_s: float | None = None
    dry_run: bool = False


@dataclass(frozen=True)
class Reach:
    """How a run reaches the engines and where its results go: the store that journals them, the client factory
    (tests inject theirs), a callback per result (a progress bar), and the stop that ends the run."""

    store: Store | None = None
    client_factory: ClientFactory = make_client
    on_result: Callable[[WarmResult], None] | None = None
    stop: Stop | None = None


def run_actions(
    pairs: Sequence[tuple[Adapter, Engine]],
    act: Callable[[Engine, EngineClient], Callable[[Adapter], Acted]],
    book: ResidencyBook,
    source: str,
    options: RunOptions,
    reach: Reach,
) -> list[WarmResult]:
    """Act on every pair: engines in parallel (at most `options.parallel`), each engine's adapters in order. `act`
    makes an engine's per-adapter function from its client. Results are journaled (when a store is given and it is
    no dry run) as `source`, and returned in the order the pairs were given."""
    store, client_factory, on_result, stop = reach.store, reach.client_factory, reach.on_result, reach.stop
    engines = {e.key: e for _, e in pairs}
    by_engine: dict[str, list[Adapter]] = {key: [] for key in engines}
    for adapter, engine in pairs:
        by_engine[engine.key].append(adapter)
    check_api_keys(list(engines.values()))
    order = {(a.id, e.key): i for i, (a, e) in enumerate(pairs)}
    recorder = _Recorder(book, source, None if options.dry_run else store, on_result)
    executor = EngineExecutor[Adapter, Acted](options.parallel, stop)

    @contextmanager
    def worker(key: str) -> Iterator[Callable[[Adapter], Acted]]:
        with client_factory(engines[key]) as client:
            client.bind_stop(executor.stop)
            yield act(engines[key], client)

    try:
        executor.run(by_engine, worker, recorder.record, deadline_s=options.deadline_s)
    except (KeyboardInterrupt, Interrupted) as exc:
        code, reason = (exc.code, exc.reason) if isinstance(exc, Interrupted) else (130, "interrupted")
        results = recorder.interrupted(executor.in_flight, pairs, reason)
        raise ActionsInterrupted(sorted(results, key=lambda r: order[(r.adapter, r.engine)]), code, reason) from None
    return sorted(recorder.results, key=lambda r: order[(r.adapter, r.engine)])


class _Recorder:
    """A run's results, each journaled (with the residency change it caused) and reported as it arrives."""

    def __init__(
        self, book: ResidencyBook, source: str, store: Store | None, on_result: Callable[[WarmResult], None] | None
    ) -> None:
        self.book, self.source, self.store, self.on_result = book, source, store, on_result
        self.results: list[WarmResult] = []

    def record(self, outcome: Outcome[Adapter, Acted]) -> None:
        key, adapter = outcome.engine, outcome.item
        if outcome.result is not None:
            acted = outcome.result
        else:  # nothing one engine does may hang or abort the others
            exc = outcome.error
            message = exc.message if isinstance(exc, EngineError) else f"{key}: {type(exc).__name__}: {exc}"
            acted = Acted(WarmResult(adapter.id, key, FAILED, False, 0.0, message))
        self.results.append(acted.result)
        if self.store is not None:
            journal(self.store, self.source, adapter, acted, adapter.id in self.book[key].pins)
        if self.on_result is not None:
            self.on_result(acted.result)

    def interrupted(
        self, in_flight: Mapping[str, Adapter], pairs: Sequence[tuple[Adapter, Engine]], reason: str
    ) -> list[WarmResult]:
        """Ctrl-C, SIGTERM or the deadline: what was in flight is journaled as interrupted (the engine may have
        done it), what never started is reported as cancelled."""
        for key, adapter in list(in_flight.items()):
            message = f"{reason} while in flight: the engine may have done it (run again to check)"
            self.record(Outcome(key, adapter, Acted(WarmResult(adapter.id, key, INTERRUPTED, False, 0.0, message))))
        done = {(r.adapter, r.engine) for r in self.results}
        cancelled = [
            WarmResult(a.id, e.key, CANCELLED, False, 0.0, f"not started: {reason}")
            for a, e in pairs
            if (a.id, e.key) not in done
        ]
        return self.results + cancelled


def journal(store: Store, source: str, adapter: Adapter, acted: Acted, pinned: bool) -> None:
    """One result's journal row and the residency delta it caused, in one transaction."""
    r = acted.result
    with store.transaction():
        store.record_action(
            ActionRow(store.clock(), source, r.adapter, r.engine, r.action, r.ok, r.ms, adapter.size_bytes, r.error)
        )
        if acted.used or acted.dropped:
            used = [(adapter.id, adapter.size_bytes, pinned)] if acted.used else []
            store.change_residency(r.engine, used, dropped=acted.dropped)
