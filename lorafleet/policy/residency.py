"""What is loaded where: per engine a host-cache tier and a GPU-slot tier, each least-recently-used first.

Recency is by use: a request makes its adapter most recent when it arrives, even while its load is still in
flight (then the adapter takes its place by that arrival when the load completes), and a load nobody asked for
(a prefetch) is most recent when it completes — what an engine's own LRU sees.

The book is pure bookkeeping, shared by the live daemon, `warm` and `replay`. Loads in flight reserve their
slot and bytes, so a budget is never exceeded even while loads overlap; eviction never touches a pinned adapter
or one being loaded.

A book can also keep an index of who holds what (`HolderIndex`: per adapter the engines where it is resident and
where it is loading, and a least-loaded order over each serving pool asked about), so placement on a wide fleet
chooses without scanning a pool. The mutators keep it, through one hook (`EngineResidency._moved`).
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from mypy_extensions import mypyc_attr

from lorafleet.inventory.capacity import slot_cap
from lorafleet.inventory.model import Engine, Inventory
from lorafleet.kinds import kind_of
from lorafleet.pickling import attributes, rebuilt, restore


@mypyc_attr(native_class=False)  # a builtin exception base: a plain Python class
class BudgetError(RuntimeError):
    """A caller tried to break a budget rule; this is a bug in the caller, never an engine's fault."""


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
@dataclass(frozen=True, slots=True)
class Budget:
    gpu_slots: int
    host_slots: int | None  # None: no slot cap (SGLang without --max-loaded-loras)
    budget_bytes: int | None  # None: no byte cap

    def __reduce__(self) -> tuple[Any, ...]:
        return rebuilt(self)  # pickled by its constructor (lorafleet/pickling.py)

    @property
    def slot_cap(self) -> int:
        return slot_cap(self.gpu_slots, self.host_slots)

    def over(self, used_slots: int, used_bytes: int) -> bool:
        """Whether `used_slots` adapters of `used_bytes` bytes in all are past this budget's slots or bytes."""
        return (self.host_slots is not None and used_slots > self.host_slots) or (
            self.budget_bytes is not None and used_bytes > self.budget_bytes
        )

    def room_for(self, used_slots: int, used_bytes: int, size: int) -> bool:
        """Whether one more adapter of `size` bytes fits beside `used_slots` adapters of `used_bytes` bytes."""
        return not self.over(used_slots + 1, used_bytes + size)

    def share(self, size: int) -> float:
        """The share of this budget an adapter of `size` bytes takes: one slot's, or its bytes' when that is more
        (where bytes bind before slots, what the budget holds is a knapsack)."""
        share = 1.0 / max(1, self.slot_cap)
        if self.budget_bytes:
            share = max(share, size / self.budget_bytes)
        return share


def use_gpu_slot(gpu: dict[str, None], adapter: str, slots: int, pins: Collection[str]) -> bool:
    """An engine's GPU tier, `gpu` least recently used first: give `adapter` one of its `slots`, evicting the least
    recently used unpinned one (any, once pins fill every slot); True when it already had one. The one home of
    the tier's rule: the book's (`EngineResidency.use_gpu`) and the stand-in engines' (drive/standin.py)."""
    if adapter in gpu:
        del gpu[adapter]
        gpu[adapter] = None
        return True
    if len(gpu) >= slots:
        for victim in gpu:
            if victim not in pins or len(pins) >= slots:
                del gpu[victim]
                break
    gpu[adapter] = None
    return False


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class EngineResidency:
    """One engine's tiers. `resident` and `gpu` are insertion-ordered: the first key is least recently used."""

    __slots__ = (
        "base_model",
        "budget",
        "gpu",
        "in_flight",
        "index",
        "key",
        "loads_fill_gpu",
        "pins",
        "prefetched",
        "profile",
        "resident",
        "running",
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
        # Requests known to be in progress, per adapter (a start hint until its log line): the engine touches the
        # adapters of every step's batch, so it never evicts one in use; neither is it a victim here.
        self.running: dict[str, int] = {}
        self.used_bytes = 0
        self.stamp = 0  # counts uses on this engine; `used_at` holds each held adapter's last one
        self.used_at: dict[str, int] = {}
        self.profile = kind_of(kind)
        # vLLM copies a loaded adapter into a GPU slot at once; SGLang only fills host memory.
        self.loads_fill_gpu = self.profile.load_fills_gpu
        self.index: HolderIndex | None = None  # the index of the book that holds this engine, once it has one

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (store/memory.py) without the book's index, which is rebuilt when next needed."""
        state = attributes(self)
        state.pop("index", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Every slot `__getstate__` wrote, and no index (a memory pickled by an older version, without some slot,
        is refused by its format line in store/memory.py before it gets here)."""
        self.index = None
        restore(self, state)

    def _moved(self, adapter: str) -> None:
        """The one hook of the book's index: `adapter` just became resident, loading or neither here, and this
        engine's load changed with it. Every mutator of `resident` or `in_flight` calls it."""
        index = self.index
        if index is not None:
            index.moved(self, adapter)

    # --- queries ------------------------------------------------------------------------------------------
    @property
    def used_slots(self) -> int:
        return len(self.resident) + len(self.in_flight)

    def placement_load(self) -> tuple[int, int]:
        """How loaded the placement rule takes the engine to be: its loads in flight, then the slots it holds, no
        more than its slots (past them by requests in use, it has no more room for a newcomer than a full one)."""
        used, slots = self.used_slots, self.budget.host_slots
        return len(self.in_flight), used if slots is None or used <= slots else slots

    def past_budget(self) -> bool:
        """Whether it holds more than its slots or bytes (an engine runs past them with every resident in use)."""
        return self.budget.over(self.used_slots, self.used_bytes)

    def holds(self, adapter: str) -> bool:
        return adapter in self.resident or adapter in self.in_flight

    def fits_ever(self, size: int) -> bool:
        b = self.budget
        return (b.host_slots is None or b.host_slots >= 1) and (b.budget_bytes is None or size <= b.budget_bytes)

    def has_room(self, size: int) -> bool:
        return self.budget.room_for(self.used_slots, self.used_bytes, size)

    def victims_for(self, size: int, order: Iterable[str], overrun: bool = False) -> list[str] | None:
        """The first victims from `order` that make room for `size` bytes, or None if they cannot.

        `order` is the policy's preference (least valuable first); pinned, in-flight and running adapters are
        skipped. `overrun`: the engine takes the adapter whether or not room can be made (a request it took
        itself): where `order` runs out, the victims it found, and the engine runs past its budget. An engine
        already past it that way (`excess`) makes room at its next load as far as it can (drive/standin.py):
        there the victims need make room for the new adapter alone, and take as much of the excess as `order`
        gives, so a load never adds to it.
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
            if not self.evictable(adapter):
                continue
            victims.append(adapter)
            slots_over -= 1
            bytes_over -= self.sizes[adapter]
            if slots_over <= 0 and bytes_over <= 0:
                return victims
        if overrun:
            return victims
        excess_slots, excess_bytes = self.excess()
        return (
            victims
            if (excess_slots or excess_bytes) and slots_over <= excess_slots and bytes_over <= excess_bytes
            else None
        )

    def evictable(self, adapter: str) -> bool:
        """Whether `adapter` can be let go now: resident, neither pinned nor in use by a running request."""
        return adapter in self.resident and adapter not in self.pins and adapter not in self.running

    def own_victim(self) -> str | None:
        """What the engine lets go next by itself where it evicts its least recently used (vLLM) and nothing is
        touched: its oldest resident that can be let go."""
        for adapter in self.resident:
            if self.evictable(adapter):
                return adapter
        return None

    def excess(self) -> tuple[int, int]:
        """How far past its budget the engine is, in slots and bytes: only ever by its own load of a request it
        took with every other adapter in use (`start_load(overrun=True)`)."""
        b = self.budget
        over_slots = 0 if b.host_slots is None else max(0, self.used_slots - b.host_slots)
        over_bytes = 0 if b.budget_bytes is None else max(0, self.used_bytes - b.budget_bytes)
        return over_slots, over_bytes

    def violations(self) -> int:
        """How many of the budgets (slots, bytes) the engine is past."""
        over_slots, over_bytes = self.excess()
        return int(over_slots > 0) + int(over_bytes > 0)

    # --- changes ------------------------------------------------------------------------------------------
    def start_load(self, adapter: str, size: int, overrun: bool = False) -> None:
        """`overrun`: the engine took the adapter itself with every other one in use: past its budget until a
        later load makes room (EngineResidency's only way over it)."""
        if self.holds(adapter):
            raise BudgetError(f"{adapter} is already loaded or loading on {self.key}")
        if not overrun and not self.has_room(size):
            raise BudgetError(f"loading {adapter} on {self.key} would exceed its budget")
        self.in_flight[adapter] = size
        self.used_bytes += size
        self._moved(adapter)

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
        self._moved(adapter)
        if prefetched:
            self.prefetched.add(adapter)
        if self.loads_fill_gpu or last is not None:  # vLLM's load fills a slot; a waiting request's batch does too
            self.use_gpu(adapter)

    def run(self, adapter: str) -> None:
        """A request known to be in progress here uses `adapter` (`running`)."""
        running = self.running
        running[adapter] = running.get(adapter, 0) + 1

    def ran(self, adapter: str) -> None:
        """A request `run` counted has ended (or will not be heard of again)."""
        running = self.running
        left = running.get(adapter, 0) - 1
        if left > 0:
            running[adapter] = left
        else:
            running.pop(adapter, None)

    def fail_load(self, adapter: str) -> None:
        self.used_bytes -= self.in_flight.pop(adapter)
        self.used_at.pop(adapter, None)
        self._moved(adapter)

    def evict(self, adapter: str) -> bool:
        """Drop a resident adapter; True when it was a prefetch nobody used (waste)."""
        if adapter in self.pins:
            raise BudgetError(f"{adapter} is pinned on {self.key}")
        if adapter not in self.resident:
            raise BudgetError(f"{adapter} is not resident on {self.key}")
        del self.resident[adapter]
        self.used_at.pop(adapter, None)
        self.used_bytes -= self.sizes.pop(adapter)
        self._moved(adapter)
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

    def reorder(self, adapter: str) -> None:
        """Most recent again, without a use of its own: a request that arrived after one the book took later
        (the daemon reads a log in the order requests end, the engine took them as they came)."""
        self._most_recent(adapter)

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
        running = self.running
        older: list[str] = []
        for adapter in self.resident:
            if len(doomed) == 0:
                break
            if adapter in doomed:
                doomed.discard(adapter)
            elif adapter not in running:  # one in use is never the engine's least recently used
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
        return use_gpu_slot(self.gpu, adapter, self.budget.gpu_slots, self.pins)

    def admit(self, adapter: str, size: int, victims: Iterable[str] = ()) -> None:
        """Record a load that already happened (warm, a restored book): the victims leave, then the adapter is
        resident and most recent; one already held is only touched. On an engine past its budget (requests it
        took with every adapter in use: `excess`) the victims make room for the adapter alone (`victims_for`),
        and the book stays past it by no more than it was: the engine holds what it loaded."""
        past = any(self.excess())
        for victim in victims:
            self.evict(victim)
        if adapter in self.resident:
            self.touch(adapter)
            return
        self.start_load(adapter, size, overrun=past)
        self.finish_load(adapter)

    def match(self, other: EngineResidency) -> tuple[list[str], list[str]]:
        """Hold what `other` holds, as `other` holds it, its loads in flight included: those come first (they
        are reserved there), then its residents this engine lacks (while room lasts, most recent first); residents
        it lacks leave, and its pins, recency, GPU tier and unused prefetches become this one's. Returns (dropped,
        adopted). This engine must have no load of its own in flight (a copy of the fleet drops them first,
        `Session.match`): a load's place in this engine's queue would not be the other's."""
        if self.in_flight:
            raise BudgetError(f"{self.key} can be matched only while it has no load of its own in flight")
        theirs = other.resident
        self.pins = set(other.pins)  # what the other engine keeps at any cost, this one keeps too
        dropped = [a for a in self.resident if a not in theirs and a not in self.pins]
        for adapter in dropped:
            self.evict(adapter)
        for adapter, size in other.in_flight.items():
            if adapter not in self.resident and self.has_room(size):
                self.start_load(adapter, size)
        adopted = []
        for adapter in reversed(theirs):
            size = other.sizes[adapter]
            if adapter not in self.resident and self.has_room(size):
                self.start_load(adapter, size)  # the book's own accounting; recency is set below
                self.finish_load(adapter)
                adopted.append(adapter)
        order = [a for a in self.resident if a not in theirs] + [a for a in theirs if a in self.resident]
        self.resident = dict.fromkeys(order)
        used = other.used_at
        waited = [a for a in self.in_flight if a in used]  # requested while loading there: placed by that request
        ranked = sorted([*order, *waited], key=lambda a: used.get(a, 0))
        self.used_at = {a: stamp for stamp, a in enumerate(ranked, start=1)}
        self.stamp = len(ranked)
        self.gpu = dict.fromkeys(a for a in other.gpu if a in self.resident)
        self.prefetched = {a for a in other.prefetched if a in self.resident}
        return dropped, adopted

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
        held = [*self.resident, *self.in_flight] if self.index is not None else []
        self.resident.clear()
        self.gpu.clear()
        self.in_flight.clear()
        self.sizes.clear()
        self.prefetched.clear()
        self.used_at.clear()
        self.used_bytes = 0
        for adapter in held:
            self._moved(adapter)


def budget_of(engine: Engine) -> Budget:
    return Budget(engine.gpu_slots, engine.host_slots, engine.lora_budget_bytes)


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class _Group:
    """A least-loaded order over one serving pool: a heap of (loads in flight, slots used, position in the pool,
    version) — the key the placement rule weighs (`EngineResidency.placement_load`), pool order breaking ties.
    An entry is current while its version is its engine's (`HolderIndex.version`); stale ones are dropped when
    they come to the top, and the heap is compacted to the current entries (`current`, one per engine) when
    stale ones outnumber the pool, so no single change pays for re-reading every engine."""

    __slots__ = ("current", "heap", "keys", "limit", "position")

    def __init__(self, keys: tuple[str, ...], index: HolderIndex) -> None:
        self.keys = keys
        self.position: dict[str, int] = {}
        for i, key in enumerate(keys):
            self.position.setdefault(key, i)  # a key twice: its first place counts, as a scan would have it
        self.limit = 2 * len(keys) + 16
        engines, version = index.engines, index.version
        self.current: dict[str, tuple[int, int, int, int]] = {}  # engine key -> its current entry
        for key, i in self.position.items():
            state = engines[key]
            flying, used = state.placement_load()
            self.current[key] = (flying, used, i, version.setdefault(key, 0))
        self.heap: list[tuple[int, int, int, int]] = []
        self.compact()

    def push(self, key: str, entry: tuple[int, int, int, int]) -> None:
        """An engine's new entry (its load changed)."""
        self.current[key] = entry
        heap = self.heap
        heapq.heappush(heap, entry)
        if len(heap) > self.limit:
            self.compact()

    def compact(self) -> None:
        heap = list(self.current.values())
        heapq.heapify(heap)
        self.heap = heap

    def least_loaded(self, version: dict[str, int]) -> str:
        heap, keys = self.heap, self.keys
        while True:
            top = heap[0]
            key = keys[top[2]]
            if version[key] == top[3]:
                return key
            heapq.heappop(heap)


def _holds(table: dict[str, set[str]], adapter: str, key: str, held: bool) -> None:
    """Whether engine `key` holds `adapter`, in one of the index's tables (adapter -> engine keys)."""
    holders = table.get(adapter)
    if held:
        if holders is None:
            table[adapter] = {key}
        else:
            holders.add(key)
    elif holders is not None:
        holders.discard(key)
        if not holders:
            del table[adapter]


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class HolderIndex:
    """Who holds what, kept by the book's mutators: per adapter the engines where it is resident and where it is
    loading, and per serving pool asked about a least-loaded order (`_Group`). Built by `ResidencyBook.indexed`
    from the engines as they are; never pickled (rebuilt when next needed)."""

    __slots__ = ("by_content", "by_id", "engines", "groups_of", "loading", "resident", "version")

    def __init__(self, engines: dict[str, EngineResidency]) -> None:
        self.engines = engines
        self.resident: dict[str, set[str]] = {}  # adapter -> keys of the engines where it is resident
        self.loading: dict[str, set[str]] = {}  # adapter -> keys of the engines loading it
        self.version: dict[str, int] = {}  # engine key -> how many times its load changed (heap entries' stamp)
        self.by_id: dict[int, tuple[Sequence[str], _Group]] = {}  # id of a pool sequence -> it and its group
        self.by_content: dict[tuple[str, ...], _Group] = {}
        self.groups_of: dict[str, list[_Group]] = {}  # engine key -> the groups it is in
        for state in engines.values():
            self.attach(state)

    def moved(self, state: EngineResidency, adapter: str) -> None:
        key = state.key
        _holds(self.resident, adapter, key, adapter in state.resident)
        _holds(self.loading, adapter, key, adapter in state.in_flight)
        self.reweigh(state)

    def reweigh(self, state: EngineResidency) -> None:
        key = state.key
        version = self.version[key] = self.version.get(key, 0) + 1
        groups = self.groups_of.get(key)
        if groups:
            flying, used = state.placement_load()
            for group in groups:
                group.push(key, (flying, used, group.position[key], version))

    def attach(self, state: EngineResidency) -> None:
        """Index an engine's holdings (a book's engine, or one put in its place)."""
        state.index = self
        key = state.key
        for table, adapters in ((self.resident, state.resident), (self.loading, state.in_flight)):
            for adapter in adapters:
                holders = table.get(adapter)
                if holders is None:
                    table[adapter] = {key}
                else:
                    holders.add(key)
        self.reweigh(state)

    def detach(self, state: EngineResidency) -> None:
        """Forget an engine's holdings (it leaves the book)."""
        key = state.key
        for table, adapters in ((self.resident, state.resident), (self.loading, state.in_flight)):
            for adapter in adapters:
                holders = table.get(adapter)
                if holders is not None:
                    holders.discard(key)
                    if not holders:
                        del table[adapter]
        if state.index is self:
            state.index = None

    def group(self, pool: Sequence[str]) -> _Group:
        """The least-loaded order over `pool` (made on first use; pools alike in content share one)."""
        found = self.by_id.get(id(pool))
        if found is not None and found[0] is pool:
            return found[1]
        content = tuple(pool)
        group = self.by_content.get(content)
        if group is None:
            group = self.by_content[content] = _Group(content, self)
            for key in group.position:
                self.groups_of.setdefault(key, []).append(group)
        self.by_id[id(pool)] = (pool, group)  # holds the pool, so its id is not reused while this entry lives
        return group


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class _Engines(dict[str, EngineResidency]):
    """A book's engines by key. Putting an engine in (a reload keeps a state across books) re-indexes it."""

    __slots__ = ("index",)

    def __init__(self, engines: dict[str, EngineResidency]) -> None:
        super().__init__(engines)
        self.index: HolderIndex | None = None

    def __setitem__(self, key: str, state: EngineResidency) -> None:
        index = self.index
        if index is not None:
            old = self.get(key)
            if old is not None:
                index.detach(old)
        super().__setitem__(key, state)
        if index is not None:
            index.attach(state)

    def __delitem__(self, key: str) -> None:
        index = self.index
        if index is not None and key in self:
            index.detach(self[key])
        super().__delitem__(key)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_Engines, (dict(self),))  # pickled without the index


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class ResidencyBook:
    """Every engine's residency, keyed by `HOST/ENGINE`."""

    def __init__(self, engines: dict[str, EngineResidency]) -> None:
        self.engines: dict[str, EngineResidency] = _Engines(engines)

    def indexed(self) -> HolderIndex:
        """The book's holder index, built on first use and kept by the mutators from then on."""
        engines = self.engines
        assert isinstance(engines, _Engines)
        index = engines.index
        if index is None:
            index = engines.index = HolderIndex(engines)
        return index

    @classmethod
    def from_inventory(cls, inventory: Inventory) -> ResidencyBook:
        return cls({e.key: EngineResidency(e.key, e.kind, e.base_model, budget_of(e)) for e in inventory.engines})

    def __getitem__(self, key: str) -> EngineResidency:
        return self.engines[key]
