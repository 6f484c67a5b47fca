"""Warm adapters on engines now: choose targets, refuse what cannot work before sending anything, then load or
re-warm in parallel per engine, keeping the residency book within budget and journaling every load.

The book mirrors what the engines do when full: vLLM (and current SGLang) push out their least recently used
unpinned adapter, so a load on a full engine displaces the book's least recently used unpinned entry. When
every entry is pinned, the load is skipped rather than breaking a pin or the budget. Pins are held to the
engine kind's limit (placement.pin_limit) on every kind.
"""

from __future__ import annotations

import difflib
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from lorafleet.engines import AlreadyLoadedError, EngineClient, EngineError, make_client
from lorafleet.engines.base import api_key
from lorafleet.engines.executor import EngineExecutor, Interrupted, Outcome, Stop
from lorafleet.errors import InputError
from lorafleet.inventory.model import Adapter, Engine, Inventory
from lorafleet.policy.placement import can_pin, pin_limit, rank_engines, serving_pools, unservable_reason, why_not
from lorafleet.policy.residency import ResidencyBook
from lorafleet.store.db import LoadRecord, Store

LOADED, RELOADED, ALREADY_WARM, SKIPPED, FAILED = "loaded", "reloaded", "already-warm", "skipped", "failed"
INTERRUPTED, CANCELLED = "interrupted", "cancelled"
WOULD_LOAD, WOULD_REWARM = "would-load", "would-re-warm"  # --dry-run: what a real run would do
ClientFactory = Callable[[Engine], EngineClient]


@dataclass(frozen=True)
class WarmResult:
    adapter: str
    engine: str  # HOST/ENGINE
    action: str
    ok: bool
    ms: float
    error: str | None = None
    primed: bool = False  # --prime: the adapter took a GPU slot (a 1-token request, or an in-place re-warm)


@dataclass(frozen=True)
class WarmOptions:
    prime: bool = False
    pin: bool = False
    dry_run: bool = False
    parallel: int = 8
    deadline_s: float | None = None  # the whole run; what is not done by then is reported, not waited for


def resolve_adapters(inventory: Inventory, names: Sequence[str]) -> list[Adapter]:
    adapters = []
    for name in dict.fromkeys(names):  # an adapter named twice is warmed once
        adapter = inventory.adapters.get(name)
        if adapter is None:
            close = difflib.get_close_matches(name, list(inventory.adapters), n=1)
            tip = f"; did you mean {close[0]!r}?" if close else ""
            raise InputError(f"{name!r} is not an adapter in the inventory{tip}")
        adapters.append(adapter)
    return adapters


def choose_targets(
    inventory: Inventory,
    adapters: Sequence[Adapter],
    engine_keys: Sequence[str] = (),
    replicas: int | None = None,
    load_of: Callable[[Engine], int] | None = None,
    book: ResidencyBook | None = None,
) -> list[tuple[Adapter, Engine]]:
    """(adapter, engine) pairs to warm. Named engines are checked and must suit every adapter; otherwise every
    engine that can serve the adapter, limited to `replicas` in the placement rule's order (resident first, then
    least loaded by `load_of`)."""
    pairs: list[tuple[Adapter, Engine]] = []
    if engine_keys:
        engines = []
        for key in dict.fromkeys(engine_keys):
            engine = inventory.engine(key)
            if engine is None:
                close = difflib.get_close_matches(key, [e.key for e in inventory.engines], n=1)
                tip = f"; did you mean {close[0]!r}?" if close else " (engines are named HOST/ENGINE)"
                raise InputError(f"{key!r} is not an engine in the inventory{tip}")
            engines.append(engine)
        for adapter in adapters:
            for engine in engines:
                reason = why_not(adapter, engine)
                if reason is not None:
                    raise InputError(f"refusing to warm: {reason}")
                pairs.append((adapter, engine))
        return pairs
    pools = serving_pools(inventory)
    book = book or ResidencyBook.from_inventory(inventory)
    for adapter in adapters:
        pool = pools[adapter.id]
        if not pool:
            raise InputError(f"refusing to warm {adapter.id}: {unservable_reason(inventory, adapter)}")
        if replicas is not None and replicas < len(pool):
            load = None
            if load_of is not None:
                loads = {key: load_of(inventory.engine(key)) for key in pool}  # type: ignore[arg-type]
                load = loads.__getitem__
            pool = rank_engines(adapter.id, pool, book.engines, load)[:replicas]
        pairs.extend((adapter, engine) for engine in (inventory.engine(k) for k in pool) if engine is not None)
    return pairs


def check_api_keys(engines: Sequence[Engine]) -> None:
    """Every needed key is present before the first request (raises MissingApiKeyError naming the variable)."""
    for engine in engines:
        api_key(engine)


class _EngineWorker:
    """Warms one engine's adapters in order: its loader is serial anyway, and the book entry is its own."""

    def __init__(self, engine: Engine, client: EngineClient, book: ResidencyBook, options: WarmOptions) -> None:
        self.engine = engine
        self.client = client
        self.state = book[engine.key]
        self.options = options
        self._registry: set[str] | None = None

    def registry(self) -> set[str]:
        if self._registry is None:
            self._registry = self.client.registry()
        return self._registry

    def warm(self, adapter: Adapter) -> Warmed:
        """The result, and what the book changed (for the store's delta)."""
        started = time.perf_counter()
        key = self.engine.key
        dropped: list[str] | None = None
        try:
            action, error, dropped = self._warm(adapter)
        except EngineError as exc:
            action, error = FAILED, exc.message
        ok = action not in (SKIPPED, FAILED) and error is None
        primed = self.options.prime and ok and action in (LOADED, RELOADED)
        return Warmed(WarmResult(adapter.id, key, action, ok, _ms(started), error, primed), dropped)

    def _warm(self, adapter: Adapter) -> tuple[str, str | None, list[str] | None]:
        """(action, error, adapters the book dropped — None when the book did not change)."""
        options = self.options
        state = self.state
        profile = self.engine.profile
        if options.pin and not can_pin(state, adapter.id):
            slots = self.engine.gpu_slots
            return (
                SKIPPED,
                f"pin limit reached: {profile.title} allows {pin_limit(state)} pinned with {slots} slots",
                None,
            )
        victims: list[str] = []
        if not state.holds(adapter.id):
            found = state.victims_for(adapter.size_bytes, [a for a in state.resident if a not in state.pins])
            if found is None:
                return SKIPPED, f"no room on {self.engine.key}: every adapter it holds is pinned", None
            victims = found
        registered = adapter.id in self.registry()
        if options.dry_run:
            if not registered:
                return WOULD_LOAD, None, None
            return (ALREADY_WARM if not profile.load_fills_gpu and not options.prime else WOULD_REWARM), None, None
        error = None
        if registered:
            action = self._rewarm(adapter)
        else:
            try:
                self.client.load(adapter.id, adapter.path, pinned=options.pin and profile.engine_pins)
                action = LOADED
            except AlreadyLoadedError:  # registered meanwhile (another admin, the daemon): re-warm it instead
                action = self._rewarm(adapter)
            self.registry().add(adapter.id)
            if options.prime and action == LOADED:
                try:
                    self.client.prime(adapter.id)
                except EngineError as exc:  # the load stands: it is booked and journaled as done
                    error = f"loaded, but the prime failed: {exc.message}"
        state.admit(adapter.id, adapter.size_bytes, victims)
        if options.pin:
            state.pin(adapter.id)
        return action, error, victims

    def _rewarm(self, adapter: Adapter) -> str:
        if not self.engine.profile.load_fills_gpu and not self.options.prime:
            return ALREADY_WARM  # registered on SGLang means in host memory; --prime takes a GPU slot
        self.client.rewarm(adapter.id, adapter.path)
        return RELOADED


@dataclass(frozen=True)
class Warmed:
    result: WarmResult
    dropped: list[str] | None  # None: the book did not change; else it holds the adapter, minus these


class WarmInterrupted(Exception):  # noqa: N818 - a state the CLI reports, like KeyboardInterrupt
    """Ctrl-C or SIGTERM during `warm`: what was done (journaled) and what was not, and the exit code."""

    def __init__(self, results: list[WarmResult], code: int, reason: str) -> None:
        super().__init__(f"{reason} after {sum(r.ok for r in results)} of {len(results)}")
        self.results = results
        self.code = code
        self.reason = reason


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000.0, 1)


def restore_book(inventory: Inventory, store: Store | None) -> ResidencyBook:
    """The book as lorafleet last knew it (empty without a store)."""
    book = ResidencyBook.from_inventory(inventory)
    if store is not None:
        for key, state in book.engines.items():
            state.restore((r.adapter, r.size_bytes, r.pinned) for r in store.residency(key))
    return book


def warm(
    inventory: Inventory,
    pairs: Sequence[tuple[Adapter, Engine]],
    options: WarmOptions,
    store: Store | None = None,
    client_factory: ClientFactory = make_client,
    on_result: Callable[[WarmResult], None] | None = None,
    stop: Stop | None = None,
) -> list[WarmResult]:
    """Warm every pair; engines in parallel (at most `options.parallel`), each engine's adapters in order.

    Each result is journaled as it arrives, in one transaction with the residency change it caused.
    """
    book = restore_book(inventory, store)
    by_engine: dict[str, list[Adapter]] = {}
    engines: dict[str, Engine] = {}
    for adapter, engine in pairs:
        by_engine.setdefault(engine.key, []).append(adapter)
        engines[engine.key] = engine
    check_api_keys(list(engines.values()))
    order = {(a.id, e.key): i for i, (a, e) in enumerate(pairs)}
    results: list[WarmResult] = []
    journal = store is not None and not options.dry_run

    @contextmanager
    def worker(key: str) -> Iterator[Callable[[Adapter], Warmed]]:
        with client_factory(engines[key]) as client:
            client.bind_stop(executor.stop)
            yield _EngineWorker(engines[key], client, book, options).warm

    def record(outcome: Outcome[Adapter, Warmed]) -> None:
        key, adapter = outcome.engine, outcome.item
        if outcome.result is not None:
            result, dropped = outcome.result.result, outcome.result.dropped
        else:  # nothing one engine does may hang or abort the others
            exc = outcome.error
            message = exc.message if isinstance(exc, EngineError) else f"{key}: {type(exc).__name__}: {exc}"
            result, dropped = WarmResult(adapter.id, key, FAILED, False, 0.0, message), None
        results.append(result)
        if journal:
            assert store is not None
            with store.transaction():
                store.record_load(
                    LoadRecord(
                        store.clock(),
                        "warm",
                        result.adapter,
                        result.engine,
                        result.action,
                        result.ok,
                        result.ms,
                        adapter.size_bytes,
                        result.error,
                    )
                )
                if dropped is not None:
                    pinned = adapter.id in book[key].pins
                    store.change_residency(key, [(adapter.id, adapter.size_bytes, pinned)], dropped=dropped)
        if on_result is not None:
            on_result(result)

    executor = EngineExecutor[Adapter, Warmed](options.parallel, stop)
    try:
        executor.run(by_engine, worker, record, deadline_s=options.deadline_s)
    except (KeyboardInterrupt, Interrupted) as exc:
        code, reason = (exc.code, exc.reason) if isinstance(exc, Interrupted) else (130, "interrupted")
        for key, adapter in list(executor.in_flight.items()):
            message = f"{reason} while in flight: the engine may have done it (run warm again to check)"
            record(Outcome(key, adapter, Warmed(WarmResult(adapter.id, key, INTERRUPTED, False, 0.0, message), None)))
        done = {(r.adapter, r.engine) for r in results}
        results.extend(
            WarmResult(a.id, e.key, CANCELLED, False, 0.0, f"not started: {reason}")
            for a, e in pairs
            if (a.id, e.key) not in done
        )
        raise WarmInterrupted(sorted(results, key=lambda r: order[(r.adapter, r.engine)]), code, reason) from None
    return sorted(results, key=lambda r: order[(r.adapter, r.engine)])
