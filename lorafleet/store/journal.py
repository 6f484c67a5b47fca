"""The daemon's journal: per-minute outcome rollups, log checkpoints, actions and errors.

`commit_progress` writes one batch in one transaction: the rollups derived from some log lines, the checkpoints
just after those lines, the actions finished meanwhile and the errors. A crash before the commit loses the
batch and its checkpoints together (the lines are read again); after it, both are there (the lines are not read
again). Rollups are added to (`ON CONFLICT … DO UPDATE`), so a minute split over many batches sums correctly.
"""

from __future__ import annotations

import operator
import sqlite3
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from typing import NamedTuple

from lorafleet.logs.follow import Checkpoint
from lorafleet.logs.records import storable
from lorafleet.measures import hit_ratio
from lorafleet.store.db import ActionRow, Store, write_actions
from lorafleet.times import hour_key

ROLLUP_FIELDS = (
    "requests",
    "hits",
    "late",
    "misses",
    "gpu_hits",
    "prefetch_hits",
    "cold_ms",
    "avoided_ms",
)


@dataclass(slots=True)
class Outcomes:
    """Counts for one (minute, tenant, adapter, engine). `prefetch_hits` counts the requests that used a
    prefetched adapter (a hit, or a wait on it while it loaded)."""

    requests: int = 0
    hits: int = 0
    late: int = 0
    misses: int = 0
    gpu_hits: int = 0
    prefetch_hits: int = 0
    cold_ms: float = 0.0
    avoided_ms: float = 0.0

    def add(self, other: Outcomes) -> None:
        for name in ROLLUP_FIELDS:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    @property
    def hit_ratio(self) -> float:
        return hit_ratio(self.hits, self.requests)


assert tuple(f.name for f in fields(Outcomes)) == ROLLUP_FIELDS
_values = operator.attrgetter(*ROLLUP_FIELDS)  # an Outcomes' counts as a tuple, in ROLLUP_FIELDS order

RollupKey = tuple[str, str, str, str]  # minute, tenant, adapter, engine
_SET_SUMS = ", ".join(f"{f} = {f} + excluded.{f}" for f in ROLLUP_FIELDS)
_PLACES = ", ".join("?" * len(ROLLUP_FIELDS))


def commit_progress(
    store: Store,
    rollups: Mapping[RollupKey, Outcomes] = {},
    checkpoints: Iterable[Checkpoint] = (),
    log_counts: Mapping[str, tuple[int, int, int]] = {},  # minute read -> (lines, bad, naming unknown adapters)
    actions: Iterable[ActionRow] = (),
    errors: Iterable[tuple[str, str, str]] = (),  # (at, source, message)
    memory: PolicyMemory | None = None,
) -> None:
    with store.transaction() as db:
        if memory is not None:  # with the checkpoint it goes with: a restart resumes both from the same line
            db.execute(
                "INSERT OR REPLACE INTO policy_memory (id, format, fingerprint, policy, taken_at, state) "
                "VALUES (0, ?, ?, ?, ?, ?)",
                (memory.format, memory.fingerprint, memory.policy, store.clock(), memory.state),
            )
        _write_rollups(db, rollups)
        _write_checkpoints(db, checkpoints, store.clock())
        db.executemany(
            "INSERT INTO log_minutes (minute, lines, bad, unknown) VALUES (?, ?, ?, ?) ON CONFLICT (minute) DO UPDATE "
            "SET lines = lines + excluded.lines, bad = bad + excluded.bad, unknown = unknown + excluded.unknown",
            [(minute, *counts) for minute, counts in log_counts.items()],
        )
        write_actions(db, list(actions))
        db.executemany("INSERT INTO errors (at, source, message) VALUES (?, ?, ?)", list(errors))


def commit_or_drop(
    store: Store,
    rollups: Mapping[RollupKey, Outcomes],
    checkpoints: Iterable[Checkpoint],
    log_counts: Mapping[str, tuple[int, int, int]],
    actions: list[ActionRow],
    errors: list[tuple[str, str, str]],
    memory: PolicyMemory | None = None,
) -> int:
    """`commit_progress`, and when the batch cannot commit, again without the rows SQLite cannot store (text that
    is not UTF-8), the drop journaled as an error: one bad row never blocks the checkpoints and every other row, so
    a restart does not read the same batch again and fail again. Returns the rows dropped."""
    try:
        commit_progress(store, rollups, checkpoints, log_counts, actions, errors, memory)
        return 0
    except (UnicodeError, ValueError):  # a row's text; SQLite's own failures (locked, disk full) go to the caller
        kept_rollups = {key: o for key, o in rollups.items() if storable(*key)}
        kept_actions = [
            a for a in actions if storable(a.at, a.source, a.adapter, a.engine, a.action, a.error, a.reason)
        ]
        kept_errors = [e for e in errors if storable(*e)]
        dropped = len(rollups) - len(kept_rollups) + len(actions) - len(kept_actions) + len(errors) - len(kept_errors)
        if not dropped:
            raise
    note = (store.clock(), "daemon", f"{dropped} journal rows could not be stored (not UTF-8 text) and were dropped")
    commit_progress(store, kept_rollups, checkpoints, log_counts, kept_actions, [*kept_errors, note], memory)
    return dropped


def _write_rollups(db: sqlite3.Connection, rollups: Mapping[RollupKey, Outcomes]) -> None:
    """The minute rows, and the hourly rows per dimension (everything, tenant, adapter, engine) they sum to."""
    db.executemany(
        f"INSERT INTO rollups (minute, tenant, adapter, engine, {', '.join(ROLLUP_FIELDS)}) "
        f"VALUES (?, ?, ?, ?, {_PLACES}) ON CONFLICT (minute, tenant, adapter, engine) DO UPDATE SET {_SET_SUMS}",
        [(*key, *_values(o)) for key, o in rollups.items()],
    )
    hourly: dict[tuple[str, str, str], tuple[int | float, ...]] = {}  # (dim, hour, key) -> summed counts
    for (minute, tenant, adapter, engine), o in rollups.items():
        hour = hour_key(minute)
        counts = _values(o)
        for key in (("all", hour, ""), ("tenant", hour, tenant), ("adapter", hour, adapter), ("engine", hour, engine)):
            found = hourly.get(key)
            hourly[key] = counts if found is None else tuple(map(operator.add, found, counts))
    db.executemany(
        f"INSERT INTO rollups_hourly (dim, hour, key, {', '.join(ROLLUP_FIELDS)}) "
        f"VALUES (?, ?, ?, {_PLACES}) ON CONFLICT (dim, hour, key) DO UPDATE SET {_SET_SUMS}",
        [(*key, *counts) for key, counts in hourly.items()],
    )


def _write_checkpoints(db: sqlite3.Connection, checkpoints: Iterable[Checkpoint], now: str) -> None:
    db.executemany(
        "INSERT INTO checkpoints (path, device, inode, offset, head_len, head_hash, skipping, updated_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (path) DO UPDATE SET device = excluded.device, "
        "inode = excluded.inode, offset = excluded.offset, head_len = excluded.head_len, "
        "head_hash = excluded.head_hash, skipping = excluded.skipping, updated_at = excluded.updated_at",
        [(c.path, c.device, c.inode, c.offset, c.head_len, c.head_hash, int(c.skipping), now) for c in checkpoints],
    )


class PolicyMemory(NamedTuple):
    """What a policy learned, frozen (store/memory.py), with what it must match to be used again."""

    format: str
    fingerprint: str
    policy: str
    state: bytes
    taken_at: str = ""


def read_memory(store: Store) -> PolicyMemory | None:
    row = store.db.execute(
        "SELECT format, fingerprint, policy, state, taken_at FROM policy_memory WHERE id = 0"
    ).fetchone()
    return None if row is None else PolicyMemory(row[0], row[1], row[2], bytes(row[3]), row[4])


def read_checkpoints(store: Store) -> list[Checkpoint]:
    rows = store.db.execute(
        "SELECT path, device, inode, offset, head_len, head_hash, skipping FROM checkpoints ORDER BY path"
    )
    return [Checkpoint(row[0], row[1], row[2], row[3], row[4], row[5], bool(row[6])) for row in rows]


def newest_log_minute(store: Store) -> str | None:
    """The newest minute the journal counted log lines in: where retention is measured from when a run reads
    no line (a second `--once` over a recorded log must not measure it from today and drop that log's history)."""
    row = store.db.execute("SELECT max(minute) FROM log_minutes").fetchone()
    return row[0] if row else None


def prune(store: Store, before_minute: str, before_at: str, detail_before: str | None = None) -> int:
    """Retention: drop rollups and log counts of minutes before `before_minute`, actions and errors before
    `before_at`, and the minute detail (rollups, action counts) before `detail_before`, whose hours the hourly
    rows keep; `stats` reads windows before that from the hourly rows. Returns the rows dropped."""
    detail = max(before_minute, detail_before or before_minute)
    dropped = 0
    with store.transaction() as db:
        for sql, arg in (
            ("DELETE FROM rollups WHERE minute < ?", detail),
            ("DELETE FROM actions_minutes WHERE minute < ?", detail),
            ("DELETE FROM rollups_hourly WHERE hour < ?", hour_key(before_minute)),
            ("DELETE FROM actions_hourly WHERE hour < ?", hour_key(before_at)),
            ("DELETE FROM log_minutes WHERE minute < ?", before_minute),
            ("DELETE FROM loads WHERE at < ?", before_at),
            ("DELETE FROM errors WHERE at < ?", before_at),
        ):
            dropped += db.execute(sql, (arg,)).rowcount
        if detail_before is not None:
            db.execute(
                "INSERT INTO minute_detail (id, since) VALUES (0, ?) ON CONFLICT (id) DO UPDATE SET "
                "since = max(since, excluded.since)",
                (detail,),
            )
    return dropped


__all__ = [
    "ROLLUP_FIELDS",
    "ActionRow",
    "Outcomes",
    "RollupKey",
    "commit_or_drop",
    "commit_progress",
    "newest_log_minute",
    "prune",
    "read_checkpoints",
]
