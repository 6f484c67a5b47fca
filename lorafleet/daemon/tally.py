"""What one batch of log lines and actions adds to the journal, held until it is committed with its checkpoints."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from lorafleet.store.journal import ActionRow, CheckpointRow, Outcomes, RollupKey


def minute_of(epoch_s: float) -> str:
    """The UTC minute of an epoch time, as rollups key it ('YYYY-MM-DDTHH:MMZ')."""
    return time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime(epoch_s))


@dataclass
class Pending:
    """Everything since the last commit. `lines` counts log lines consumed (blank ones included)."""

    rollups: dict[RollupKey, Outcomes] = field(default_factory=dict)
    checkpoints: dict[str, CheckpointRow] = field(default_factory=dict)
    log_counts: dict[str, tuple[int, int]] = field(default_factory=dict)
    actions: list[ActionRow] = field(default_factory=list)
    errors: list[tuple[str, str, str]] = field(default_factory=list)
    lines: int = 0

    def outcome(self, key: RollupKey) -> Outcomes:
        found = self.rollups.get(key)
        if found is None:
            found = self.rollups[key] = Outcomes()
        return found

    def count_lines(self, minute: str, lines: int, bad: int) -> None:
        had_lines, had_bad = self.log_counts.get(minute, (0, 0))
        self.log_counts[minute] = (had_lines + lines, had_bad + bad)
        self.lines += lines

    def empty(self) -> bool:
        return not (self.rollups or self.checkpoints or self.log_counts or self.actions or self.errors)


@dataclass
class Summary:
    """What a daemon run did, for `--once`, the README and the final log line."""

    lines: int = 0
    bad_lines: int = 0
    requests: int = 0
    hits: int = 0
    late: int = 0
    misses: int = 0
    unserved: int = 0
    cold_ms_paid: float = 0.0
    cold_ms_avoided: float = 0.0
    loads: int = 0
    touches: int = 0
    unloads: int = 0
    evictions: int = 0
    failed: int = 0
    prefetch_loads: int = 0
    prefetch_used: int = 0
    wasted_prefetches: int = 0
    reconciles: int = 0
    engine_restarts: int = 0
    vanished: int = 0
    commits: int = 0

    @property
    def hit_ratio(self) -> float:
        return self.hits / self.requests if self.requests else 0.0


__all__ = ["Pending", "Summary", "minute_of"]
