"""What a policy has learned, frozen for the journal and thawed at the next start, so a restart (an upgrade, a
`kill -9`) does not throw away the tenants' sequences, the demand model, the experts' standings and where the
gateway sends each adapter.

The frozen form is the policy object, the core's demand model and its learned routes, pickled and compressed:
what the policies learned and no more. No core is written (its book, tables, loads in flight and, through it, the
inventory: a thaw binds each policy to a new one), nor the experts' copies of the fleet, which a restart starts
as empty as the live book anyway: each copy is written as what its policy learned (`_Shadow.remembered_as`) and
made again at the thaw. Written out, the cores and copies were most of a memory on a big fleet (500 engines and
50,000 adapters after 20,000 requests: lru's 1.32 MB compressed and 0.38 s a freeze, now 500 bytes; lorafleet's
5.6 MB and 0.9 s, now 2.9 MB and 0.3 s), on every commit that carried one.
It is read back only by a restricted unpickler that builds nothing but lorafleet's own classes and plain
containers, so a state file that was tampered with cannot run code; and it is used only when it was written by
this lorafleet version (`FORMAT`) on the same inventory (`fingerprint`: engines, budgets, adapters, tenants) —
otherwise it is refused and the policy relearns, as on a first start.
"""

from __future__ import annotations

import hashlib
import io
import pickle
import zlib
from typing import Any

from lorafleet import COMPILED_CORE, __version__
from lorafleet.collector import paused
from lorafleet.inventory.model import Inventory
from lorafleet.policy.core import Policy, PolicyCore

# 20: decisions are plain classes (policy/value.py), no longer NamedTuples
# 19: what the policies learned only: no core (nor, through it, the inventory), no expert's copy of the fleet
# 18: the standings keep the live engines' record beside the experts', and each expert's twin shortfall
# 17: the eager predictor's bars at their least, no lift bar and an edge of zero (a restored copy keeps its old bars)
# 16: the live engines imitate a twin of the leader's copy (`twins`); the experts' own copies are never matched
# 15: the predictor's guesses acted on per tenant and how often each adapter came in time after one (`covered`)
# 14: the demand model's runs of calls (a timer's rhythm between its runs' starts)
# 13: the build named: a memory pickled by the compiled core and one by the plain source do not read each other
# 12: the predictor's record of each tenant's requests that came before the prediction made for them
# 11: tenants remembered, at most MAX_TENANTS (the least recently active forgotten)
# 10: the predictor's edges per adapter followed, and what it brought back (an older memory's guesses would not unpack)
# 9: the core's learned routes (where the gateway sent each adapter's last request)
# 8: simulated copies keep when each adapter was held (Stays), and the standings' settling lag on logs with durations;
# 7: a new leader's copy of an engine is matched to the live engine (the engines still to match);
# 6: the experts that do not lead serve a request after the live calls (a pending request);
# 5: the live engines imitate the predictor (no live copy of it), and the eager predictor among the experts;
# 4: standings over two memories; 3: second-order contexts; 2: edges per guess, repeats
FORMAT = f"lorafleet {__version__} memory 21{' compiled' if COMPILED_CORE else ''}"

# The builtins a frozen policy is made of; every other class must be lorafleet's own (or a plain container).
_SAFE_BUILTINS = {"dict", "list", "set", "frozenset", "tuple", "float", "int", "str", "bool", "bytes", "getattr"}
_SAFE_MODULES = {"collections": {"OrderedDict", "deque", "defaultdict"}, "builtins": _SAFE_BUILTINS}


class MemoryRefusedError(ValueError):
    """A frozen memory that cannot be used here: another version or inventory, or not one at all."""


def fingerprint(inventory: Inventory) -> str:
    """What a learned state depends on: each engine's identity, kind, base model and budgets; the adapters and
    their base models; the tenants and their declared workflows."""
    parts = [
        repr(
            sorted(
                (e.key, e.kind, e.base_model, e.gpu_slots, e.host_slots, e.lora_budget_bytes) for e in inventory.engines
            )
        ),
        repr(sorted((a.id, a.base_model, a.size_bytes) for a in inventory.adapters.values())),
        repr(sorted((t.name, t.workflows) for t in inventory.tenants.values())),
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _core() -> PolicyCore:
    """A policy's core, which a memory does not hold: only a thaw's unpickler can stand one in
    (`_Restricted.find_class`)."""
    raise MemoryRefusedError("a core in a memory is stood in only by a thaw")


class _Freezer(pickle.Pickler):
    """Writes no core (`_core`: a thaw binds every policy to a new one) and what holds a copy of the fleet as it
    says (`remembered_as`). Asked only of objects other than plain containers and values (`reducer_override`), it
    costs little: a persistent id, asked of every object (2.5 million in lorafleet's memory on 500 engines), took
    as long as it saved."""

    def reducer_override(self, obj: Any) -> Any:
        kind = type(obj)
        if kind is PolicyCore:
            return (_core, ())
        remembered_as = getattr(kind, "remembered_as", None)
        return remembered_as(obj) if remembered_as is not None else NotImplemented


def freeze(core: PolicyCore) -> bytes:
    """The core's policy (with what it learned), demand model and learned routes, as bytes."""
    # The latest request's deferred work first (the experts not leading serve it and score it): their copies are
    # made again at a thaw, from what their policies learned (`Policy.idle`: running it early only moves it).
    core.policy.idle()
    out = io.BytesIO()
    with paused():  # the pickler's memo holds every object: a collection meanwhile would traverse them all
        _Freezer(out, pickle.HIGHEST_PROTOCOL).dump((core.policy, core.demand, core.routes))
    return zlib.compress(out.getbuffer(), 1)  # level 1: a third of level 6's time, 12% larger (written every second)


class _Restricted(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, stand_in: PolicyCore) -> None:
        super().__init__(file)
        self._stand_in = stand_in

    def _core(self) -> PolicyCore:
        """The core every thawed policy reads until it is bound to its own: on this thaw's inventory."""
        return self._stand_in

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == (__name__, "_core"):
            return self._core
        if module == "lorafleet" or module.startswith("lorafleet."):
            return super().find_class(module, name)
        if name in _SAFE_MODULES.get(module, ()):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not part of a policy's memory")


def thaw(
    inventory: Inventory,
    state: bytes,
    format: str,
    fingerprint_: str,
    policy_name: str,
    touch_budget: float,
    written: Inventory | None = None,
) -> PolicyCore:
    """A new core on `inventory` whose policy, demand model and learned routes are the frozen ones (the policy
    bound to it, as on a reload; a route only to an engine that still serves its adapter). The fingerprint must
    be that of `written` (the inventory as written, when `inventory` adds engines found at run time).
    MemoryRefusedError when the memory is another version's, another inventory's or another policy's, or cannot
    be read."""
    if format != FORMAT:
        raise MemoryRefusedError(f"it was written by {format!r}, not {FORMAT!r}")
    if fingerprint_ != fingerprint(written if written is not None else inventory):
        raise MemoryRefusedError("it was learned on another inventory")
    stand_in = PolicyCore(inventory, Policy())  # what the thawed policies read until bound (its tables are shared)
    try:
        with paused():  # many new, long-lived objects and no garbage cycles
            policy, demand, routes = _Restricted(io.BytesIO(zlib.decompress(state)), stand_in).load()
    except Exception as exc:  # whatever a damaged or foreign blob raises: never a traceback at start
        raise MemoryRefusedError(f"it cannot be read ({type(exc).__name__})") from None
    if not isinstance(policy, Policy) or policy.name != policy_name:
        raise MemoryRefusedError(f"it is another policy's, not {policy_name}'s")
    if not isinstance(routes, dict):
        raise MemoryRefusedError("it cannot be read (routes)")
    core = PolicyCore(inventory, policy, touch_budget=touch_budget, like=stand_in)  # binds it: what it learned stays
    core.demand = demand  # policies read the demand model through their core
    core.keep_routes(routes)  # where the gateway sends each adapter: a hint is taken there from the start
    policy.resumed()
    return core


__all__ = ["FORMAT", "MemoryRefusedError", "fingerprint", "freeze", "thaw"]
