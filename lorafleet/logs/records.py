"""The tally of what a log held: lines, requests by kind, bad lines by reason."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lorafleet.policy.events import ADAPTER, BASE, RequestEvent

MAX_UNKNOWN_NAMES = 1000


@dataclass
class LogTally:
    """What reading a log produced; bad lines are counted by reason, never fatal."""

    lines: int = 0
    adapter_requests: int = 0
    base_requests: int = 0
    unknown_requests: int = 0
    bad_lines: int = 0
    bad_reasons: dict[str, int] = field(default_factory=dict)
    unknown_names: dict[str, int] = field(default_factory=dict)
    timed: int = 0  # requests whose line gave a duration: their arrival is known apart from their end
    unplaced: int = 0  # adapter requests whose line names no engine of the inventory: replay routes them itself

    def bad(self, reason: str) -> None:
        self.bad_lines += 1
        self.bad_reasons[reason] = self.bad_reasons.get(reason, 0) + 1

    def count(self, event: RequestEvent, raw_name: str | None) -> None:
        if event.kind == ADAPTER:
            self.adapter_requests += 1
        elif event.kind == BASE:
            self.base_requests += 1
        else:
            self.unknown_requests += 1
            if raw_name is not None:
                self._unknown(raw_name[:200], 1)

    def _unknown(self, name: str, times: int) -> None:
        """Count a name the inventory does not know: the first thousand names, so a log of random names cannot
        grow the tally without bound, however many logs are merged into it."""
        if name in self.unknown_names or len(self.unknown_names) < MAX_UNKNOWN_NAMES:
            self.unknown_names[name] = self.unknown_names.get(name, 0) + times

    def merge(self, other: LogTally) -> None:
        self.lines += other.lines
        self.adapter_requests += other.adapter_requests
        self.base_requests += other.base_requests
        self.unknown_requests += other.unknown_requests
        self.bad_lines += other.bad_lines
        self.timed += other.timed
        self.unplaced += other.unplaced
        for k, v in other.bad_reasons.items():
            self.bad_reasons[k] = self.bad_reasons.get(k, 0) + v
        for k, v in other.unknown_names.items():
            self._unknown(k, v)


def storable(*values: Any) -> bool:
    """Whether every value is text the journal can store: JSON's `\\ud800` escape makes a lone surrogate, which
    UTF-8 cannot encode (SQLite would refuse the whole batch it is in). A value that is not text is stored as its
    `str`."""
    try:
        for value in values:
            if value is not None:
                (value if isinstance(value, str) else str(value)).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
