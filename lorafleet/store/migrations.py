"""The schema as named, ordered migrations: a name once released is never edited, only followed."""

from __future__ import annotations

import sqlite3

MIGRATIONS: tuple[tuple[str, str], ...] = (
    (
        "001_loads",
        """
        CREATE TABLE loads (
            id INTEGER PRIMARY KEY,
            at TEXT NOT NULL,            -- UTC ISO-8601
            source TEXT NOT NULL,        -- warm, daemon
            adapter TEXT NOT NULL,
            engine TEXT NOT NULL,        -- HOST/ENGINE
            action TEXT NOT NULL,        -- loaded, reloaded, already-warm, skipped, failed
            ok INTEGER NOT NULL,
            ms REAL,
            size_bytes INTEGER,
            error TEXT
        );
        CREATE INDEX loads_engine_adapter ON loads (engine, adapter, at);
        """,
    ),
    (
        "002_residency",
        """
        CREATE TABLE residency (
            engine TEXT NOT NULL,
            adapter TEXT NOT NULL,
            size_bytes INTEGER NOT NULL,
            pinned INTEGER NOT NULL DEFAULT 0,
            lru_position INTEGER NOT NULL,   -- grows with each use: the smallest is least recently used
            updated_at TEXT NOT NULL,
            PRIMARY KEY (engine, adapter)
        );
        """,
    ),
    (
        "003_daemon_journal",
        """
        ALTER TABLE loads ADD COLUMN reason TEXT;   -- plan, prefetch, demand, keep, reconcile, manual (daemon rows)
        CREATE INDEX loads_at ON loads (at);
        CREATE TABLE checkpoints (
            path TEXT PRIMARY KEY,           -- the followed path (a glob's match)
            device INTEGER NOT NULL,
            inode INTEGER NOT NULL,
            offset INTEGER NOT NULL,         -- just after the last line whose outcomes are in rollups
            head_len INTEGER NOT NULL,
            head_hash TEXT NOT NULL,         -- sha1 of the file's first head_len bytes: the same file, not a new one
            updated_at TEXT NOT NULL
        );
        CREATE TABLE rollups (
            minute TEXT NOT NULL,            -- UTC 'YYYY-MM-DDTHH:MMZ' of the requests (log time)
            tenant TEXT NOT NULL,            -- '' when the log names none
            adapter TEXT NOT NULL,
            engine TEXT NOT NULL,            -- HOST/ENGINE; '' when no engine can serve it
            requests INTEGER NOT NULL,
            hits INTEGER NOT NULL,
            late INTEGER NOT NULL,
            misses INTEGER NOT NULL,
            gpu_hits INTEGER NOT NULL,
            prefetch_hits INTEGER NOT NULL,  -- hits on an adapter lorafleet loaded or kept ahead of demand
            cold_ms REAL NOT NULL,           -- waited on loads (late: the rest of the load; miss: a whole load)
            avoided_ms REAL NOT NULL,        -- the load time each prefetch hit would otherwise have waited
            PRIMARY KEY (minute, tenant, adapter, engine)
        );
        CREATE INDEX rollups_engine ON rollups (engine, minute);
        CREATE TABLE log_minutes (
            minute TEXT PRIMARY KEY,         -- UTC minute the lines were read (wall clock)
            lines INTEGER NOT NULL,
            bad INTEGER NOT NULL
        );
        CREATE TABLE errors (
            id INTEGER PRIMARY KEY,
            at TEXT NOT NULL,
            source TEXT NOT NULL,            -- daemon, an engine key, a log path
            message TEXT NOT NULL
        );
        CREATE INDEX errors_at ON errors (at);
        """,
    ),
    (
        "004_unused_prefetch",
        """
        ALTER TABLE loads ADD COLUMN unused_prefetch INTEGER NOT NULL DEFAULT 0;  -- an eviction of an unused prefetch
        """,
    ),
    (
        "005_hourly_rollups",
        """
        -- Hourly sums per dimension, written with the minute rows, so stats over days reads hours, not minutes.
        CREATE TABLE rollups_hourly (
            dim TEXT NOT NULL,               -- all, tenant, adapter, engine
            hour TEXT NOT NULL,              -- 'YYYY-MM-DDTHH:00Z'
            key TEXT NOT NULL,               -- '' for dim all
            requests INTEGER NOT NULL,
            hits INTEGER NOT NULL,
            late INTEGER NOT NULL,
            misses INTEGER NOT NULL,
            gpu_hits INTEGER NOT NULL,
            prefetch_hits INTEGER NOT NULL,
            cold_ms REAL NOT NULL,
            avoided_ms REAL NOT NULL,
            PRIMARY KEY (dim, hour, key)
        ) WITHOUT ROWID;
        CREATE TABLE actions_hourly (
            dim TEXT NOT NULL,               -- all, engine, adapter
            hour TEXT NOT NULL,
            key TEXT NOT NULL,               -- '' for dim all
            action TEXT NOT NULL,
            reason TEXT NOT NULL,            -- '' when none
            ok INTEGER NOT NULL,
            count INTEGER NOT NULL,
            unused INTEGER NOT NULL,         -- evictions of unused prefetches
            PRIMARY KEY (dim, hour, key, action, reason, ok)
        ) WITHOUT ROWID;
        INSERT INTO rollups_hourly
            SELECT 'all', substr(minute, 1, 13) || ':00Z', '', SUM(requests), SUM(hits), SUM(late), SUM(misses),
                   SUM(gpu_hits), SUM(prefetch_hits), SUM(cold_ms), SUM(avoided_ms)
            FROM rollups GROUP BY 2;
        INSERT INTO rollups_hourly
            SELECT 'tenant', substr(minute, 1, 13) || ':00Z', tenant, SUM(requests), SUM(hits), SUM(late),
                   SUM(misses), SUM(gpu_hits), SUM(prefetch_hits), SUM(cold_ms), SUM(avoided_ms)
            FROM rollups GROUP BY 2, 3;
        INSERT INTO rollups_hourly
            SELECT 'adapter', substr(minute, 1, 13) || ':00Z', adapter, SUM(requests), SUM(hits), SUM(late),
                   SUM(misses), SUM(gpu_hits), SUM(prefetch_hits), SUM(cold_ms), SUM(avoided_ms)
            FROM rollups GROUP BY 2, 3;
        INSERT INTO rollups_hourly
            SELECT 'engine', substr(minute, 1, 13) || ':00Z', engine, SUM(requests), SUM(hits), SUM(late),
                   SUM(misses), SUM(gpu_hits), SUM(prefetch_hits), SUM(cold_ms), SUM(avoided_ms)
            FROM rollups GROUP BY 2, 3;
        INSERT INTO actions_hourly
            SELECT 'all', substr(at, 1, 13) || ':00Z', '', action, COALESCE(reason, ''), ok, COUNT(*),
                   SUM(unused_prefetch)
            FROM loads GROUP BY 2, 4, 5, 6;
        INSERT INTO actions_hourly
            SELECT 'engine', substr(at, 1, 13) || ':00Z', engine, action, COALESCE(reason, ''), ok, COUNT(*),
                   SUM(unused_prefetch)
            FROM loads GROUP BY 2, 3, 4, 5, 6;
        INSERT INTO actions_hourly
            SELECT 'adapter', substr(at, 1, 13) || ':00Z', adapter, action, COALESCE(reason, ''), ok, COUNT(*),
                   SUM(unused_prefetch)
            FROM loads GROUP BY 2, 3, 4, 5, 6;
        """,
    ),
    (
        "006_log_unknown",
        """
        ALTER TABLE log_minutes ADD COLUMN unknown INTEGER NOT NULL DEFAULT 0;  -- requests naming no inventory adapter
        """,
    ),
    (
        "007_checkpoint_skipping",
        """
        ALTER TABLE checkpoints ADD COLUMN skipping INTEGER NOT NULL DEFAULT 0;  -- inside a counted over-long line
        """,
    ),
    (
        "008_compact_journal",
        """
        -- A journal sized for years: rows only for what an admin audits (loads, unloads, failures, what a reconcile
        -- forgot), the rest counted per minute; minute rows keyed without a rowid; no index that no query uses.
        CREATE TABLE rollups_compact (
            minute TEXT NOT NULL,
            tenant TEXT NOT NULL,
            adapter TEXT NOT NULL,
            engine TEXT NOT NULL,
            requests INTEGER NOT NULL,
            hits INTEGER NOT NULL,
            late INTEGER NOT NULL,
            misses INTEGER NOT NULL,
            gpu_hits INTEGER NOT NULL,
            prefetch_hits INTEGER NOT NULL,
            cold_ms REAL NOT NULL,
            avoided_ms REAL NOT NULL,
            PRIMARY KEY (minute, tenant, adapter, engine)
        ) WITHOUT ROWID;
        INSERT INTO rollups_compact SELECT minute, tenant, adapter, engine, requests, hits, late, misses, gpu_hits,
            prefetch_hits, cold_ms, avoided_ms FROM rollups;
        DROP TABLE rollups;                  -- and its index rollups_engine (no stats query reads it)
        ALTER TABLE rollups_compact RENAME TO rollups;
        DROP INDEX loads_engine_adapter;     -- no query reads it (docs/benchmarks.md has the plans)
        CREATE TABLE actions_minutes (
            minute TEXT NOT NULL,            -- UTC 'YYYY-MM-DDTHH:MMZ' the actions happened in
            source TEXT NOT NULL,
            engine TEXT NOT NULL,
            adapter TEXT NOT NULL,
            action TEXT NOT NULL,
            reason TEXT NOT NULL,            -- '' when none
            ok INTEGER NOT NULL,
            unused INTEGER NOT NULL,         -- 1: evictions of prefetches no request used
            count INTEGER NOT NULL,
            PRIMARY KEY (minute, source, engine, adapter, action, reason, ok, unused)
        ) WITHOUT ROWID;
        -- The rule as of this migration (store/db.py `counted_only`): touches and evictions by the engine's LRU
        -- done, and everything shadow mode simulated, are counted, not listed.
        INSERT INTO actions_minutes
            SELECT substr(at, 1, 16) || 'Z', source, engine, adapter, action, COALESCE(reason, ''), ok,
                   unused_prefetch, COUNT(*)
            FROM loads WHERE source = 'daemon-shadow' OR (ok AND action IN ('touched', 'evicted'))
            GROUP BY 1, 2, 3, 4, 5, 6, 7, 8;
        DELETE FROM loads WHERE source = 'daemon-shadow' OR (ok AND action IN ('touched', 'evicted'));
        CREATE TABLE minute_detail (
            id INTEGER PRIMARY KEY CHECK (id = 0),
            since TEXT NOT NULL              -- minute rows before this minute were dropped (hourly rows remain)
        );
        """,
    ),
    (
        "009_policy_memory",
        """
        -- What the daemon's policy learned (store/memory.py), written with a checkpoint, read back at start.
        CREATE TABLE policy_memory (
            id INTEGER PRIMARY KEY CHECK (id = 0),
            format TEXT NOT NULL,            -- lorafleet version and memory format: another one is refused
            fingerprint TEXT NOT NULL,       -- the inventory it was learned on: another one is refused
            policy TEXT NOT NULL,
            taken_at TEXT NOT NULL,          -- UTC, when it was written
            state BLOB NOT NULL
        );
        """,
    ),
)


def statements(sql: str) -> list[str]:
    """Split a migration into statements (executescript would commit the open transaction first)."""
    out: list[str] = []
    current = ""
    for line in sql.splitlines(keepends=True):
        current += line
        if sqlite3.complete_statement(current):
            out.append(current.strip())
            current = ""
    if current.strip():
        out.append(current.strip())
    return out
