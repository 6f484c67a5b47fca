"""A followed log as events: the follower's complete lines, parsed with the log's field mapping, batch by batch.

The daemon reads its logs through this one door: each batch carries the requests its lines held, how many lines
were read and how many were bad, and the checkpoint that is true once they are consumed (logs/follow.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from lorafleet.inventory.model import Inventory
from lorafleet.logs.follow import Checkpoint, LogFollower
from lorafleet.logs.reader import LineParser, NameResolver, source_for
from lorafleet.logs.records import LogTally
from lorafleet.policy.events import RequestEvent


@dataclass
class EventBatch:
    path: str
    events: list[RequestEvent]  # in line order: adapter, base-model and unknown requests
    consumed: int  # raw lines consumed (blank ones included); or 1 when only the skip of an over-long line moved on
    lines: int  # lines counted (blank ones are not)
    bad: int
    unknown: int  # requests naming an adapter (or model) the inventory does not know
    checkpoint: Checkpoint


def _a_day_ahead() -> float:
    """The latest time a line of a live log may carry: a gateway's clock a day ahead of ours is no clock."""
    return time.time() + 86400.0


class LogStream:
    """Follows one file or glob (like `tail -F`) and parses what it reads."""

    def __init__(self, pattern: str, inventory: Inventory, saved: dict[str, Checkpoint], from_start: bool) -> None:
        self.pattern = pattern
        self.follower = LogFollower([pattern], saved, from_start)
        self.use(inventory)

    def use(self, inventory: Inventory, resolver: NameResolver | None = None) -> None:
        """Parse with this inventory's field mapping and names from now on (a reload)."""
        self.parser = LineParser(source_for(self.pattern, inventory), inventory, resolver, not_after=_a_day_ahead)

    @property
    def tally(self) -> LogTally:
        """What this stream's lines held since its parser was made (the names it did not know among them)."""
        return self.parser.tally

    def poll(self) -> list[EventBatch]:
        """What was written since the last poll, one batch per file read."""
        out = []
        parse, tally = self.parser.parse, self.parser.tally
        for batch in self.follower.poll():
            lines0, bad0, unknown0 = tally.lines, tally.bad_lines, tally.unknown_requests
            events = [event for event in map(parse, batch.lines) if event is not None]
            lines, bad, unknown = tally.lines - lines0, tally.bad_lines - bad0, tally.unknown_requests - unknown0
            consumed = len(batch.lines) or int(batch.advanced > 0)
            out.append(EventBatch(batch.path, events, consumed, lines, bad, unknown, batch.checkpoint))
        return out

    def open(self) -> None:
        """Open what matches now (a first start begins at the files' ends as of this moment)."""
        self.follower.open()

    @property
    def files(self) -> int:
        return len(self.follower.tails)

    @property
    def unopened(self) -> dict[str, str]:
        """Files that match but could not be opened at the last look (too many open files, no permission): why."""
        return self.follower.unopened

    def checkpoints(self) -> list[Checkpoint]:
        return self.follower.checkpoints()

    def lag_bytes(self) -> int:
        return self.follower.lag_bytes()

    def close(self) -> None:
        self.follower.close()


__all__ = ["EventBatch", "LogStream"]
