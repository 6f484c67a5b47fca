"""Warm adapters on engines now: choose targets, refuse what cannot work before sending anything, then load or
re-warm in parallel per engine, keeping the residency book within budget and journaling every load.

The book mirrors what the engines do when full: vLLM (and current SGLang) push out their least recently used
unpinned adapter, so a load on a full engine displaces the book's least recently used unpinned entry (on an
engine whose unload frees memory, SGLang, it is unloaded first: the engine itself knows nothing of
lora_budget_mb, and would keep everything; a victim that cannot be unloaded means no load). When
every entry is pinned, the load is skipped rather than breaking a pin or the budget. Pins are held to the
engine kind's limit (placement.pin_limit) on every kind.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from lorafleet.actions.runner import (
    FAILED,
    SKIPPED,
    Acted,
    ClientFactory,
    Reach,
    RegistryWorker,
    RunOptions,
    WarmResult,
    elapsed_ms,
    restore_book,
    run_actions,
)
from lorafleet.engines import AlreadyLoadedError, EngineClient, EngineError, NotRegisteredError, make_client
from lorafleet.inventory.model import Adapter, Engine, Inventory
from lorafleet.policy.placement import can_pin, pin_limit
from lorafleet.policy.residency import ResidencyBook
from lorafleet.stopping import Stop
from lorafleet.store.db import Store

log = logging.getLogger("lorafleet.warm")
LOADED, RELOADED, ALREADY_WARM, UNPINNED = "loaded", "reloaded", "already-warm", "unpinned"
# --dry-run: what a real run would do
WOULD_LOAD, WOULD_REWARM, WOULD_UNPIN = "would-load", "would-re-warm", "would-unpin"


@dataclass(frozen=True)
class WarmOptions(RunOptions):
    prime: bool = False
    pin: bool = False
    unpin: bool = False
    pinned: frozenset[tuple[str, str]] = frozenset()  # (adapter, engine) pairs to pin, as a plan says


class _EngineWorker(RegistryWorker):
    """Warms one engine's adapters in order: its loader is serial anyway, and the book entry is its own."""

    def __init__(self, engine: Engine, client: EngineClient, book: ResidencyBook, options: WarmOptions) -> None:
        super().__init__(engine, client, book)
        self.options = options
        self.primed = False  # this adapter's run sent a 1-token request (--prime)
        self._why = ""  # why the last unload of a victim failed

    def warm(self, adapter: Adapter) -> Acted:
        """The result, and what the book changed (for the store's delta)."""
        started = time.perf_counter()
        key = self.engine.key
        dropped: list[str] | None = None
        self.primed = False
        try:
            action, error, dropped = self._warm(adapter)
        except EngineError as exc:
            action, error = FAILED, exc.message
        ok = action not in (SKIPPED, FAILED) and error is None
        result = WarmResult(adapter.id, key, action, ok, elapsed_ms(started), error, ok and self.primed)
        return Acted(result, used=dropped is not None, dropped=self.take_stale() + (dropped or []))

    def _warm(self, adapter: Adapter) -> tuple[str, str | None, list[str] | None]:
        """(action, error, adapters the book dropped — None when the book did not change)."""
        options = self.options
        state = self.state
        profile = self.engine.profile
        registered = adapter.id in self.registry()  # first: the book is reconciled with the engine
        if options.unpin:
            return self._unpin(adapter, registered)
        pin = options.pin or (adapter.id, self.engine.key) in options.pinned
        if pin and not can_pin(state, adapter.id):
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
        if victims:
            log.info("%s: %s displaces %s (least recently used)", self.engine.key, adapter.id, ", ".join(victims))
        if options.dry_run:
            if not registered:
                return WOULD_LOAD, None, None
            return (ALREADY_WARM if not profile.load_fills_gpu and not options.prime else WOULD_REWARM), None, None
        if victims and profile.unload_frees:
            freed = self._unload(victims)  # out of the book now, and in the store's delta whatever follows
            if len(freed) < len(victims):
                missed = victims[len(freed)]
                return FAILED, f"no room made for {adapter.id}: unloading {missed} failed: {self._why}", None
            victims = []
        error = None
        log.info("%s: %s is %sregistered", self.engine.key, adapter.id, "" if registered else "not ")
        if registered and pin and profile.engine_pins and adapter.id not in state.pins:
            # SGLang holds pins itself, given with the load: one registered unpinned is reloaded pinned (as an
            # unpin reloads it unpinned), or its own LRU could still evict it.
            self.client.unload(adapter.id)
            self.client.load(adapter.id, adapter.path, pinned=True)
            action = RELOADED
        elif registered:
            action = self._rewarm(adapter)
        else:
            try:
                self.client.load(adapter.id, adapter.path, pinned=pin)
                action = LOADED
            except AlreadyLoadedError:  # registered meanwhile (another admin, the daemon): re-warm it instead
                action = self._rewarm(adapter)
            self.registry().add(adapter.id)
            if options.prime and action == LOADED:
                try:
                    self.client.prime(adapter.id)
                    self.primed = True
                except EngineError as exc:  # the load stands: it is booked and journaled as done
                    error = f"loaded, but the prime failed: {exc.message}"
        state.admit(adapter.id, adapter.size_bytes, victims)
        if pin:
            state.pin(adapter.id)
        return action, error, victims

    def _unload(self, victims: list[str]) -> list[str]:
        """The victims unloaded, in order, until one fails (`_why` says how). An engine whose unload frees memory
        (SGLang) keeps whatever it is told to load: lorafleet's budget holds only if the victims go first, as the
        daemon's evictions do (policy/core.py)."""
        freed: list[str] = []
        for victim in victims:
            try:
                self.client.unload(victim)
            except NotRegisteredError:
                pass  # gone already: the room is there
            except EngineError as exc:
                self._why = exc.message
                break
            self.state.evict(victim)
            self.registry().discard(victim)
            self._stale.append(victim)
            freed.append(victim)
        return freed

    def _unpin(self, adapter: Adapter, registered: bool) -> tuple[str, str | None, list[str] | None]:
        """Release a pin. SGLang holds pins itself and has no unpin: the adapter is reloaded unpinned."""
        state = self.state
        if adapter.id not in state.pins and not (registered and self.engine.profile.engine_pins):
            return SKIPPED, f"{adapter.id} is not pinned on {self.engine.key}", None
        if self.options.dry_run:
            return WOULD_UNPIN, None, None
        if registered and self.engine.profile.engine_pins:
            self.client.unload(adapter.id)
            self.client.load(adapter.id, adapter.path, pinned=False)
        state.unpin(adapter.id)
        if not state.holds(adapter.id):
            return UNPINNED, None, None
        state.touch(adapter.id)
        return UNPINNED, None, []

    def _rewarm(self, adapter: Adapter) -> str:
        """A registered adapter made hot again: on either engine the re-warm is a 1-token request naming it, so it
        is `primed` too."""
        fills_gpu = self.engine.profile.load_fills_gpu
        if not fills_gpu and not self.options.prime:
            return ALREADY_WARM  # registered on SGLang means in host memory; --prime takes a GPU slot
        self.client.rewarm(adapter.id, adapter.path)
        self.primed = True
        return RELOADED


def warm(
    inventory: Inventory,
    pairs: Sequence[tuple[Adapter, Engine]],
    options: WarmOptions,
    store: Store | None = None,
    client_factory: ClientFactory = make_client,
    on_result: Callable[[WarmResult], None] | None = None,
    stop: Stop | None = None,
    book: ResidencyBook | None = None,
) -> list[WarmResult]:
    """Warm every pair; engines in parallel (at most `options.parallel`), each engine's adapters in order.

    Each result is journaled as it arrives, in one transaction with the residency change it caused; a dry run
    journals nothing. `book` is what lorafleet last knew (default: restored from the store).
    """
    book = restore_book(inventory, store) if book is None else book
    act = lambda engine, client: _EngineWorker(engine, client, book, options).warm  # noqa: E731
    return run_actions(pairs, act, book, "warm", options, Reach(store, client_factory, on_result, stop))
