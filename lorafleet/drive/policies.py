"""The registry of policies: every name `replay` (and the daemon) accepts, and how to make one.

lru is what the engines do alone; lfu, arc, wtinylfu and markov are strong baselines (policy/baselines.py);
lorafleet is ours: it follows whichever of those and its own predictor (policy/predictive.py, as shipped and
eager) has been doing best (drive/leader.py). Two see the future and run in replay only (policy/oracle.py): belady,
the most any eviction order gives without loading ahead, and oracle, the bound with prefetching too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from lorafleet.drive.leader import LeaderPolicy
from lorafleet.policy.baselines import ArcPolicy, LfuPolicy, LruPolicy, MarkovPolicy, WTinyLfuPolicy
from lorafleet.policy.core import Policy
from lorafleet.policy.events import RequestEvent
from lorafleet.policy.oracle import BELADY, ORACLE_VARIANTS, OraclePolicy
from lorafleet.policy.placement import Placement
from lorafleet.policy.predictive import LorafleetPolicy

_ONLINE: dict[str, Callable[[], Policy]] = {
    "lru": LruPolicy,
    "lfu": LfuPolicy,
    "arc": ArcPolicy,
    "wtinylfu": WTinyLfuPolicy,
    "markov": MarkovPolicy,
    "lorafleet": LeaderPolicy,
}
ONLINE_POLICIES = tuple(_ONLINE)  # the ones the daemon can run
OFFLINE_POLICIES = ("belady", "oracle")  # they need the whole trace: replay only; the oracle last
POLICY_NAMES = (*ONLINE_POLICIES, *OFFLINE_POLICIES)
BASELINES = ("lru", "lfu", "arc", "wtinylfu", "markov")


def make_policy(
    name: str, events: Sequence[RequestEvent] = (), variant: int = 0, plan: Sequence[Placement] = ()
) -> Policy:
    """A fresh policy; belady and the oracle need the whole trace (`events`), the oracle one of its offline
    schedules; lorafleet starts from a residency plan when given one."""
    if name == "oracle":
        return OraclePolicy(events, **ORACLE_VARIANTS[variant])
    if name == "belady":
        return OraclePolicy(events, **BELADY)
    if name == "lorafleet":
        return LeaderPolicy(plan)
    factory = _ONLINE.get(name)
    if factory is None:
        raise ValueError(f"unknown policy {name!r} (known: {', '.join(POLICY_NAMES)})")
    return factory()


__all__ = [
    "BASELINES",
    "BELADY",
    "OFFLINE_POLICIES",
    "ONLINE_POLICIES",
    "ORACLE_VARIANTS",
    "POLICY_NAMES",
    "ArcPolicy",
    "LeaderPolicy",
    "LfuPolicy",
    "LorafleetPolicy",
    "LruPolicy",
    "MarkovPolicy",
    "OraclePolicy",
    "WTinyLfuPolicy",
    "make_policy",
]
