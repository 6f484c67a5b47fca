"""Demand: popularity that ages with traffic, and a per-tenant model of which adapter follows which.

Popularity is counted on a request clock rather than wall time: each adapter's count halves every
`half_life` requests (LRFU-style), so the same setting suits a fleet doing 10 requests a minute or 10,000 a
second, and a drifting hot set is forgotten after a few half-lives. Counts are kept with growing weights
(an observation at clock c weighs 2^{c/h}), so observing is O(1); they are rescaled before they could overflow.
Workflows from the inventory enter as prior transitions that fade as real observations accumulate.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable

_RESCALE_EXPONENT = 200.0


class DemandModel:
    def __init__(
        self,
        half_life: float = 200.0,
        workflows: dict[str, Iterable[Iterable[str]]] | None = None,
        prior_weight: float = 2.0,
        min_evidence: float = 2.0,
    ) -> None:
        self.rate = math.log(2) / half_life
        self.clock = 0  # requests observed
        self.exponent = 0.0  # rate * clock since the last rescale
        self.weight = 1.0  # e^exponent: the weight of an observation now
        self.min_evidence = min_evidence
        self.popularity: dict[str, float] = {}
        self.tenant_activity: dict[str | None, float] = {}
        self.tenant_adapter: dict[tuple[str | None, str], float] = {}
        self.transitions: dict[tuple[str | None, str], dict[str, float]] = {}
        self.transition_totals: dict[tuple[str | None, str], float] = {}
        self.transition_seen: dict[tuple[str | None, str], float] = {}  # undecayed evidence per key
        self.last: dict[str | None, str] = {}
        for tenant, chains in (workflows or {}).items():
            for chain in chains:
                steps = list(chain)
                for prev, nxt in itertools.pairwise(steps):
                    self._add_transition((tenant, prev), nxt, prior_weight, evidence=prior_weight)

    def _tick(self) -> float:
        self.clock += 1
        self.exponent += self.rate
        if self.exponent > _RESCALE_EXPONENT:
            self._rescale()
        self.weight = math.exp(self.exponent)
        return self.weight

    def _rescale(self) -> None:
        factor = math.exp(-self.exponent)
        self.exponent = 0.0
        for table in (self.popularity, self.tenant_activity, self.tenant_adapter, self.transition_totals):
            for key in table:
                table[key] *= factor
        for row in self.transitions.values():
            for key in row:
                row[key] *= factor

    def _add_transition(self, key: tuple[str | None, str], nxt: str, weight: float, evidence: float = 1.0) -> None:
        self.transition_seen[key] = self.transition_seen.get(key, 0.0) + evidence
        row = self.transitions.get(key)
        if row is None:
            row = self.transitions[key] = {}
        row[nxt] = row.get(nxt, 0.0) + weight
        self.transition_totals[key] = self.transition_totals.get(key, 0.0) + weight

    def observe(self, tenant: str | None, adapter: str) -> None:
        w = self._tick()
        self.popularity[adapter] = self.popularity.get(adapter, 0.0) + w
        self.tenant_activity[tenant] = self.tenant_activity.get(tenant, 0.0) + w
        key = (tenant, adapter)
        self.tenant_adapter[key] = self.tenant_adapter.get(key, 0.0) + w
        if tenant is not None:
            prev = self.last.get(tenant)
            if prev is not None:
                self._add_transition((tenant, prev), adapter, w)
            self.last[tenant] = adapter

    def count(self, adapter: str) -> float:
        """Requests for the adapter, each aged by the traffic since (1.0 = one request just now)."""
        return self.popularity.get(adapter, 0.0) / self.weight

    def share(self, adapter: str) -> float:
        """The adapter's recent share of all requests (a steady share s settles at a count of about s / rate)."""
        return min(1.0, self.popularity.get(adapter, 0.0) / self.weight * self.rate)

    def tenant_share(self, tenant: str | None) -> float:
        return min(1.0, self.tenant_activity.get(tenant, 0.0) / self.weight * self.rate)

    def tenant_mix(self, tenant: str | None, adapter: str) -> float:
        """How much of the tenant's recent traffic went to the adapter, whatever came before."""
        activity = self.tenant_activity.get(tenant, 0.0)
        return self.tenant_adapter.get((tenant, adapter), 0.0) / activity if activity > 0 else 0.0

    def next_after(self, tenant: str | None, adapter: str, limit: int = 2) -> list[tuple[str, float]]:
        """The adapters most likely to follow `adapter` for this tenant, with their probabilities.

        Nothing is predicted until the tenant's history (or the workflow prior) holds enough evidence.
        """
        key = (tenant, adapter)
        row = self.transitions.get(key)
        if not row:
            return []
        if self.transition_seen[key] < self.min_evidence:
            return []
        total = self.transition_totals[key]
        ranked = sorted(row.items(), key=lambda kv: -kv[1])[:limit]
        return [(a, w / total) for a, w in ranked]
