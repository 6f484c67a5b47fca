"""What is loaded where: per engine a host-cache tier and a GPU-slot tier, each least-recently-used first.

Recency is by use: a request makes its adapter most recent when it arrives, even while its load is still in
flight (then the adapter takes its place by that arrival when the load completes), and a load nobody asked for
(a prefetch) is most recent when it completes — what an engine's own LRU sees.

The book is pure bookkeeping, shared by the live daemon, `warm` and `replay`. Loads in flight reserve their
slot and bytes, so a budget is never exceeded even while loads overlap; eviction never touches a pinned adapter
or one being loaded.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from lorafleet.inventory.model import Engine, Inventory, slot_cap
from lorafleet.kinds import kind_of


class BudgetError(RuntimeError):
    """A caller tried to break a budget rule; this is a bug in the caller, never an engine's fault."""


@dataclass(frozen=True, slots=True)
class Budget:
    gpu_slots: int
    host_slots: int | None  # None: no slot cap (SGLang without --max-loaded-loras)
    budget_bytes: int | None  # None: no byte cap

    @property
    def slot_cap(self) -> int:
        return slot_cap(self.gpu_slots, self.host_slots)


class EngineResidency:
    """One engine's tiers. `resident` and `gpu` are insertion-ordered: the first key is least recently used."""

    __slots__ = (
        "base_model",
        "budget",
        "gpu",
        "in_flight",
        "key",
        "loads_fill_gpu",
        "pins",
        "prefetched",
        "profile",
        "resident",
        "sizes",
        "stamp",
        "used_at",
        "used_bytes",
    )

    def __init__(self, key: str, kind: str, base_model: str, budget: Budget) -> None:
        self.key = key
        self.base_model = base_model
        self.budget = budget
        self.resident: dict[str, None] = {}
        self.gpu: dict[str, None] = {}
        self.in_flight: dict[str, int] = {}
        self.sizes: dict[str, int] = {}
        self.pins: set[str] = set()
        self.prefetched: set[str] = set()  # resident because of a prefetch, not yet requested
        self.used_bytes = 0
        self.stamp = 0  # counts uses on this engine; `used_at` holds each held adapter's last one
        self.used_at: dict[str, int] = {}
        self.profile = kind_of(kind)
        # vLLM copies a loaded adapter into a GPU slot at once; SGLang only fills host memory.
        self.loads_fill_gpu = self.profile.load_fills_gpu

    # --- queries ------------------------------------------------------------------------------------------
    @property
    def used_slots(self) -> int:
        return len(self.resident) + len(self.in_flight)

    def holds(self, adapter: str) -> bool:
        return adapter in self.resident or adapter in self.in_flight

    def fits_ever(self, size: int) -> bool:
        b = self.budget
        return (b.host_slots is None or b.host_slots >= 1) and (b.budget_bytes is None or size <= b.budget_bytes)

    def has_room(self, size: int) -> bool:
        b = self.budget
        return (b.host_slots is None or self.used_slots + 1 <= b.host_slots) and (
            b.budget_bytes is None or self.used_bytes + size <= b.budget_bytes
        )

    def victims_for(self, size: int, order: Iterable[str]) -> list[str] | None:
        """The first victims from `order` that make room for `size` bytes, or None if they cannot.

        `order` is the policy's preference (least valuable first); pinned and in-flight adapters are skipped.
        """
        if not self.fits_ever(size):
            return None
        b = self.budget
        slots_over = 0 if b.host_slots is None else self.used_slots + 1 - b.host_slots
        bytes_over = 0 if b.budget_bytes is None else self.used_bytes + size - b.budget_bytes
        if slots_over <= 0 and bytes_over <= 0:
            return []
        victims: list[str] = []
        for adapter in order:
            if adapter not in self.resident or adapter in self.pins:
                continue
            victims.append(adapter)
            slots_over -= 1
            bytes_over -= self.sizes[adapter]
            if slots_over <= 0 and bytes_over <= 0:
                return victims
        return None

    def violations(self) -> int:
        b = self.budget
        over_slots = b.host_slots is not None and self.used_slots > b.host_slots
        over_bytes = b.budget_bytes is not None and self.used_bytes > b.budget_bytes
        return int(over_slots) + int(over_bytes)

    # --- changes ------------------------------------------------------------------------------------------
    def start_load(self, adapter: str, size: int) -> None:
        if self.holds(adapter):
            raise BudgetError(f"{adapter} is already loaded or loading on {self.key}")
        if not self.has_room(size):
            raise BudgetError(f"loading {adapter} on {self.key} would exceed its budget")
        self.in_flight[adapter] = size
        self.used_bytes += size

    def finish_load(self, adapter: str, prefetched: bool = False) -> None:
        size = self.in_flight.pop(adapter)
        self.sizes[adapter] = size
        resident = self.resident
        used_at = self.used_at
        last = used_at.get(adapter)
        if last is None:  # nobody asked for it while it loaded: most recent now
            self.stamp += 1
            used_at[adapter] = self.stamp
            resident[adapter] = None
        elif not resident or used_at[next(reversed(resident))] < last:
            resident[adapter] = None
        else:  # requested while loading, and others were used since: it takes its place by that request
            resident[adapter] = None
            self.resident = dict.fromkeys(sorted(resident, key=used_at.__getitem__))
        if prefetched:
            self.prefetched.add(adapter)
        if self.loads_fill_gpu:
            self.use_gpu(adapter)

    def fail_load(self, adapter: str) -> None:
        self.used_bytes -= self.in_flight.pop(adapter)
        self.used_at.pop(adapter, None)

    def evict(self, adapter: str) -> bool:
        """Drop a resident adapter; True when it was a prefetch nobody used (waste)."""
        if adapter in self.pins:
            raise BudgetError(f"{adapter} is pinned on {self.key}")
        if adapter not in self.resident:
            raise BudgetError(f"{adapter} is not resident on {self.key}")
        del self.resident[adapter]
        self.used_at.pop(adapter, None)
        self.used_bytes -= self.sizes.pop(adapter)
        self.gpu.pop(adapter, None)
        wasted = adapter in self.prefetched
        self.prefetched.discard(adapter)
        return wasted

    def note_use(self, adapter: str) -> None:
        """A request for an adapter still loading: it counts as used now (its place when the load completes)."""
        self.stamp += 1
        self.used_at[adapter] = self.stamp

    def _most_recent(self, adapter: str) -> None:
        resident = self.resident
        del resident[adapter]
        resident[adapter] = None
        self.note_use(adapter)

    def touch(self, adapter: str) -> bool:
        """Mark a request's use; True when it used a prefetch for the first time."""
        self._most_recent(adapter)
        if adapter in self.prefetched:
            self.prefetched.discard(adapter)
            return True
        return False

    def keep_for(self, victims: list[str]) -> list[str]:
        """On an engine that evicts by itself, least recently used first (vLLM), the only way to make it drop
        `victims` is to use everything older than them: the adapters to touch (a 1-token request each), oldest
        first. Empty when the victims are already the oldest (what the engine does alone)."""
        if self.profile.unload_frees or not victims:
            return []
        doomed = set(victims)
        older: list[str] = []
        for adapter in self.resident:
            if len(doomed) == 0:
                break
            if adapter in doomed:
                doomed.discard(adapter)
            else:
                older.append(adapter)
        return older

    def keep(self, adapter: str) -> None:
        """A controller's touch: most recent in both tiers, as a request would make it (not a use of a prefetch)."""
        self._most_recent(adapter)
        self.use_gpu(adapter)

    def keep_all(self, adapters: list[str]) -> None:
        """`keep` each adapter in turn (the touches before an eviction on vLLM), in one pass: every touched
        adapter becomes most recent in host memory in order, and in the GPU tier only the last touches can
        stay, so the earlier unpinned ones, which the later ones would push out again, are not inserted."""
        resident, used_at = self.resident, self.used_at
        stamp = self.stamp
        for adapter in adapters:
            del resident[adapter]
            resident[adapter] = None
            stamp += 1
            used_at[adapter] = stamp
        self.stamp = stamp
        pins = self.pins
        slots = self.budget.gpu_slots
        cut = len(adapters) - slots - len(pins)  # the last `slots` unpinned touches, at least, follow `cut`
        if cut > 0 and len(pins) < slots:
            adapters = [a for a in adapters[:cut] if a in pins] + adapters[cut:]
        for adapter in adapters:
            self.use_gpu(adapter)

    def use_gpu(self, adapter: str) -> bool:
        """Give the adapter a GPU slot (LRU); True when it already had one."""
        gpu = self.gpu
        if adapter in gpu:
            del gpu[adapter]
            gpu[adapter] = None
            return True
        if len(gpu) >= self.budget.gpu_slots:
            for victim in gpu:
                if victim not in self.pins or len(self.pins) >= self.budget.gpu_slots:
                    del gpu[victim]
                    break
        gpu[adapter] = None
        return False

    def admit(self, adapter: str, size: int, victims: Iterable[str] = ()) -> None:
        """Record a load that already happened (warm, a restored book): the victims leave, then the adapter is
        resident and most recent; one already held is only touched."""
        for victim in victims:
            self.evict(victim)
        if adapter in self.resident:
            self.touch(adapter)
            return
        self.start_load(adapter, size)
        self.finish_load(adapter)

    def pin(self, adapter: str) -> None:
        if adapter not in self.resident and adapter not in self.in_flight:
            raise BudgetError(f"{adapter} is not held on {self.key}; only a held adapter can be pinned")
        self.pins.add(adapter)

    def unpin(self, adapter: str) -> None:
        self.pins.discard(adapter)

    def snapshot(self) -> list[tuple[str, int, bool]]:
        """(adapter, bytes, pinned) for every resident adapter, least recently used first."""
        return [(a, self.sizes[a], a in self.pins) for a in self.resident]

    def restore(self, rows: Iterable[tuple[str, int, bool]]) -> None:
        """Refill from a snapshot (least recently used first). When the budget shrank since, the most recent
        rows that fit are kept; rows for adapters already held are skipped."""
        chosen: list[tuple[str, bool]] = []
        for adapter, size, pinned in reversed(list(rows)):
            if not self.holds(adapter) and self.has_room(size):
                self.start_load(adapter, size)  # reserves, so has_room sees every row kept so far
                chosen.append((adapter, pinned))
        for adapter, pinned in reversed(chosen):
            self.finish_load(adapter)
            if pinned:
                self.pins.add(adapter)

    def forget_all(self) -> None:
        """An engine restart empties it: nothing resident, nothing loading (pins are kept as intent)."""
        self.resident.clear()
        self.gpu.clear()
        self.in_flight.clear()
        self.sizes.clear()
        self.prefetched.clear()
        self.used_at.clear()
        self.used_bytes = 0


def budget_of(engine: Engine) -> Budget:
    return Budget(engine.gpu_slots, engine.host_slots, engine.lora_budget_bytes)


class ResidencyBook:
    """Every engine's residency, keyed by `HOST/ENGINE`."""

    def __init__(self, engines: dict[str, EngineResidency]) -> None:
        self.engines = engines

    @classmethod
    def from_inventory(cls, inventory: Inventory) -> ResidencyBook:
        return cls({e.key: EngineResidency(e.key, e.kind, e.base_model, budget_of(e)) for e in inventory.engines})

    def __getitem__(self, key: str) -> EngineResidency:
        return self.engines[key]
