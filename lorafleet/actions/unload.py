"""Unload adapters from engines now, and forget them in the book — so an admin can correct what is resident.

An adapter is unloaded where the engine has it registered; elsewhere the row says so and nothing is sent. On
vLLM an unload only drops the name (the weights keep their slot until the engine's LRU pushes them out,
docs/engines.md), which the row says too; on SGLang it frees the memory. Either way the book forgets the
adapter, its pin included, and the journal records the unload.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from lorafleet.actions.runner import (
    FAILED,
    SKIPPED,
    Acted,
    ClientFactory,
    RegistryWorker,
    WarmResult,
    elapsed_ms,
    run_actions,
)
from lorafleet.engines import EngineClient, EngineError, make_client
from lorafleet.inventory.model import Adapter, Engine, Inventory
from lorafleet.policy.residency import ResidencyBook
from lorafleet.stopping import Stop
from lorafleet.store.db import Store

UNLOADED, WOULD_UNLOAD = "unloaded", "would-unload"


class _UnloadWorker(RegistryWorker):
    def __init__(self, engine: Engine, client: EngineClient, book: ResidencyBook, dry_run: bool) -> None:
        super().__init__(engine, client, book)
        self.dry_run = dry_run

    def unload(self, adapter: Adapter) -> Acted:
        started = time.perf_counter()
        key = self.engine.key
        try:
            registered = adapter.id in self.registry()
            if not registered:
                result = WarmResult(adapter.id, key, SKIPPED, True, elapsed_ms(started), "not registered there")
                return Acted(result, dropped=self.take_stale())
            if self.dry_run:
                return Acted(WarmResult(adapter.id, key, WOULD_UNLOAD, True, elapsed_ms(started)))
            self.client.unload(adapter.id)
        except EngineError as exc:
            return Acted(WarmResult(adapter.id, key, FAILED, False, elapsed_ms(started), exc.message))
        self.registry().discard(adapter.id)
        dropped = self.take_stale()
        if self.state.holds(adapter.id):
            self.state.unpin(adapter.id)
            self.state.evict(adapter.id)
            dropped.append(adapter.id)
        note = None if self.engine.profile.unload_frees else "name dropped; vLLM frees the slot only by its own LRU"
        return Acted(WarmResult(adapter.id, key, UNLOADED, True, elapsed_ms(started), note), dropped=dropped)


def unload(
    inventory: Inventory,
    pairs: Sequence[tuple[Adapter, Engine]],
    book: ResidencyBook,
    store: Store | None = None,
    dry_run: bool = False,
    parallel: int = 8,
    client_factory: ClientFactory = make_client,
    on_result: Callable[[WarmResult], None] | None = None,
    stop: Stop | None = None,
    deadline_s: float | None = None,
) -> list[WarmResult]:
    return run_actions(
        pairs,
        lambda engine, client: _UnloadWorker(engine, client, book, dry_run).unload,
        book,
        "unload",
        parallel=parallel,
        store=None if dry_run else store,
        client_factory=client_factory,
        on_result=on_result,
        stop=stop,
        deadline_s=deadline_s,
    )
