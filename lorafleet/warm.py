"""Warm adapters on engines now: choose targets, refuse what cannot work before sending anything, then load or
re-warm in parallel per engine, keeping the residency book within budget and journaling every load.

The book mirrors what the engines do when full: vLLM (and current SGLang) push out their least recently used
unpinned adapter, so a load on a full engine displaces the book's least recently used unpinned entry. When
every entry is pinned, the load is skipped rather than breaking a pin or the budget.
"""

from __future__ import annotations

import difflib
import queue
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from lorafleet.engines import AlreadyLoadedError, EngineClient, EngineError, make_client
from lorafleet.engines.base import api_key
from lorafleet.errors import InputError
from lorafleet.inventory.model import Adapter, Engine, Inventory
from lorafleet.policy.residency import ResidencyBook
from lorafleet.store.db import LoadRecord, Store, utc_now

LOADED, RELOADED, ALREADY_WARM, SKIPPED, FAILED = "loaded", "reloaded", "already-warm", "skipped", "failed"
ClientFactory = Callable[[Engine], EngineClient]


@dataclass(frozen=True)
class WarmResult:
    adapter: str
    engine: str  # HOST/ENGINE
    action: str
    ok: bool
    ms: float
    error: str | None = None


@dataclass(frozen=True)
class WarmOptions:
    prime: bool = False
    pin: bool = False
    dry_run: bool = False
    parallel: int = 8


def resolve_adapters(inventory: Inventory, names: Sequence[str]) -> list[Adapter]:
    adapters = []
    for name in names:
        adapter = inventory.adapters.get(name)
        if adapter is None:
            close = difflib.get_close_matches(name, list(inventory.adapters), n=1)
            tip = f"; did you mean {close[0]!r}?" if close else ""
            raise InputError(f"{name!r} is not an adapter in the inventory{tip}")
        adapters.append(adapter)
    return adapters


def check_pair(adapter: Adapter, engine: Engine) -> str | None:
    """Why this engine can never serve this adapter, or None."""
    if engine.base_model != adapter.base_model:
        return f"{engine.key} serves {engine.base_model}, not {adapter.id}'s base model {adapter.base_model}"
    if engine.max_lora_rank is not None and adapter.rank > engine.max_lora_rank:
        return f"{adapter.id} has rank {adapter.rank}, above {engine.key}'s max_lora_rank {engine.max_lora_rank}"
    budget = engine.lora_budget_bytes
    if budget is not None and adapter.size_bytes > budget:
        return f"{adapter.id} needs {adapter.size_bytes} bytes, more than {engine.key}'s whole lora_budget_mb"
    return None


def choose_targets(
    inventory: Inventory,
    adapters: Sequence[Adapter],
    engine_keys: Sequence[str] = (),
    replicas: int | None = None,
    load_of: Callable[[Engine], int] | None = None,
) -> list[tuple[Adapter, Engine]]:
    """(adapter, engine) pairs to warm. Named engines are checked and must suit every adapter; otherwise every
    engine that can serve the adapter, limited to `replicas` chosen least loaded first (`load_of`)."""
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
                reason = check_pair(adapter, engine)
                if reason is not None:
                    raise InputError(f"refusing to warm: {reason}")
                pairs.append((adapter, engine))
        return pairs
    for adapter in adapters:
        pool = [e for e in inventory.engines if check_pair(adapter, e) is None]
        if not pool:
            same_base = [e for e in inventory.engines if e.base_model == adapter.base_model]
            why = check_pair(adapter, same_base[0]) if same_base else f"no engine serves {adapter.base_model}"
            raise InputError(f"refusing to warm {adapter.id}: {why}")
        if replicas is not None and replicas < len(pool):
            if load_of is not None:
                loads = {e.key: load_of(e) for e in pool}
                pool = sorted(pool, key=lambda e: loads[e.key])
            pool = pool[:replicas]
        pairs.extend((adapter, engine) for engine in pool)
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

    def warm(self, adapter: Adapter) -> WarmResult:
        started = time.perf_counter()
        key = self.engine.key
        try:
            action, reason = self._warm(adapter)
        except EngineError as exc:
            return WarmResult(adapter.id, key, FAILED, False, _ms(started), exc.message)
        return WarmResult(adapter.id, key, action, action != SKIPPED, _ms(started), reason)

    def _warm(self, adapter: Adapter) -> tuple[str, str | None]:
        options = self.options
        state = self.state
        sglang = self.engine.kind == "sglang"
        if options.pin and sglang and adapter.id not in state.pins:
            limit = max(0, self.engine.gpu_slots - 1)
            if len(state.pins) >= limit:
                return SKIPPED, f"pin limit reached: SGLang allows {limit} pinned with {self.engine.gpu_slots} slots"
        victims: list[str] = []
        if not state.holds(adapter.id):
            found = state.victims_for(adapter.size_bytes, [a for a in state.resident if a not in state.pins])
            if found is None:
                return SKIPPED, f"no room on {self.engine.key}: every adapter it holds is pinned"
            victims = found
        registered = adapter.id in self.registry()
        if options.dry_run:
            if not registered:
                return LOADED, None
            return (ALREADY_WARM if sglang and not options.prime else RELOADED), None
        if registered:
            action = self._rewarm(adapter)
        else:
            try:
                self.client.load(adapter.id, adapter.path, pinned=options.pin and sglang)
                action = LOADED
            except AlreadyLoadedError:  # registered meanwhile (another admin, the daemon): re-warm it instead
                action = self._rewarm(adapter)
            self.registry().add(adapter.id)
            if options.prime and action == LOADED:
                self.client.prime(adapter.id)
        self._book(adapter, victims)
        return action, None

    def _rewarm(self, adapter: Adapter) -> str:
        if self.engine.kind == "sglang" and not self.options.prime:
            return ALREADY_WARM  # registered on SGLang means in host memory; --prime takes a GPU slot
        self.client.rewarm(adapter.id, adapter.path)
        return RELOADED

    def _book(self, adapter: Adapter, victims: list[str]) -> None:
        state = self.state
        for victim in victims:
            state.evict(victim)
        if state.holds(adapter.id):
            state.touch(adapter.id)
        else:
            state.start_load(adapter.id, adapter.size_bytes)
            state.finish_load(adapter.id)
        if self.options.pin:
            state.pins.add(adapter.id)


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000.0, 1)


def warm(
    inventory: Inventory,
    pairs: Sequence[tuple[Adapter, Engine]],
    options: WarmOptions,
    store: Store | None = None,
    client_factory: ClientFactory = make_client,
    on_result: Callable[[WarmResult], None] | None = None,
) -> list[WarmResult]:
    """Warm every pair; engines in parallel (at most `options.parallel`), each engine's adapters in order.

    Results are journaled as they arrive (one transaction each), and each engine's book as soon as that
    engine is done.
    """
    book = ResidencyBook.from_inventory(inventory)
    if store is not None:
        store.load_residency(book.engines.values())
    by_engine: dict[str, list[Adapter]] = {}
    engines: dict[str, Engine] = {}
    for adapter, engine in pairs:
        by_engine.setdefault(engine.key, []).append(adapter)
        engines[engine.key] = engine
    check_api_keys(list(engines.values()))
    # Workers report each result, then their engine's name when done; the main thread alone writes the store.
    done: queue.Queue[WarmResult | str] = queue.Queue()
    order = {(a.id, e.key): i for i, (a, e) in enumerate(pairs)}
    results: list[WarmResult] = []

    def run(key: str) -> None:
        engine = engines[key]
        pending = list(by_engine[key])
        try:
            with client_factory(engine) as client:
                worker = _EngineWorker(engine, client, book, options)
                while pending:
                    done.put(worker.warm(pending[0]))
                    pending.pop(0)
        except Exception as exc:  # nothing one engine does may hang or abort the others
            message = exc.message if isinstance(exc, EngineError) else f"{key}: {type(exc).__name__}: {exc}"
            for adapter in pending:
                done.put(WarmResult(adapter.id, key, FAILED, False, 0.0, message))
        finally:
            done.put(key)

    with ThreadPoolExecutor(max_workers=max(1, min(options.parallel, len(engines)))) as pool:
        for key in by_engine:
            pool.submit(run, key)
        running = len(by_engine)
        while running:
            item = done.get()
            if isinstance(item, str):
                running -= 1
                if store is not None and not options.dry_run:
                    store.save_residency(book[item])
                continue
            results.append(item)
            if store is not None and not options.dry_run:
                store.record_load(
                    LoadRecord(
                        utc_now(),
                        "warm",
                        item.adapter,
                        item.engine,
                        item.action,
                        item.ok,
                        item.ms,
                        inventory.adapters[item.adapter].size_bytes,
                        item.error,
                    )
                )
            if on_result is not None:
                on_result(item)
    return sorted(results, key=lambda r: order[(r.adapter, r.engine)])
