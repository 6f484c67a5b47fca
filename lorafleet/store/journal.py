"""The daemon's journal: per-minute outcome rollups, log checkpoints, actions and errors.

`commit_progress` writes one batch in one transaction: the rollups derived from some log lines, the checkpoints
just after those lines, the actions finished meanwhile and the errors. A crash before the commit loses the
batch and its checkpoints together (the lines are read again); after it, both are there (the lines are not read
again). Rollups are added to (`ON CONFLICT … DO UPDATE`), so a minute split over many batches sums correctly.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields

from lorafleet.store.db import Store

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
    """Counts for one (minute, tenant, adapter, engine)."""

    requests: int = 0
    hits: int = 0
    late: int = 0
    misses: int = 0
    gpu_hits: int = 0
    prefetch_hits: int = 0
    cold_ms: float = 0.0
    avoided_ms: float = 0.0

    def add(self, other: Outcomes) -> None:
        self.requests += other.requests
        self.hits += other.hits
        self.late += other.late
        self.misses += other.misses
        self.gpu_hits += other.gpu_hits
        self.prefetch_hits += other.prefetch_hits
        self.cold_ms += other.cold_ms
        self.avoided_ms += other.avoided_ms


assert tuple(f.name for f in fields(Outcomes)) == ROLLUP_FIELDS

RollupKey = tuple[str, str, str, str]  # minute, tenant, adapter, engine


@dataclass(frozen=True)
class CheckpointRow:
    path: str
    device: int
    inode: int
    offset: int
    head_len: int
    head_hash: str


@dataclass(frozen=True)
class ActionRow:
    """One load, touch, unload or eviction the daemon did (or, in shadow mode, would have done)."""

    at: str
    source: str  # daemon, daemon-shadow
    adapter: str
    engine: str
    action: str  # loaded, touched, unloaded, evicted (engine LRU), pinned
    ok: bool
    ms: float | None
    size_bytes: int | None
    error: str | None
    reason: str  # plan, prefetch, demand, keep, reconcile, manual
    unused_prefetch: bool = False  # an eviction of a prefetch no request used


def commit_progress(
    store: Store,
    rollups: Mapping[RollupKey, Outcomes] = {},
    checkpoints: Iterable[CheckpointRow] = (),
    log_counts: Mapping[str, tuple[int, int]] = {},  # minute -> (lines, bad)
    actions: Iterable[ActionRow] = (),
    errors: Iterable[tuple[str, str, str]] = (),  # (at, source, message)
) -> None:
    actions = list(actions)
    with store.transaction() as db:
        db.executemany(
            f"INSERT INTO rollups (minute, tenant, adapter, engine, {', '.join(ROLLUP_FIELDS)}) "
            f"VALUES (?, ?, ?, ?, {', '.join('?' * len(ROLLUP_FIELDS))}) "
            "ON CONFLICT (minute, tenant, adapter, engine) DO UPDATE SET "
            + ", ".join(f"{f} = {f} + excluded.{f}" for f in ROLLUP_FIELDS),
            [(*key, *(getattr(o, f) for f in ROLLUP_FIELDS)) for key, o in rollups.items()],
        )
        now = store.clock()
        db.executemany(
            "INSERT INTO checkpoints (path, device, inode, offset, head_len, head_hash, updated_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (path) DO UPDATE SET device = excluded.device, "
            "inode = excluded.inode, offset = excluded.offset, head_len = excluded.head_len, "
            "head_hash = excluded.head_hash, updated_at = excluded.updated_at",
            [(c.path, c.device, c.inode, c.offset, c.head_len, c.head_hash, now) for c in checkpoints],
        )
        db.executemany(
            "INSERT INTO log_minutes (minute, lines, bad) VALUES (?, ?, ?) ON CONFLICT (minute) DO UPDATE SET "
            "lines = lines + excluded.lines, bad = bad + excluded.bad",
            [(minute, lines, bad) for minute, (lines, bad) in log_counts.items()],
        )
        db.executemany(
            "INSERT INTO loads (at, source, adapter, engine, action, ok, ms, size_bytes, error, reason, "
            "unused_prefetch) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    a.at,
                    a.source,
                    a.adapter,
                    a.engine,
                    a.action,
                    int(a.ok),
                    a.ms,
                    a.size_bytes,
                    a.error,
                    a.reason,
                    int(a.unused_prefetch),
                )
                for a in actions
            ],
        )
        hourly: dict[tuple[str, str, str], Outcomes] = {}
        for (minute, tenant, adapter, engine), o in rollups.items():
            hour = minute[:13] + ":00Z"
            for dim, key in (("all", ""), ("tenant", tenant), ("adapter", adapter), ("engine", engine)):
                found = hourly.get((dim, hour, key))
                if found is None:
                    found = hourly[(dim, hour, key)] = Outcomes()
                found.add(o)
        db.executemany(
            f"INSERT INTO rollups_hourly (dim, hour, key, {', '.join(ROLLUP_FIELDS)}) "
            f"VALUES (?, ?, ?, {', '.join('?' * len(ROLLUP_FIELDS))}) ON CONFLICT (dim, hour, key) DO UPDATE SET "
            + ", ".join(f"{f} = {f} + excluded.{f}" for f in ROLLUP_FIELDS),
            [(*key, *(getattr(o, f) for f in ROLLUP_FIELDS)) for key, o in hourly.items()],
        )
        counts: dict[tuple[str, str, str, str, str, int], list[int]] = {}
        for a in actions:
            hour = a.at[:13] + ":00Z"
            for dim, key in (("all", ""), ("engine", a.engine), ("adapter", a.adapter)):
                cell = counts.setdefault((dim, hour, key, a.action, a.reason or "", int(a.ok)), [0, 0])
                cell[0] += 1
                cell[1] += int(a.unused_prefetch)
        db.executemany(
            "INSERT INTO actions_hourly (dim, hour, key, action, reason, ok, count, unused) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (dim, hour, key, action, reason, ok) DO UPDATE SET "
            "count = count + excluded.count, unused = unused + excluded.unused",
            [(*key, n, unused) for key, (n, unused) in counts.items()],
        )
        db.executemany("INSERT INTO errors (at, source, message) VALUES (?, ?, ?)", list(errors))


def read_checkpoints(store: Store) -> list[CheckpointRow]:
    rows = store.db.execute("SELECT path, device, inode, offset, head_len, head_hash FROM checkpoints ORDER BY path")
    return [CheckpointRow(*row) for row in rows]


def prune(store: Store, before_minute: str, before_at: str) -> int:
    """Retention: drop rollups and log counts of minutes before `before_minute`, actions and errors before
    `before_at`; returns the rows dropped."""
    dropped = 0
    with store.transaction() as db:
        for sql, arg in (
            ("DELETE FROM rollups WHERE minute < ?", before_minute),
            ("DELETE FROM rollups_hourly WHERE hour < ?", before_minute[:13] + ":00Z"),
            ("DELETE FROM actions_hourly WHERE hour < ?", before_at[:13] + ":00Z"),
            ("DELETE FROM log_minutes WHERE minute < ?", before_minute),
            ("DELETE FROM loads WHERE at < ?", before_at),
            ("DELETE FROM errors WHERE at < ?", before_at),
        ):
            dropped += db.execute(sql, (arg,)).rowcount
    return dropped


__all__ = [
    "ROLLUP_FIELDS",
    "ActionRow",
    "CheckpointRow",
    "Outcomes",
    "RollupKey",
    "commit_progress",
    "prune",
    "read_checkpoints",
]
