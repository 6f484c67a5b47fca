"""Unload adapters from engines now, and forget them in the book — so an admin can correct what is resident.

An adapter is unloaded where the engine has it registered; elsewhere the row says so and nothing is sent. On
vLLM an unload only drops the name (the weights keep their slot until the engine's LRU pushes them out,
docs/engines.md), which the row says too; on SGLang it frees the memory. Either way the book forgets the
adapter, its pin included, and the journal records the unload.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import suppress

from lorafleet.actions import runner
from lorafleet.actions.runner import FAILED, SKIPPED, Acted, Reach, RunOptions, WarmResult
from lorafleet.engines import EngineClient, EngineError, NotRegisteredError
from lorafleet.inventory.model import Adapter, Engine, Inventory
from lorafleet.policy.residency import ResidencyBook

UNLOADED, WOULD_UNLOAD = "unloaded", "would-unload"


class _UnloadWorker(runner.RegistryWorker):
    def __init__(self, engine: Engine, client: EngineClient, book: ResidencyBook, dry_run: bool) -> None:
        super().__init__(engine, client, book)
        self.dry_run = dry_run

    def unload(self, adapter: Adapter) -> Acted:
        started = time.perf_counter()
        key = self.engine.key
        try:
            registered = adapter.id in self.registry()
            if not registered:
                result = WarmResult(adapter.id, key, SKIPPED, True, runner.elapsed_ms(started), "not registered there")
                return Acted(result, dropped=self.take_stale())
            if self.dry_run:
                return Acted(WarmResult(adapter.id, key, WOULD_UNLOAD, True, runner.elapsed_ms(started)))
            with suppress(NotRegisteredError):  # unregistered meanwhile (another admin, the daemon): as asked
                self.client.unload(adapter.id)
        except EngineError as exc:
            return Acted(WarmResult(adapter.id, key, FAILED, False, runner.elapsed_ms(started), exc.message))
        self.registry().discard(adapter.id)
        dropped = self.take_stale()
        if self.state.holds(adapter.id):
            self.state.unpin(adapter.id)
            self.state.evict(adapter.id)
            dropped.append(adapter.id)
        note = None if self.engine.profile.unload_frees else "name dropped; vLLM frees the slot only by its own LRU"
        return Acted(WarmResult(adapter.id, key, UNLOADED, True, runner.elapsed_ms(started), note), dropped=dropped)


def unload(
    inventory: Inventory,
    pairs: Sequence[tuple[Adapter, Engine]],
    book: ResidencyBook,
    options: RunOptions,
    reach: Reach,
) -> list[WarmResult]:
    """Unload every pair; engines in parallel, each engine's adapters in order; a dry run journals nothing."""
    act = lambda engine, client: _UnloadWorker(engine, client, book, options.dry_run).unload  # noqa: E731
    return runner.run_actions(pairs, act, book, "unload", options, reach)
