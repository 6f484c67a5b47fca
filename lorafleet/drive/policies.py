"""The registry of policies: every name `replay` (and the daemon) accepts, and how to make one.

lru is what the engines do alone; lfu, arc, wtinylfu and markov are strong baselines (policy/baselines.py);
lorafleet is ours: it follows whichever of those and its own predictor (policy/predictive.py, as shipped and
eager) has been doing best (drive/leader.py); oracle sees the future and runs in replay only (policy/oracle.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from lorafleet.drive.leader import LeaderPolicy
from lorafleet.policy.baselines import ArcPolicy, LfuPolicy, LruPolicy, MarkovPolicy, WTinyLfuPolicy
from lorafleet.policy.core import Policy
from lorafleet.policy.events import RequestEvent
from lorafleet.policy.oracle import ORACLE_VARIANTS, OraclePolicy
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
POLICY_NAMES = (*ONLINE_POLICIES, "oracle")
BASELINES = ("lru", "lfu", "arc", "wtinylfu", "markov")


def make_policy(
    name: str, events: Sequence[RequestEvent] = (), variant: int = 0, plan: Sequence[Placement] = ()
) -> Policy:
    """A fresh policy; the oracle needs the whole trace (`events`) and one of its offline schedules; lorafleet
    starts from a residency plan when given one."""
    if name == "oracle":
        return OraclePolicy(events, **ORACLE_VARIANTS[variant])
    if name == "lorafleet":
        return LeaderPolicy(plan)
    factory = _ONLINE.get(name)
    if factory is None:
        raise ValueError(f"unknown policy {name!r} (known: {', '.join(POLICY_NAMES)})")
    return factory()


__all__ = [
    "BASELINES",
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
