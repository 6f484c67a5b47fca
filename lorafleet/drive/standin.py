"""Engines that keep their own LRU: what a daemon learning from log lines meets (replay's log visibility).

A daemon that tails logs learns of a request only when its line is written, at the request's end. By then the
engine has served it: took it at its arrival, loaded a missing adapter itself and evicted its own least recently
used. The book then believes what it learned, in the order it learned it; the engine holds what its own LRU
kept. To tell what that gives, replay runs the session as the daemon runs it (the session returns calls) against
these stand-ins, which act as each kind's engine does by itself (docs/engines.md): every request is taken at its
arrival and its adapter made most recent, loaded first when absent (a miss) or still loading (late), and in use
until the request ends (`end`): each step touches the adapters of its batch, so one in use is never the least
recently used, and its request's end leaves it the most recent; a load, a
touch (a 1-token request naming the adapter) and a prefetch of a registered adapter (vLLM: a 1-token request)
make it most recent, loading it when absent; an unload drops it. Past its slots or bytes the engine evicts its
least recently used — pinned ones only on a kind whose engine holds pins (SGLang). The GPU tier is the book's rule
(`use_gpu_slot`, policy/residency.py, with the engine's own pins: none on vLLM): a hit takes one of the engine's
GPU slots, least recently used out, and a hit outside them waits the host-to-device copy; a touch takes one; a
load takes one when it is done, where a request waited on it or the kind's load fills a slot (vLLM), as the
book's `finish_load` gives it; an adoption takes one where a load would. The tier starts empty unless given.
A load ahead of demand (a prefetch, a plan's) that loads is used by the first request after it, hit or late,
which avoids the load time it did not wait; let go before one comes, it was wasted. One that finds the adapter
held loads nothing, and no request uses it.

Each engine has one serial loader taking loads in the order they come, a load taking the load-time model's cold
time for its size. The gateway in front of them routes a request the log places on no engine by what they hold
(`route`). Instants are epoch seconds, load times milliseconds.
"""

from __future__ import annotations

import heapq
import zlib
from collections import OrderedDict
from collections.abc import Collection, Iterable, Mapping, Sequence

from mypy_extensions import mypyc_attr

from lorafleet.inventory.capacity import LoadModel
from lorafleet.policy.core import HIT, LATE, MISS
from lorafleet.policy.residency import EngineResidency, use_gpu_slot


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class _Engine:
    __slots__ = (
        "ahead",
        "budget",
        "fills_gpu",
        "free_at",
        "gpu",
        "gpu_due",
        "held",
        "key",
        "load",
        "pins",
        "registered",
        "running",
        "used_bytes",
    )

    def __init__(self, state: EngineResidency, load: LoadModel) -> None:
        self.key = state.key
        self.budget = state.budget
        self.load = load
        self.held: OrderedDict[str, float] = OrderedDict()  # adapter -> when its load is done; first: LRU
        self.pins: set[str] | None = set() if state.profile.engine_pins else None
        self.free_at = float("-inf")  # when the loader is next free
        self.used_bytes = 0
        self.running: dict[str, int] = {}  # requests in progress, per adapter
        self.registered: set[str] = set()  # loaded once, not unloaded since (an eviction keeps the name)
        self.gpu: dict[str, None] = {}  # the adapters in GPU slots, least recently used first
        # GPU slots to take when loads are done: (when, order, adapter), a heap; taken before anything at or after
        self.gpu_due: list[tuple[float, int, str]] = []
        self.fills_gpu = state.profile.load_fills_gpu
        self.ahead: set[str] = set()  # loaded ahead of demand (a prefetch, a plan), no request since


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class StandInEngines:
    """Every engine's own cache and loader (module docstring)."""

    def __init__(
        self, engines: Mapping[str, EngineResidency], loads: Mapping[str, LoadModel], sizes: Mapping[str, int]
    ):
        self.sizes = sizes
        self.engines = {key: _Engine(state, loads[key]) for key, state in engines.items()}
        self.holders: dict[str, set[str]] = {}  # adapter -> the engines that hold it (loaded or loading)
        self.busy_ms = 0.0
        self.last_done = float("-inf")
        self.gpu_hits = 0  # hits whose adapter held a GPU slot
        # Loads ahead of demand as the engines saw them: the first request after one used it (a hit, or late on
        # it), and the load time it did not wait; one let go before any request came was wasted
        self.prefetch_used = 0
        self.cold_ms_avoided = 0.0
        self.wasted_prefetches = 0
        self._order = 0

    def route(self, adapter: str, pool: Sequence[str], now: float) -> str | None:
        """The engine of `pool` a gateway with adapter affinity sends a request for `adapter` to: one that holds
        the adapter (the first in pool order that has it loaded, else the first loading it), else the engine the
        adapter's name hashes to (the spread of `hash $http_x_lora_adapter consistent`, which
        deploy/nginx-lorafleet.conf recommends); None for an empty pool. The engines' holdings, not what a
        follower of the log has read so far: a request still running has its adapter on its engine, and its line
        is not written yet.

        Routed by lorafleet's book instead (the placement rule), replay made the engines' behaviour depend on the
        policy's knowledge: a request whose adapter came with a request still running went to whichever engine
        the book found least loaded and was loaded there a second time (h-bytes-drift, seed 10: 40-60 of every
        500 requests, lru alone 59.8% against 65.6%). Nor can the book's least loaded place a newcomer: with every
        engine full it ties, and each newcomer went to the first in pool order while the others kept whatever
        they held when they filled (holders found on the engines, newcomers placed by the book: workflow-
        undeclared, seed 1, lru 51.2% where every prefetcher hit 41-42%). A hash spreads the newcomers as the
        gateway does, whatever any policy knows."""
        holders = self.holders.get(adapter)
        if holders:
            if len(holders) == 1:
                return next(iter(holders))
            loading = None
            for key in pool:
                if key in holders:
                    if self.engines[key].held[adapter] <= now:
                        return key
                    if loading is None:
                        loading = key
            if loading is not None:
                return loading
        if not pool:
            return None
        return pool[zlib.crc32(adapter.encode()) % len(pool)]

    def arrive(self, now: float, engine: str, adapter: str, scale: float = 1.0) -> tuple[str, float]:
        """A request at its arrival: its outcome and how long it waits (ms) for its adapter (a hit outside the
        GPU slots: the copy into one). The adapter is in use until `end` is called for the request. `scale`: the
        load-time model's times scaled (a live session's calibration of the engine, as the count had it)."""
        state = self.engines[engine]
        self._loaded_by(state, now)
        state.running[adapter] = state.running.get(adapter, 0) + 1
        ready = state.held.get(adapter)
        if ready is None:
            done = self._load(now, state, adapter, scale)
            self._gpu_when(state, adapter, done, now)  # its batch, once loaded
            return MISS, (done - now) * 1000.0
        state.held.move_to_end(adapter)
        if ready > now:
            self._gpu_when(state, adapter, ready, now)
            outcome, waited = LATE, (ready - now) * 1000.0
        elif self._use_gpu(state, adapter):
            self.gpu_hits += 1
            outcome, waited = HIT, 0.0
        else:
            outcome, waited = HIT, state.load.copy_ms(self.sizes[adapter]) * scale
        if adapter in state.ahead:  # the first request after a load ahead of demand: it avoided what it did not wait
            state.ahead.discard(adapter)
            self.prefetch_used += 1
            self.cold_ms_avoided += max(0.0, state.load.cold_ms(self.sizes[adapter]) * scale - waited)
        return outcome, waited

    def end(self, engine: str, adapter: str) -> None:
        """A request `arrive` took has ended: its adapter is the most recent, and in use no more by it."""
        state = self.engines[engine]
        left = state.running.get(adapter, 1) - 1
        if left > 0:
            state.running[adapter] = left
        else:
            state.running.pop(adapter, None)
        if adapter in state.held:
            state.held.move_to_end(adapter)

    def use(
        self,
        now: float,
        engine: str,
        adapter: str,
        pin: bool = False,
        request: bool = False,
        scale: float = 1.0,
        ahead: bool = False,
    ) -> bool:
        """A load, touch or prefetch naming the adapter: most recent, loaded when absent. True when it loads.
        `request`: a 1-token request (a touch), which takes a GPU slot as any request does; a load takes one on a
        kind whose load fills a slot. `ahead`: a load ahead of demand (a prefetch, a plan's), whose first request
        uses it (`prefetch_used`) and which is wasted if let go before one comes, where it loads."""
        state = self.engines[engine]
        self._loaded_by(state, now)
        gpu = request or state.fills_gpu
        if pin and state.pins is not None:
            state.pins.add(adapter)
        if adapter in state.held:
            state.held.move_to_end(adapter)
            if gpu:
                self._gpu_when(state, adapter, state.held[adapter], now)
            return False
        done = self._load(now, state, adapter, scale)
        if gpu:
            self._gpu_when(state, adapter, done, now)
        if ahead:  # the newest is never the one evicted
            state.ahead.add(adapter)
        return True

    def ready_at(self, engine: str, adapter: str) -> float | None:
        return self.engines[engine].held.get(adapter)

    def registered(self, engine: str, adapter: str) -> bool:
        """Whether the engine knows the adapter's name: loaded there once (by a request or a call) and not
        unloaded since. vLLM answers a load call for such a name "already loaded", whether or not its cache
        still holds it (docs/engines.md)."""
        return adapter in self.engines[engine].registered

    def unload(self, engine: str, adapter: str) -> None:
        state = self.engines[engine]
        state.registered.discard(adapter)
        if adapter in state.held:
            self._drop(state, adapter)
        if state.pins is not None:
            state.pins.discard(adapter)

    def hold(
        self,
        engine: str,
        adapters: list[tuple[str, float]],
        pins: Collection[str] = (),
        gpu: Iterable[str] = (),
        ahead: Collection[str] = (),
    ) -> None:
        """The engine holds these, each (adapter, when its load is done), least recently used first, registered,
        those of `pins` pinned where the engine holds pins, those of `gpu` (least recently used first) in its GPU
        slots, those of `ahead` loaded ahead of demand and not yet used: a starting point."""
        state = self.engines[engine]
        for adapter, ready in adapters:
            if adapter not in state.held:
                state.used_bytes += self.sizes[adapter]
                self.holders.setdefault(adapter, set()).add(engine)
            state.held[adapter] = ready
            state.held.move_to_end(adapter)
            state.registered.add(adapter)
            if adapter in pins and state.pins is not None:
                state.pins.add(adapter)
            if adapter in ahead:
                state.ahead.add(adapter)
        for adapter in gpu:
            if adapter in state.held:
                self._use_gpu(state, adapter)

    def adopt(self, now: float, engine: str, adapter: str) -> bool:
        """Another process loaded `adapter` on the engine (a reconcile found it there): held from `now`, most
        recent, while it fits — the book's rule for what it adopts (it evicts nothing for it), in a GPU slot where
        a load fills one (vLLM adopts what runs). True when held."""
        state = self.engines[engine]
        if adapter in state.held or not state.budget.room_for(len(state.held), state.used_bytes, self.sizes[adapter]):
            return False
        self._loaded_by(state, now)
        self.hold(engine, [(adapter, now)], gpu=[adapter] if state.fills_gpu else ())
        return True

    def keep_only(self, engine: str, registry: set[str]) -> None:
        """The engine has only `registry` registered (a reconcile's finding): the rest is gone."""
        for adapter in [a for a in self.engines[engine].held if a not in registry]:
            self.unload(engine, adapter)
        self.engines[engine].registered &= registry

    def holds(self, engine: str) -> list[str]:
        """What the engine holds, least recently used first."""
        return list(self.engines[engine].held)

    @staticmethod
    def _use_gpu(state: _Engine, adapter: str) -> bool:
        return use_gpu_slot(state.gpu, adapter, state.budget.gpu_slots, state.pins or ())

    def _gpu_when(self, state: _Engine, adapter: str, ready: float, now: float) -> None:
        """`adapter` takes a GPU slot when its load is done (`ready`), as the book's `finish_load` gives it one:
        now, if it is done."""
        if ready <= now:
            self._use_gpu(state, adapter)
        else:
            self._order += 1
            heapq.heappush(state.gpu_due, (ready, self._order, adapter))

    def _loaded_by(self, state: _Engine, now: float) -> None:
        """The GPU slots loads done by `now` took, in the order they were done (one evicted or loaded anew since
        takes none for its old load)."""
        due = state.gpu_due
        while due and due[0][0] <= now:
            ready, _, adapter = heapq.heappop(due)
            if state.held.get(adapter) == ready:
                self._use_gpu(state, adapter)

    def _load(self, now: float, state: _Engine, adapter: str, scale: float = 1.0) -> float:
        size = self.sizes[adapter]
        cold = state.load.cold_ms(size) * scale
        done = max(now, state.free_at) + cold / 1000.0
        state.free_at = done
        self.busy_ms += cold
        self.last_done = max(self.last_done, done)
        state.held[adapter] = done
        state.registered.add(adapter)
        self.holders.setdefault(adapter, set()).add(state.key)
        state.used_bytes += size
        self._fit(state, adapter)
        return done

    def _fit(self, state: _Engine, newest: str) -> None:
        """Evict least recently used until the engine is within its slots and bytes (the newest and those in use
        always stay: an engine never takes more distinct adapters into a step than its slots, so this lets it run
        over only where more are in use at once than it holds)."""
        budget, held, pins, running = state.budget, state.held, state.pins, state.running
        while budget.over(len(held), state.used_bytes):
            victim = next(
                (a for a in held if a != newest and a not in running and (pins is None or a not in pins)), None
            )
            if victim is None:
                return
            self._drop(state, victim)

    def _drop(self, state: _Engine, adapter: str) -> None:
        """The engine no longer holds `adapter` (held): its bytes, its holder entry and its GPU slot go with it; a
        load ahead of demand no request used was wasted."""
        del state.held[adapter]
        if adapter in state.ahead:
            state.ahead.discard(adapter)
            self.wasted_prefetches += 1
        state.used_bytes -= self.sizes[adapter]
        self.holders[adapter].discard(state.key)
        state.gpu.pop(adapter, None)


__all__ = ["StandInEngines"]
